"""The demo: a throwaway project and an agent that looks like Claude Code."""

"""A fleet of loops: one monitor, many tasks, each in its own worktree."""

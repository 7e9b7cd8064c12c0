"""The agent's box: what this machine can run, and the agent's launch wrapped in it."""

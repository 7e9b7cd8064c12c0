"""The project's repository: git within bounds, progress, auto-commit, what a phase did."""

"""Genesis: a self-healing supervisor for unattended coding-agent loops."""

__version__ = "0.1.0"

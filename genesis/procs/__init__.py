"""Processes: identity, ownership, killing a tree, reaping leftovers."""

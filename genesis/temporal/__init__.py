"""The fleet on Temporal (`--engine temporal`): the same tasks, ladder, limits and merge queue
as the local fleet, carried by a Temporal server so that one fleet spans machines.

Only this package imports `temporalio` (the `temporal` extra); the local fleet needs nothing
of it, and `genesis/cli.py` imports these modules only when asked for this engine.
"""

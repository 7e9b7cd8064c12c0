"""`genesis status`: what a project's loop is doing now, and the loops running on this machine.

view.py reads one project's status (frozen records, read-only), with its run's totals;
loops.py finds the running loops from their processes and confirms each by its lock, and
the runs that ended lately; screen.py renders them with rich, once or live, and is the
command's entry point (run_status); document.py is the same as one JSON document (--json).
"""

from genesis.status.loops import Loop, Scanner, running_loops
from genesis.status.screen import run_status
from genesis.status.view import Status, build, layout_of

__all__ = ["run_status", "Status", "build", "layout_of", "Loop", "Scanner", "running_loops"]

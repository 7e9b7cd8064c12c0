"""A process tree for the kill-time benchmark: tree.py LEVELS... (children per level).

Inner nodes are Python, leaves are `sleep`. Every other child starts its own session
(as Claude Code's Bash tool does) and every third one ignores SIGTERM. The root prints
READY once all its descendants have started.
"""

import os
import signal
import subprocess
import sys
import time


def node(widths: list[int], ignore: bool) -> None:
    if ignore:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    kids = []
    for i in range(widths[0] if widths else 0):
        term = signal.SIG_IGN if i % 3 == 2 else signal.SIG_DFL
        if len(widths) > 1:
            argv = [sys.executable, __file__, *map(str, widths[1:])]
        else:
            argv = ["sleep", "600"]

        def pre(term=term, setsid=(i % 2 == 1)):
            if setsid:
                os.setsid()
            signal.signal(signal.SIGTERM, term)
        kids.append(subprocess.Popen(argv, preexec_fn=pre, stdout=subprocess.PIPE if len(widths) > 1 else None))
    for kid in kids:  # wait for each subtree to report itself ready
        if kid.stdout is not None:
            kid.stdout.readline()
    print("READY", flush=True)
    while True:
        time.sleep(60)


if __name__ == "__main__":
    node([int(w) for w in sys.argv[1:]], ignore=False)

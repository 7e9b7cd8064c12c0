"""Process shapes for the tests: listeners, sleepers, detached daemons, forking trees.

  spawn.py listen PORT [TAG]      listen on 127.0.0.1:PORT, then sleep
  spawn.py sleep [TAG]            sleep (TAG only shows in the command line)
  spawn.py stubborn [TAG]         sleep and ignore SIGTERM
  spawn.py detach PIDFILE CMD...  start CMD in a new session, write its pid, exit (orphaning it)
  spawn.py tree DEPTH WIDTH       a tree of sleepers; every other one in its own session,
                                  every third one ignoring SIGTERM
  spawn.py supervise SPEC.json    a watcher of its own: supervise() the agent SPEC describes
                                  (argv, cwd, env, log, heartbeat, run_id, limits) and write
                                  its outcome and notes as JSON to SPEC's "out"

With SPAWN_READY=PATH in its environment, listen, sleep and stubborn create PATH once set
up (listening, SIGTERM ignored): a test waits for that instead of sleeping a guess.
"""

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time


READY = os.environ.pop("SPAWN_READY", None)  # this process's, not its children's


def ready():
    if READY:
        open(READY, "a").close()


def sleep_forever():
    ready()
    while True:
        time.sleep(60)


def supervise(spec_file):
    from pathlib import Path

    from genesis.watch.supervisor import AgentRun, Limits, supervise

    with open(spec_file) as fh:
        spec = json.load(fh)
    run = AgentRun(tuple(spec["argv"]), Path(spec["cwd"]), spec["env"], Path(spec["log"]), Path(spec["heartbeat"]),
                   spec["run_id"], prompt=spec.get("prompt", ""))
    notes = []
    out = supervise(run, Limits(**spec["limits"]), note=notes.append)
    result = {**dataclasses.asdict(out), "notes": notes}
    with open(spec["out"] + ".tmp", "w") as fh:
        json.dump(result, fh)
    os.replace(spec["out"] + ".tmp", spec["out"])


def main(argv):
    what = argv[0]
    if what == "listen":
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", int(argv[1])))
        sock.listen()
        sleep_forever()
    elif what == "sleep":
        sleep_forever()
    elif what == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        sleep_forever()
    elif what == "detach":
        child = subprocess.Popen(argv[2:], start_new_session=True, stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(argv[1] + ".tmp", "w") as fh:
            fh.write(str(child.pid))
        os.replace(argv[1] + ".tmp", argv[1])
    elif what == "supervise":
        supervise(argv[1])
    elif what == "tree":
        depth, width = int(argv[1]), int(argv[2])
        if depth > 0:
            for i in range(width):
                subprocess.Popen([sys.executable, __file__, "tree", str(depth - 1), str(width)],
                                 start_new_session=(i % 2 == 1), stdin=subprocess.DEVNULL)
        if depth % 3 == 0:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        sleep_forever()


if __name__ == "__main__":
    main(sys.argv[1:])

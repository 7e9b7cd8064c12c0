"""The proxy folders a killed watcher leaves under /tmp are swept by the next proxy's start:
only a real 0700 folder of this user's, old enough, whose socket no one listens on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from genesis.sandbox import proxy, proxyfolder
from genesis.sandbox.allowlist import Allowlist

# A proxy started in a process of its own, which is then SIGKILLed: no clean-up runs.
STARTER = """
import sys, time
from genesis.sandbox import proxy
from genesis.sandbox.allowlist import Allowlist
running = proxy.start(Allowlist(()), top=sys.argv[1])
print(running.folder, flush=True)
time.sleep(600)
"""


def killed_proxy(top) -> str:
    child = subprocess.Popen([sys.executable, "-c", STARTER, str(top)], stdout=subprocess.PIPE, text=True)
    folder = child.stdout.readline().strip()
    child.send_signal(signal.SIGKILL)
    child.wait()
    return folder


def aged(path: str, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_a_killed_proxys_folder_is_swept_at_the_next_start_and_nothing_else_is(tmp_path):
    left = killed_proxy(tmp_path)
    assert os.path.exists(os.path.join(left, proxyfolder.SOCKET_NAME))  # SIGKILL left it behind
    aged(left, proxyfolder.LEFT_AFTER + 5)
    recent = killed_proxy(tmp_path)                                  # left just now: a start may be under way
    live = proxy.start(Allowlist(()), top=str(tmp_path))              # listening
    aged(live.folder, proxyfolder.LEFT_AFTER + 5)
    open_to_all = tmp_path / f"{proxyfolder.FOLDER_PREFIX}shared"      # not 0700: not one of ours
    open_to_all.mkdir(mode=0o755)
    os.chmod(open_to_all, 0o755)
    aged(str(open_to_all), proxyfolder.LEFT_AFTER + 5)
    planted = tmp_path / f"{proxyfolder.FOLDER_PREFIX}planted"        # a symlink to a folder of the user's
    target = tmp_path / "mine"
    target.mkdir(mode=0o700)
    (target / proxyfolder.SOCKET_NAME).write_text("")
    planted.symlink_to(target)
    try:
        second = proxy.start(Allowlist(()), top=str(tmp_path))
        try:
            assert not os.path.exists(left)
            assert os.path.exists(recent) and os.path.exists(live.folder) and os.path.exists(second.folder)
            assert open_to_all.is_dir() and planted.is_symlink() and (target / proxyfolder.SOCKET_NAME).exists()
        finally:
            second.stop()
    finally:
        live.stop()
    later = time.time() + proxyfolder.LEFT_AFTER + 5
    assert proxyfolder.sweep(str(tmp_path), now=later) == 1   # the recent one, once old
    assert not os.path.exists(recent)

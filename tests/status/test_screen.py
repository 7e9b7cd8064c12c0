"""`genesis status --watch` in a real terminal (tmux), and when its output is not a terminal."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from helpers.waits import wait_for

import genesis
from genesis.ledger.store import Ledger
from genesis.status.view import layout_of
from genesis.store.atomicio import write_json
from genesis.store.looplock import hold

PY = sys.executable
RUN = "20251121T003000Z-555"
ROOT = str(Path(genesis.__file__).parent.parent)

def watch(project: Path) -> list[str]:
    """The user's command: `genesis --project P status --watch` (a faster re-read for the test)."""
    return [PY, "-m", "genesis", "--project", str(project), "status", "--watch", "--interval", "0.3"]

LEFT = re.compile(r"· (?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)? left")

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


def seconds_left(screen: str) -> int | None:
    found = LEFT.search(screen)
    if not found or not any(found.groups()):
        return None
    hours, minutes, secs = (int(g or 0) for g in found.groups())
    return hours * 3600 + minutes * 60 + secs


class Tmux:
    """A tmux server of the test's own (its own socket), holding one session, "watch"."""

    def __init__(self) -> None:
        self.socket = f"genesis-status-{uuid.uuid4().hex[:12]}"

    def __call__(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, *args], check=True, capture_output=True, text=True,
                              timeout=10).stdout

    def screen(self) -> str:
        return self("capture-pane", "-p", "-t", "watch")

    def until(self, predicate, what: str, timeout: float = 10.0) -> str:
        """The first capture the predicate accepts, within the deadline."""
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            if predicate(screen):
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; the screen:\n{screen}")
            time.sleep(0.1)


@pytest.fixture
def tmux():
    term = Tmux()
    try:
        yield term
    finally:
        subprocess.run(["tmux", "-L", term.socket, "kill-server"], capture_output=True, timeout=10)


@pytest.mark.whole
def test_watch_follows_the_loop_in_a_terminal_and_ends_with_0_on_ctrl_c(project, tmux, tmp_path):
    lay = layout_of(project)
    lay.state_dir.mkdir(parents=True)
    fd = hold(lay.loop_lock, lay.loop_record, RUN)
    led = Ledger.open(lay.ledger_file)
    try:
        now = time.time()
        led.record(RUN, "loop_start", at=now - 60, project=str(project), pid=os.getpid())
        led.record(RUN, "iteration_start", at=now - 60, iteration=1)
        led.record(RUN, "phase_start", at=now - 50, iteration=1, phase="Builder", epoch=now - 50, log="b.log")
        rc = tmp_path / "rc"
        tmux("new-session", "-d", "-s", "watch", "-x", "120", "-y", "40",
             f"{shlex.join(watch(project))}; echo $? > {rc}")

        # The running phase.
        tmux.until(lambda s: "RUNNING" in s and "iteration 1 · Builder · running" in s, "the running Builder")

        # The phase meets a usage limit: the wait's countdown runs down from one capture to the next.
        until = time.time() + 120
        led.record(RUN, "phase_end", iteration=1, phase="Builder", status="exited", returncode=1, ending="limit",
                   duration=50.0)
        write_json(lay.wait_file, {"run_id": RUN, "kind": "limit", "until": until, "reason": "resets 5am",
                                   "phase": "Builder", "iteration": 1, "attempt": 0})
        led.record(RUN, "wait_start", kind="limit", until=until, seconds=120, phase="Builder", iteration=1)
        first = seconds_left(tmux.until(lambda s: seconds_left(s) is not None, "the wait's countdown"))
        later = seconds_left(tmux.until(lambda s: (seconds_left(s) or first) < first, "the countdown to go down"))
        assert 100 < later < first <= 120
        assert "iteration 1 · waiting out a usage limit" in tmux.screen()

        # The wait ends and the next phase starts; then that one ends and another starts.
        os.unlink(lay.wait_file)
        led.record(RUN, "wait_end", kind="limit", waited=3.0, how="done", phase="Builder", iteration=1)
        led.record(RUN, "phase_start", iteration=1, phase="Criticizer", epoch=time.time(), log="c.log")
        screen = tmux.until(lambda s: "iteration 1 · Criticizer · running" in s, "the Criticizer")
        assert seconds_left(screen) is None
        led.record(RUN, "phase_end", iteration=1, phase="Criticizer", status="exited", returncode=0,
                   ending="finished", duration=1.0)
        led.record(RUN, "phase_start", iteration=1, phase="Planner", epoch=time.time(), log="p.log")
        tmux.until(lambda s: "iteration 1 · Planner · running" in s and "Criticizer finished" in s, "the Planner")

        # A resize is drawn at the new width.
        assert len(tmux.screen().splitlines()[0]) == 120
        tmux("resize-window", "-t", "watch", "-x", "80", "-y", "30")
        tmux.until(lambda s: len(s.splitlines()[0]) == 80 and "Planner · running" in s, "the narrower screen")

        tmux("send-keys", "-t", "watch", "C-c")
        wait_for(lambda: rc.exists() and rc.read_text().strip() != "", 10, "the watch to exit")
        assert rc.read_text().strip() == "0"
    finally:
        led.close()
        os.close(fd)


def watch_to_pipe(project: Path) -> subprocess.Popen:
    return subprocess.Popen(watch(project), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, env={**os.environ, "COLUMNS": "120"})


def test_watch_into_a_pipe_prints_a_plain_snapshot_per_interval_until_interrupted(project):
    proc = watch_to_pipe(project)
    try:
        snapshots, lines = 0, []
        while snapshots < 2:
            line = proc.stdout.readline().decode()
            assert line, f"the watch ended early: {proc.stderr.read().decode()}"
            lines.append(line)
            snapshots += "Ctrl-C to quit" in line
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 0
    finally:
        proc.kill()
        proc.wait()
    text = "".join(lines)
    assert "\x1b" not in text                      # plain text: no colours, no cursor movement
    assert text.count("NOT RUNNING  no loop is running on this project") == 2
    assert proc.stderr.read() == b""


def test_watch_into_a_pipe_whose_reader_goes_ends_quietly(project):
    proc = watch_to_pipe(project)
    try:
        assert proc.stdout.readline()
        proc.stdout.close()                         # like `genesis status --watch | head -1`
        assert proc.wait(timeout=10) == 0
        assert proc.stderr.read() == b""
    finally:
        proc.kill()
        proc.wait()


class _SlowView:
    """A view whose reads after the first hang until released, as on a loaded machine with many
    loops to read; its drawings are counted, each with the clock it was drawn at."""

    def __init__(self) -> None:
        import threading

        self.release = threading.Event()
        self.reads = 0
        self.drawn: list[float] = []

    def read(self):
        from genesis.status.screen import Frame

        self.reads += 1
        if self.reads > 1:
            self.release.wait(30)
        return Frame(None, ())

    def draw(self, frame, watching=False):
        self.drawn.append(time.monotonic())
        if len(self.drawn) >= 3:
            raise _Enough
        return "frame"


class _Enough(Exception):
    pass


def test_a_slow_read_never_holds_the_live_screen_whose_clock_moves_each_second():
    """The screen is drawn again every second from the last frame while a read is under way:
    its clock and countdowns move even when reading every loop takes long."""
    import io

    from rich.console import Console

    from genesis.status import screen

    view = _SlowView()
    console = Console(file=io.StringIO(), force_terminal=True, width=80, height=20)
    try:
        with pytest.raises(_Enough):
            screen._live(console, view, interval=0.2)
        assert view.reads == 2, "the second read is the one still under way"
        gaps = [b - a for a, b in zip(view.drawn, view.drawn[1:])]
        assert all(0.5 * screen.TICK <= gap < 5 * screen.TICK for gap in gaps), gaps
    finally:
        view.release.set()

"""Status lines when the output goes away: a reader gone (a killed `| tee`: EPIPE), a terminal
closed (EIO). Real processes, real pipes, a real pseudo-terminal; and the countdown's line."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.loop import GENESIS
from helpers.state import events_of, state_of

from genesis.console import end_line, progress, say
from genesis.ledger.store import Ledger
from genesis.store.layout import private_dir

# Two status lines with a copy in LOG, said once stdin says go (by then the output is gone).
SAYS = ("import sys\n"
        "from pathlib import Path\n"
        "from genesis.console import say\n"
        "sys.stdin.readline()\n"
        "log = Path(sys.argv[1])\n"
        "say('first line', 'warn', copy_to=(log,))\n"
        "say('second line', copy_to=(log,))\n")


def _said(log: Path) -> list[str]:
    return [re.sub(r"^\[genesis \d\d:\d\d:\d\d\] ", "", line) for line in log.read_text().splitlines()]


@pytest.mark.fault(52)
def test_a_reader_gone_costs_the_terminal_copy_not_the_console_log(tmp_path):
    """stdout and stderr into a pipe whose reader was killed (`... 2>&1 | tee`, the tee gone)."""
    log = tmp_path / "console.log"
    read, write = os.pipe()
    os.close(read)
    proc = subprocess.Popen([sys.executable, "-c", SAYS, str(log)], stdin=subprocess.PIPE, stdout=write,
                            stderr=write)
    os.close(write)
    proc.communicate(b"go\n", timeout=30)
    assert proc.returncode == 0
    assert _said(log) == ["first line", "second line"]


@pytest.mark.fault(52)
def test_a_closed_terminal_costs_the_terminal_copy_not_the_console_log(tmp_path):
    """stdout and stderr on a terminal that was closed (its pseudo-terminal's master gone: EIO)."""
    log = tmp_path / "console.log"
    master, slave = os.openpty()
    proc = subprocess.Popen([sys.executable, "-c", SAYS, str(log)], stdin=subprocess.PIPE, stdout=slave,
                            stderr=slave)
    os.close(slave)
    os.close(master)
    proc.communicate(b"go\n", timeout=30)
    assert proc.returncode == 0
    assert _said(log) == ["first line", "second line"]


@pytest.mark.fault(52)
@pytest.mark.parametrize("lost", ["pipe", "terminal"])
def test_a_loop_step_whose_output_is_gone_does_its_work_and_ends_with_its_own_code(project, lost):
    """`genesis finish` (the loop's last step: it records the end and prints the night's
    summary) with its stdout and stderr lost: the end recorded, the summary in the console
    log, exit 0; no traceback, no exit 1."""
    if lost == "pipe":
        keep, out = os.pipe()
    else:
        keep, out = os.openpty()
    os.close(keep)  # the reader killed; the terminal closed
    run_id = "20261124T010203Z-42"
    log = project / "orchestrator" / "logs" / run_id / "console.log"
    log.parent.mkdir(parents=True)  # as the run's preflight makes it, and records its start
    private_dir(state_of(project))
    with Ledger.open(state_of(project) / "ledger.sqlite3") as led:
        led.record(run_id, "loop_start", at=time.time())
    done = subprocess.run(GENESIS + ["--project", str(project), "finish", "--run-id", run_id, "--reason", "test",
                                     "--code", "0"], stdout=out, stderr=out, timeout=60)
    os.close(out)
    assert done.returncode == 0
    assert [e["reason"] for e in events_of(project) if e["event"] == "loop_end"] == ["test"]
    assert f"Genesis run {run_id}" in log.read_text()


def test_an_open_countdown_line_is_ended_before_the_next_line():
    out = io.StringIO()
    progress("usage limit: 5m left", stream=out)
    progress("usage limit: 4m59s left", stream=out)
    say("the wait ends", stream=out)
    end_line(out)  # nothing open any more: nothing written
    text = re.sub(r"\[genesis \d\d:\d\d:\d\d\]", "[t]", out.getvalue())
    assert text == "\r\033[K[t] usage limit: 5m left\r\033[K[t] usage limit: 4m59s left\n[t] the wait ends\n"

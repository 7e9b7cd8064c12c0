"""`genesis status` never says RUNNING for a loop that does not run: FROZEN for a loop whose
process is stopped (with how long), STOPPED for one killed (with when); both exit 5."""

from __future__ import annotations

import io
import os
import signal
import time

from helpers.procs import lock_held
from helpers.waits import wait_for

from genesis import exitcodes
from genesis.ledger.store import Ledger
from genesis.status.screen import run_status
from genesis.status.view import build, layout_of
from genesis.store.looplock import current_holder

RUN = "20251121T003000Z-777"

def shown(project) -> tuple[int, str]:
    out = io.StringIO()
    return run_status(project, out=out), out.getvalue()


def test_a_loop_whose_process_is_stopped_is_frozen_with_how_long(project, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    lay = layout_of(project)
    with lock_held(lay, RUN) as loop:
        with Ledger.open(lay.ledger_file) as led:
            led.record(RUN, "loop_start", project=str(project), pid=loop.pid)
            led.record(RUN, "loop_frozen", pid=loop.pid, since=time.time() - 125)
        assert build(lay).state == "RUNNING"
        os.kill(loop.pid, signal.SIGSTOP)
        wait_for(lambda: build(lay).frozen, 10, "the stop to show")
        code, text = shown(project)
        assert code == exitcodes.NOT_RUNNING
        assert "FROZEN" in text and "stopped by a signal for 2m" in text and "RUNNING" not in text
        assert f"kill -CONT {loop.pid}" in text


def test_a_run_killed_while_a_step_still_holds_the_lock_is_stopped_not_running(project):
    lay = layout_of(project)
    with lock_held(lay, RUN) as step:
        with Ledger.open(lay.ledger_file) as led:
            led.record(RUN, "loop_start", project=str(project), pid=step.pid)
        holder = current_holder(lay.loop_lock, lay.loop_record)
        # The loop is gone (its record names a process that no longer is), its step holds the lock.
        dead = holder.__class__(holder.pid, holder.create_time - 1.0, holder.run_id, holder.started_at, holder.host)
        st = build(lay, holder=dead)
        assert st.state == "STOPPED" and not st.running and st.killed_at is None


def test_a_run_whose_end_says_it_was_killed_is_stopped_with_when(project, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    lay = layout_of(project)
    with Ledger.open(lay.ledger_file) as led:
        led.record(RUN, "loop_start", at=time.time() - 3600, project=str(project), pid=4242)
        led.record(RUN, "loop_end", at=time.time() - 600, exit_code=137,
                   reason="the loop was killed (SIGKILL?) by someone: it ended without recording its end "
                          "(seen by its companion)")
    code, text = shown(project)
    assert code == exitcodes.NOT_RUNNING
    assert "STOPPED" in text and "killed at " in text and "(10m" in text and "RUNNING" not in text

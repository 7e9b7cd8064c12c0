"""The report the loop prints at its end says what became of its final alert, and counts as
told only what a channel took. A real loop (its agent in the default box) whose agent changes
nothing, so that the breaker opens after its first iteration and stops the night (exit 3); a
local HTTP receiver as the webhook."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from helpers.agent import script
from helpers.git import git
from helpers.loop import GENESIS, loop_env, run_loop
from helpers.receiver import Receiver
from helpers.state import events_of
from helpers.waits import wait_for

BREAKER = {"CB_WARNING_THRESHOLD": "1", "CB_STOP_THRESHOLD": "1", "GENESIS_NOTIFY_DESKTOP": "false"}


@pytest.fixture
def idle(project: Path, tmp_path: Path) -> tuple[str, ...]:
    """The loop's arguments for a night whose one phase does nothing."""
    git(project, "config", "user.name", "Agent")
    git(project, "config", "user.email", "agent@example.invalid")
    agent = script(tmp_path / "agent.sh", "#!/usr/bin/env bash\necho \"looked at iteration $GENESIS_ITERATION\"\n")
    return ("--agent-cmd", f"bash {agent}", "--set", "GENESIS_PHASES=Builder")


def final_recorded(project: Path) -> bool:
    return any(e["ticket"].get("final") for e in events_of(project, kind="alert"))


def printed(done: subprocess.CompletedProcess) -> list[str]:
    """The lines of the report the loop printed at its end, without the console's prefix."""
    return [line.split("] ", 1)[-1] for line in (done.stdout + done.stderr).splitlines()]


def report_of(project: Path) -> str:
    done = subprocess.run([*GENESIS, "--project", str(project), "report"], capture_output=True, text=True,
                          timeout=60, env=loop_env())
    assert done.returncode == 0, done.stderr
    return done.stdout


def kpi(lines: list[str], name: str) -> str:
    (line,) = [line for line in lines if line.startswith(name + "  ")]
    return " ".join(line.split())


@pytest.mark.fault(90)
def test_the_printed_report_holds_the_final_alert_and_where_it_went(project, idle):
    with Receiver() as rx:
        done = run_loop(project, *idle, env=loop_env(**BREAKER, GENESIS_NOTIFY_WEBHOOK=f"{rx.url}/hook"))
        assert done.returncode == 3, done.stderr
        got = [r.json["genesis"] for r in rx.requests]
    lines = printed(done)
    assert "final alert: sent to webhook" in lines, "\n".join(lines[-60:])
    assert [t["final"] for t in got][-1] is True  # the receiver got it before the report said so
    # The final ticket is listed with the triage's reason, as the ledger has it.
    (final,) = [e for e in events_of(project, kind="alert") if e["ticket"].get("final")]
    start = next(n for n, line in enumerate(lines) if line.startswith("alerts ("))
    listed = " ".join(" ".join(lines[start:]).split())
    assert (f"{final['ticket']['ticket_id']} " in listed and
            f"{final['ticket']['cause']} (sent to webhook) triage (rules): {final['why']}" in listed), listed
    # Told: what a channel took, or what was folded into the end's message that one took.
    raised = [e for e in events_of(project, kind="alert") if not e["ticket"].get("final") and e["ticket"].get("kind") != "resolved"]
    reached = [e for e in raised if e.get("delivered") or e.get("folded")]
    assert raised, "the breaker raised no ticket"
    assert kpi(lines, "escalation rate") == (
        f"escalation rate {100 * len(reached) / len(raised):.0f}% tickets that reached the operator: a channel took "
        f"{len(reached)} of {len(raised)} ticket{'s' if len(raised) != 1 else ''} raised")


@pytest.mark.fault(90)
def test_a_final_alert_still_being_sent_is_said_and_the_loop_ends_within_its_bound(project, idle):
    """A webhook that does not answer: the report waits a few seconds, then says so."""
    with Receiver(hold=True, hold_max=60) as rx:
        done = run_loop(project, *idle, env=loop_env(**BREAKER, GENESIS_NOTIFY_WEBHOOK=rx.url))
        assert done.returncode == 3, done.stderr
        assert not final_recorded(project)
        assert "final alert: still being sent (webhook)" in printed(done)
        rx.release()
        wait_for(lambda: final_recorded(project), timeout=60, what="the final alert's deliverer to finish")
    assert "final alert: sent to webhook" in report_of(project).splitlines()


@pytest.mark.fault(90)
def test_with_no_channel_set_the_report_says_so_and_counts_no_rate(project, idle):
    done = run_loop(project, *idle, env=loop_env(**BREAKER))
    assert done.returncode == 3, done.stderr
    assert "final alert: no channel set" in printed(done)
    wait_for(lambda: final_recorded(project), timeout=60, what="the final alert's deliverer to finish")
    lines = report_of(project).splitlines()
    assert "final alert: no channel set" in lines
    raised = [e for e in events_of(project, kind="alert") if not e["ticket"].get("final")]
    meant = [e for e in raised if e["decision"] == "intervene" or e.get("folded")]
    assert meant, "the breaker's OPEN is a ticket to tell"
    assert kpi(lines, "escalation rate") == (
        f"escalation rate n/a no alert channel set: {len(meant)} ticket{'s' if len(meant) != 1 else ''} would have "
        f"been told ({len(raised)} raised)")

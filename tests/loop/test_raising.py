"""Step.event raises the ticket its event calls for: recorded first, then handed to a
detached deliverer that the watcher spares; a full disk raises its own ticket."""

from __future__ import annotations

import time

import pytest
from helpers.receiver import Receiver
from helpers.state import events_of
from helpers.waits import wait_for

import genesis.alerts.handoff
import genesis.procs.proctree
from genesis.config import layout_for, resolve
from genesis.loop.step import Step, ledger_of
from genesis.store.atomicio import DiskFull
from genesis.store.layout import private_dir

RUN = "run-raising"


def make_step(project, said: list | None = None, **knobs: str) -> Step:
    cfg = resolve(project, env={"GENESIS_NOTIFY_DESKTOP": "false", "GENESIS_NOTIFY_TIMEOUT_SECONDS": "2",
                                "GENESIS_NOTIFY_RETRIES": "0", **knobs})
    lay = layout_for(cfg)
    private_dir(lay.state_dir)
    return Step(cfg, lay, RUN, lambda msg, kind="info": (said if said is not None else []).append((kind, msg)))


def alerts(project) -> list[dict]:
    return [e for e in events_of(project, RUN) if e["event"] == "alert"]


@pytest.fixture
def launches(monkeypatch):
    """Every dispatch (its pid, deliverer still started for real) and every pid spared."""
    seen = {"dispatched": [], "spared": []}
    dispatch, spare = genesis.alerts.handoff.dispatch, genesis.procs.proctree.spare

    def counted_dispatch(ticket, settings, ledger_path):
        pid = dispatch(ticket, settings, ledger_path)
        seen["dispatched"].append(pid)
        return pid

    def counted_spare(pid):
        seen["spared"].append(pid)
        spare(pid)

    monkeypatch.setattr(genesis.alerts.handoff, "dispatch", counted_dispatch)
    monkeypatch.setattr(genesis.procs.proctree, "spare", counted_spare)
    return seen


def test_an_open_breaker_is_recorded_told_at_the_webhook_and_its_deliverer_spared(project, launches):
    # The OPEN breaker stops the loop: its ticket waits for the loop's end, told in one message with it.
    with Receiver() as rx:
        step = make_step(project, GENESIS_NOTIFY_WEBHOOK=rx.url + "/hook")
        step.event("iteration_end", iteration=3, progress=False, breaker="OPEN", no_progress=5)
        [ended] = [e for e in events_of(project, RUN) if e["event"] == "iteration_end"]
        assert (ended["breaker"], ended["no_progress"]) == ("OPEN", 5)
        step.event("loop_end", reason="the circuit breaker is OPEN", exit_code=3, summary={})
        [request] = rx.wait_for(1)
        wait_for(lambda: len(alerts(project)) == 2, 30, "both deliverers' alert events")
        time.sleep(0.5)
        assert len(rx.requests) == 1  # both recorded: no other message can come now
    assert request.path == "/hook" and "breaker OPEN, loop stopped" in request.body.decode()
    assert "Act: fix the task list" in request.json["text"]  # the breaker's action, not the generic one
    by_kind = {a["ticket"]["kind"]: a for a in alerts(project)}  # either deliverer may have had its turn first
    held, told = by_kind["iteration_end"], by_kind["loop_end"]
    assert (held["decision"], held["folded"], held["delivered"]) == ("dismiss", True, [])
    assert held["ticket"]["kind"] == "iteration_end" and held["ticket"]["severity"] == "critical"
    assert held["ticket"]["run_id"] == RUN and held["ticket"]["iteration"] == 3 and held["ticket"]["holds_for_end"]
    assert (told["decision"], told["delivered"], told["ticket"]["kind"]) == ("intervene", ["webhook"], "loop_end")
    assert request.json["genesis"]["ticket_id"] == told["ticket"]["ticket_id"]
    assert len(launches["dispatched"]) == 2 and launches["spared"] == launches["dispatched"]


def test_a_kind_that_raises_no_ticket_starts_no_deliverer(project, launches):
    with Receiver() as rx:
        step = make_step(project, GENESIS_NOTIFY_WEBHOOK=rx.url)
        step.event("phase_skip", iteration=3, phase="Reviewer", reason="nothing to review")
        step.event("iteration_end", iteration=3, progress=True, breaker="CLOSED", no_progress=0)  # a kind that
        time.sleep(0.5)  # may raise, but not for a closed breaker; a stray deliverer would post by now
        assert rx.requests == []
    assert [e["event"] for e in events_of(project, RUN)] == ["phase_skip", "iteration_end"]
    assert launches == {"dispatched": [], "spared": []}


def test_the_incident_of_a_phase_ended_as_done_starts_no_deliverer(project, launches):
    # Its result was written and it did not exit (window result_exit): no stuck agent to tell of.
    with Receiver() as rx:
        step = make_step(project, GENESIS_NOTIFY_WEBHOOK=rx.url)
        step.event("incident", iteration=1, phase="Builder", id="20261128T081400Z-Builder-i1", kind="done",
                   reason="result written, process did not exit", silent_for=31.0, window="result_exit")
        time.sleep(0.5)
        assert rx.requests == []
    assert [e["event"] for e in events_of(project, RUN)] == ["incident"]
    assert launches == {"dispatched": [], "spared": []}


def test_a_usage_limit_wait_is_dismissed_by_triage_recorded_and_not_told(project, launches):
    with Receiver() as rx:
        step = make_step(project, GENESIS_NOTIFY_WEBHOOK=rx.url)
        step.event("wait_start", iteration=2, phase="Builder", kind="limit", seconds=1800.0,
                   reason="usage limit reached")
        wait_for(lambda: alerts(project), 20, "the deliverer's alert event")
        assert rx.requests == []  # the alert is recorded after any telling: none can come now
    [pid] = launches["dispatched"]
    [alert] = alerts(project)
    assert (alert["decision"], alert["delivered"]) == ("dismiss", [])
    assert alert["ticket"]["severity"] == "low" and alert["ticket"]["kind"] == "wait_start"
    assert launches["spared"] == [pid]


def test_a_full_disk_raises_a_disk_full_ticket_besides_the_events_own(project, monkeypatch):
    said: list = []
    step = make_step(project, said)
    tickets = []
    monkeypatch.setattr(genesis.alerts.handoff, "dispatch", lambda t, settings, path: tickets.append(t) or None)

    def full(*_args, **_detail):
        raise DiskFull(step.layout.ledger_file, 1024, 4096)

    monkeypatch.setattr(ledger_of(step.layout), "record", full)
    step.event("iteration_end", iteration=4, progress=False, breaker="OPEN", no_progress=5)
    assert [(t.kind, t.severity) for t in tickets] == [("disk_full", "critical"), ("iteration_end", "critical")]
    disk = tickets[0]
    assert disk.cause == "disk full" and disk.run_id == RUN
    assert str(step.layout.ledger_file) in disk.evidence and "1024 bytes free, 4096 needed" in disk.evidence
    assert [kind for kind, msg in said if msg.startswith("not recorded in the ledger: iteration end")] == ["error"]


def test_a_full_disk_under_an_event_that_raises_nothing_still_raises_the_disk_full_ticket(project, monkeypatch):
    step = make_step(project)
    tickets = []
    monkeypatch.setattr(genesis.alerts.handoff, "dispatch", lambda t, settings, path: tickets.append(t) or None)

    def full(*_args, **_detail):
        raise DiskFull(step.layout.ledger_file, 0)  # SQLite's "disk is full" knows no size needed

    monkeypatch.setattr(ledger_of(step.layout), "record", full)
    step.event("phase_skip", phase="Reviewer")
    assert [t.kind for t in tickets] == ["disk_full"]
    assert "0 bytes free" in tickets[0].evidence


def test_a_disk_full_tickets_evidence_never_says_none_for_what_is_not_known(project, monkeypatch):
    step = make_step(project)
    tickets = []
    monkeypatch.setattr(genesis.alerts.handoff, "dispatch", lambda t, settings, path: tickets.append(t) or None)

    def full(*_args, **_detail):
        raise DiskFull(step.layout.ledger_file, None)  # free space unknown, size needed unknown

    monkeypatch.setattr(ledger_of(step.layout), "record", full)
    step.event("phase_skip", phase="Reviewer")
    [ticket] = tickets
    assert "None" not in ticket.evidence, ticket.evidence


def test_a_stall_is_raised_once_after_the_commit_decision_with_its_work_and_its_recovery_resolves_it(project,
                                                                                                     monkeypatch):
    step = make_step(project, PHASE_RETRIES="2", GENESIS_MAX_RECOVERIES="3")
    tickets = []
    monkeypatch.setattr(genesis.alerts.handoff, "dispatch", lambda t, settings, path: tickets.append(t) or None)
    # Seen before the kill: the health change and the incident raise nothing (the watcher ends the phase).
    step.event("health", iteration=2, phase="Builder", classification="stuck", stall_score=1.2, reason="r", idle=600.0)
    step.event("incident", iteration=2, phase="Builder", id="20261121T031400-Builder", kind="stuck", reason="r")
    step.event("phase_end", iteration=2, phase="Builder", status="stuck", ending="stuck", attempt=0,
               window="tool_silent")
    step.event("phase_work", iteration=2, phase="Builder", commits=[{"sha": "abc1234", "at": 1.0, "subject": "s"}],
               files_changed=1, tasks_done=[])
    assert tickets == []
    step.event("retry", iteration=2, phase="Builder", type="stuck", count=1, reason="r", old_cmd="a", new_cmd="a",
               night=1)
    [stall] = tickets
    assert (stall.kind, stall.severity, stall.headline) == ("retry", "medium", "Builder stuck, retrying")
    assert "Partial work committed (abc1234)." in stall.lines and "Retrying (retry 1 of 2), 2 retries left tonight." \
        in stall.lines
    assert "a tool call silent past its window" in stall.lines[0]
    step.event("phase_end", iteration=2, phase="Builder", status="exited", ending="finished", attempt=1)
    step.event("phase_work", iteration=2, phase="Builder", commits=[], files_changed=0, tasks_done=[])
    [_, fixed] = tickets
    assert (fixed.kind, fixed.severity, fixed.headline) == ("resolved", "low", "resolved: Builder recovered on retry 1")
    # A first attempt that finished resolves nothing; warn-only (nothing is ended) tells the health change itself.
    step.event("phase_end", iteration=3, phase="Builder", status="exited", ending="finished", attempt=0)
    step.event("phase_work", iteration=3, phase="Builder", commits=[], files_changed=0, tasks_done=[])
    assert len(tickets) == 2
    warn = make_step(project, GENESIS_HEALTH_ENFORCE="false")
    warn.event("health", iteration=4, phase="Builder", classification="stuck", stall_score=1.2, reason="r")
    assert [t.kind for t in tickets[2:]] == ["health"]


def test_a_phase_that_gave_up_is_resolved_when_a_later_iteration_finishes_it(project, monkeypatch):
    step = make_step(project, PHASE_RETRIES="0")
    tickets = []
    monkeypatch.setattr(genesis.alerts.handoff, "dispatch", lambda t, settings, path: tickets.append(t) or None)
    step.event("phase_end", iteration=2, phase="Builder", status="stuck", ending="stuck", attempt=0, window="stale")
    step.event("phase_work", iteration=2, phase="Builder", commits=[], files_changed=0, tasks_done=[])
    step.event("phase_failed", iteration=2, phase="Builder", kind="stuck", reason="r", retries=0)
    [gave_up] = tickets
    assert gave_up.headline == "Builder stuck after 0 retries, gave up"
    # Another phase finishing resolves nothing; the Builder finishing in the next iteration does, once.
    step.event("phase_end", iteration=3, phase="Criticizer", status="exited", ending="finished", attempt=0)
    step.event("phase_work", iteration=3, phase="Criticizer", commits=[], files_changed=0, tasks_done=[])
    step.event("phase_end", iteration=3, phase="Builder", status="exited", ending="finished", attempt=0)
    step.event("phase_work", iteration=3, phase="Builder", commits=[], files_changed=0, tasks_done=[])
    [_, fixed] = tickets
    assert (fixed.kind, fixed.severity, fixed.headline) == ("resolved", "low", "resolved: Builder works again")
    assert fixed.lines[0] == "Builder (iteration 3) finished; it had given up in iteration 2."
    step.event("phase_end", iteration=4, phase="Builder", status="exited", ending="finished", attempt=0)
    step.event("phase_work", iteration=4, phase="Builder", commits=[], files_changed=0, tasks_done=[])
    assert len(tickets) == 2

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
    with Receiver() as rx:
        step = make_step(project, GENESIS_NOTIFY_WEBHOOK=rx.url + "/hook")
        step.event("iteration_end", iteration=3, progress=False, breaker="OPEN", no_progress=5)
        [ended] = [e for e in events_of(project, RUN) if e["event"] == "iteration_end"]
        assert (ended["breaker"], ended["no_progress"]) == ("OPEN", 5)
        [request] = rx.wait_for(1)
        wait_for(lambda: alerts(project), 20, "the deliverer's alert event")
    assert request.path == "/hook" and "breaker OPEN" in request.body.decode()
    [alert] = alerts(project)
    assert (alert["decision"], alert["delivered"], alert["failed"]) == ("intervene", ["webhook"], {})
    assert alert["ticket"]["kind"] == "iteration_end" and alert["ticket"]["severity"] == "critical"
    assert alert["ticket"]["run_id"] == RUN and alert["ticket"]["iteration"] == 3
    [pid] = launches["dispatched"]
    assert pid is not None and launches["spared"] == [pid]


def test_a_kind_that_raises_no_ticket_starts_no_deliverer(project, launches):
    with Receiver() as rx:
        step = make_step(project, GENESIS_NOTIFY_WEBHOOK=rx.url)
        step.event("phase_skip", iteration=3, phase="Reviewer", reason="nothing to review")
        step.event("iteration_end", iteration=3, progress=True, breaker="CLOSED", no_progress=0)  # a kind that
        time.sleep(0.5)  # may raise, but not for a closed breaker; a stray deliverer would post by now
        assert rx.requests == []
    assert [e["event"] for e in events_of(project, RUN)] == ["phase_skip", "iteration_end"]
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

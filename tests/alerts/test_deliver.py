"""The deliverer: triage, notify and record in the real ledger; and dispatch(), which
returns at once and leaves a detached deliverer carrying none of the loop's markers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

import psutil
import pytest
from helpers.receiver import Receiver

from genesis.alerts.deliver import LedgerBook, deadline_seconds, run
from genesis.alerts.handoff import dispatch
from genesis.alerts.settings import AlertSettings
from genesis.alerts.tickets import Ticket, epoch_of, iso
from genesis.ledger.store import Ledger

T0 = epoch_of("2026-11-21T03:14:00Z")
FAST = AlertSettings(desktop="false", timeout=1.0, retries=1, backoff=(0.05,))
MARKERS = {"GENESIS_RUN_ID": "run-deliver", "GENESIS_AGENT": "Builder", "GENESIS_HEARTBEAT_FILE": "/tmp/hb.json",
           "GENESIS_ITERATION": "3", "GENESIS_PROJECT_DIR": "/src/myapp", "GENESIS_LOOP_PID": "4242"}


def ticket(n: int = 1, minutes: float = 0.0, **change) -> Ticket:
    base = Ticket(ticket_id=f"{n:032x}", created_at=iso(T0 + minutes * 60), run_id="run-1", iteration=3,
                  phase="Builder", project="/src/myapp", severity="high", cause="Builder wedged",
                  reasoning="the agent keeps calling tools and gets nowhere", suggested_action="read its log",
                  evidence="doom_loop: the last 12 calls cycle over 2 inputs", steps_since_success=12,
                  stall_minutes=None, kind="health", final=False)
    return replace(base, **change)


def alerts(path: Path) -> list[dict]:
    with Ledger.open(path, readonly=True) as led:
        return led.events(kinds=["alert"])


class FakeBook:
    """A book whose memory of told tickets is scripted and whose records are kept."""

    def __init__(self, told: list[Ticket] | Exception = ()):
        self._told, self.records, self.asked = told, [], []

    def turn(self, wait: float):
        return nullcontext()

    def told(self, since: float) -> list[Ticket]:
        self.asked.append(since)
        if isinstance(self._told, Exception):
            raise self._told
        return list(self._told)

    def record(self, run_id: str, detail: dict) -> None:
        self.records.append((run_id, detail))


# --- the deliverer's work, in this process ------------------------------------------------------

def test_an_intervening_ticket_is_told_and_its_outcome_recorded_in_the_ledger(tmp_path):
    path = tmp_path / "ledger.sqlite"
    with Receiver() as rx:
        detail = run(ticket(), replace(FAST, webhook=rx.url), LedgerBook(path))
    assert len(rx.requests) == 1
    [event] = alerts(path)
    assert (event["run_id"], event["decision"], event["by"], event["why"]) == ("run-1", "intervene", "rules",
                                                                               "high severity")
    assert (event["delivered"], event["failed"]) == (["webhook"], {})
    assert Ticket.from_json(event["ticket"]) == ticket()
    assert {k: event[k] for k in detail} == detail
    with Ledger.open(path, readonly=True) as led:
        [row] = led.query("SELECT ticket_id, decision, decided_by, cause FROM alerts")
    assert tuple(row) == ("0" * 31 + "1", "intervene", "rules", "Builder wedged")


def test_the_same_cause_soon_after_is_dismissed_from_what_the_ledger_says_was_told(tmp_path):
    path = tmp_path / "ledger.sqlite"
    with Receiver() as rx:
        s = replace(FAST, webhook=rx.url)
        run(ticket(1), s, LedgerBook(path))
        second = run(ticket(2, minutes=5), s, LedgerBook(path))
        other = run(ticket(3, minutes=6, cause="Criticizer wedged"), s, LedgerBook(path))
        later = run(ticket(4, minutes=40), s, LedgerBook(path))
    assert second["decision"] == "dismiss" and "told at 2026-11-21T03:14:00Z" in second["why"]
    assert (other["decision"], later["decision"]) == ("intervene", "intervene")
    assert len(rx.requests) == 3
    assert [e["decision"] for e in alerts(path)] == ["intervene", "dismiss", "intervene", "intervene"]


def test_an_alert_no_channel_delivered_is_not_counted_as_told(tmp_path):
    path = tmp_path / "ledger.sqlite"
    with Receiver(status=404) as rx:
        first = run(ticket(1), replace(FAST, webhook=rx.url), LedgerBook(path))
    with Receiver() as rx:
        second = run(ticket(2, minutes=5), replace(FAST, webhook=rx.url), LedgerBook(path))
    assert first["failed"] == {"webhook": "HTTP 404 (try 1 of 2)"} and first["delivered"] == []
    assert (second["decision"], second["delivered"]) == ("intervene", ["webhook"])


def test_a_dismissed_ticket_is_recorded_and_nothing_is_sent():
    book = FakeBook()
    with Receiver() as rx:
        detail = run(ticket(severity="medium", evidence="quiet", steps_since_success=2), replace(FAST, webhook=rx.url),
                     book)
    assert rx.requests == []
    assert (detail["decision"], detail["delivered"], detail["failed"]) == ("dismiss", [], {})
    assert book.records == [("run-1", detail)]
    assert book.asked == [T0 - 30 * 60]  # what was told in the 30 minutes before the ticket


def test_an_unreadable_memory_still_tells_and_says_so():
    book = FakeBook(told=OSError("disk gone"))
    with Receiver() as rx:
        detail = run(ticket(), replace(FAST, webhook=rx.url), book)
    assert detail["decision"] == "intervene" and detail["delivered"] == ["webhook"]
    assert detail["why"].startswith("(what was told lately is unknown: OSError)")


def test_a_failing_record_does_not_raise():
    class Unwritable(FakeBook):
        def record(self, run_id, detail):
            raise OSError("read-only file system")

    assert run(ticket(severity="low", steps_since_success=0), FAST, Unwritable())["decision"] == "dismiss"


def test_the_deadline_covers_the_triage_command_and_every_try():
    assert deadline_seconds(AlertSettings()) == 10.0 * 3 + 1.0 + 2.0 + 5.0
    assert deadline_seconds(AlertSettings(triage_command=("judge",))) == 60.0 + 38.0
    assert deadline_seconds(AlertSettings(timeout=300.0, retries=10, triage_command=("j",),
                                          triage_timeout=1800.0)) == 900.0


# --- the detached deliverer ---------------------------------------------------------------------

@pytest.mark.fault(50)
def test_dispatch_returns_before_the_webhook_is_answered_and_the_deliverer_carries_no_marker(tmp_path, monkeypatch):
    for key, value in {**MARKERS, "MY_API_KEY": "supersecretvalue123"}.items():
        monkeypatch.setenv(key, value)
    path = tmp_path / "ledger.sqlite"
    with Receiver(hold=True) as rx:
        pid = dispatch(ticket(evidence="doom_loop; MY_API_KEY=supersecretvalue123"), replace(FAST, webhook=rx.url),
                       path)
        rx.note("dispatch returned")
        assert pid is not None
        rx.wait_for(1)  # the deliverer is blocked on the held answer: alive, and looked at now
        proc = psutil.Process(pid)
        env = proc.environ()
        assert [k for k in env if k in MARKERS] == []
        assert os.getsid(pid) == pid != os.getsid(0)  # a session of its own
        rx.release()
        proc.wait(20)
    # the answer waited for the test's release, which came after dispatch had returned
    assert rx.log.index("dispatch returned") < rx.log.index("answered") and rx.released_in_time == [True]
    assert b"supersecretvalue123" not in rx.requests[0].body
    [event] = alerts(path)
    assert (event["decision"], event["delivered"]) == ("intervene", ["webhook"])


@pytest.mark.fault(50)
def test_a_deliverer_whose_receiver_hangs_still_finishes_and_records_the_failure(tmp_path):
    path = tmp_path / "ledger.sqlite"
    with Receiver(delay=5.0) as rx:
        pid = dispatch(ticket(), replace(FAST, webhook=rx.url, timeout=0.5, retries=0), path)
        psutil.Process(pid).wait(20)
    [event] = alerts(path)
    assert (event["delivered"], event["failed"]) == ([], {"webhook": "no answer within 0.5s"})


def test_the_deliverer_swallows_a_bad_document_silently(tmp_path):
    for document in (b"not json", json.dumps({"ticket": {"ticket_id": "x"}}).encode(), b""):
        done = subprocess.run([sys.executable, "-m", "genesis.alerts.deliver"], input=document, capture_output=True,
                              timeout=30)
        assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")


def test_a_ledger_that_cannot_be_written_still_lets_the_alert_go_out(tmp_path):
    blocker = tmp_path / "state"
    blocker.write_text("a file where the ledger's folder should be")
    with Receiver() as rx:
        pid = dispatch(ticket(), replace(FAST, webhook=rx.url), blocker / "ledger.sqlite")
        psutil.Process(pid).wait(20)
    assert [r.answered for r in rx.requests] == [200]


def test_a_phase_that_works_again_resolves_its_told_give_up_of_an_earlier_iteration():
    from genesis.alerts.deliver import _resolving
    from genesis.alerts.tickets import ticket_for

    gave_up = ticket_for({"event": "phase_failed", "iteration": 2, "phase": "Builder", "kind": "stuck", "reason": "r",
                          "retries": 0, "run_id": "r1", "at": "2026-11-21T03:00:00Z"}, "/p")
    other = ticket_for({"event": "phase_failed", "iteration": 2, "phase": "Criticizer", "kind": "stuck",
                        "reason": "r", "retries": 0, "run_id": "r1", "at": "2026-11-21T03:00:00Z"}, "/p")
    fixed = ticket_for({"event": "resolved", "iteration": 3, "phase": "Builder", "attempt": 0, "fixes": 2,
                        "run_id": "r1", "at": "2026-11-21T03:10:00Z"}, "/p")
    assert _resolving(fixed, [gave_up, other]).resolves == gave_up.ticket_id
    later = ticket_for({"event": "resolved", "iteration": 2, "phase": "Builder", "attempt": 0, "fixes": 1,
                        "run_id": "r1", "at": "2026-11-21T03:10:00Z"}, "/p")
    assert _resolving(later, [gave_up]).resolves is None  # a give-up of the same iteration is not undone by it

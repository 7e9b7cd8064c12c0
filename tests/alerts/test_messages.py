"""What an alert says and when: a title naming the project and the cause, a few lines (what
happened, what Genesis did, whether to act); a stall being retried told quietly, its
recovery told as a resolution of it; a ticket whose event ends the loop told with the loop's
end; the end of the night summed up; the work said as it is."""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import replace
from types import SimpleNamespace

import pytest

import genesis.alerts.deliver as deliver
from genesis.alerts.message import PRIORITY, ntfy_headers, slack_payload, text, title
from genesis.alerts.settings import AlertSettings
from genesis.alerts.tickets import Ticket, ticket_for
from genesis.alerts.triage import by_rules

AT = "2026-11-21T03:14:00Z"
PROJECT = "/home/me/src/night2"
ENV = {"PATH": "/usr/bin:/bin"}
WORK = {"commits": [{"sha": "abc1234", "at": 1.0, "subject": "Builder: partial work (stuck)"}], "files_changed": 2,
        "tasks_done": []}


def make(kind: str, /, **detail) -> Ticket:
    made = ticket_for({"at": AT, "run_id": "run-1", "event": kind, **detail}, PROJECT, env=ENV)
    assert made is not None
    return made


def retry(**detail) -> Ticket:
    return make("retry", **{"iteration": 2, "phase": "Builder", "type": "stuck", "count": 1, "night": 1,
                            "allowed": 2, "night_allowed": 2, "reason": "no heartbeat for 900s", "work": WORK,
                            **detail})


@pytest.mark.fault(88)
def test_a_stall_being_retried_is_one_quiet_message_that_says_what_genesis_did_and_that_you_need_not_act():
    t = retry()
    assert t.severity == "medium" and PRIORITY[t.severity] == "default"   # not high: nobody is woken
    assert title(t, ENV) == "night2: Builder stuck, retrying"
    said = text(t, ENV).splitlines()
    assert said[0] == "night2: Builder stuck, retrying" and len(said) <= 6
    assert "Partial work committed (abc1234)." in said
    assert "Retrying (retry 1 of 2), 1 retry left tonight." in said
    assert said[-1].startswith("Nothing to do")
    assert "lost" not in text(t, ENV) and "`" not in text(t, ENV)  # no shell command in the body
    assert len(text(t, ENV)) < 300
    assert by_rules(t, []).decision == "intervene"
    assert ntfy_headers(t, ENV)["X-Sequence-ID"] == t.ticket_id  # its resolution replaces it on ntfy 2.16+


def test_a_ticket_says_nothing_was_committed_when_nothing_was_and_nothing_of_work_when_it_is_not_known():
    assert "Nothing was committed." in retry(work={"commits": [], "files_changed": 0}).lines
    unknown = retry(work=None)
    assert not any("commit" in line for line in unknown.lines)
    failed = make("phase_failed", iteration=2, phase="Builder", kind="stuck", retries=2, reason="x", work=WORK)
    assert failed.severity == "high" and "Partial work committed (abc1234)." in failed.lines
    assert failed.lines[-1].startswith("Act:")


def test_the_window_that_ended_the_phase_is_named_and_the_old_words_stay_without_one():
    assert "a tool call silent past its window" in retry(window="tool_silent").lines[0]
    assert "over its runtime cap" in retry(window="runtime").lines[0]
    assert "no heartbeat for the stale window" in retry().lines[0]
    incident = make("incident", iteration=2, phase="Builder", id="20261121T031400-Builder", kind="stuck",
                    reason="r", window="tool_busy")
    assert "one tool call running past its limit" in incident.reasoning and "lost" not in incident.reasoning


def test_a_resolution_is_low_finds_the_told_stall_and_is_told_only_when_the_stall_was(monkeypatch):
    monkeypatch.setattr(deliver, "FOLD_RESOLVED", 0.2)
    stall = retry()
    fixed = make("resolved", iteration=2, phase="Builder", attempt=1, work=WORK)
    assert fixed.severity == "low" and PRIORITY[fixed.severity] == "low"
    assert title(fixed, ENV) == "night2: resolved: Builder recovered on retry 1"
    assert by_rules(fixed, [stall]).decision == "dismiss"          # not yet linked: nothing to resolve
    book = Book(told=[stall])
    detail = deliver.run(fixed, AlertSettings(desktop="false"), book, env=ENV)
    assert (detail["decision"], detail["ticket"]["resolves"]) == ("intervene", stall.ticket_id)
    other = Book(told=[replace(stall, iteration=1)])             # a stall of another iteration: not this one
    assert deliver.run(fixed, AlertSettings(desktop="false"), other, env=ENV)["decision"] == "dismiss"
    linked = replace(fixed, resolves=stall.ticket_id)
    assert ntfy_headers(linked, ENV)["X-Sequence-ID"] == stall.ticket_id
    assert slack_payload(linked, ENV)["genesis"]["resolves"] == stall.ticket_id


SUMMARY = {"tasks_done": 3, "tasks_total": 4, "tasks_tonight": 2, "commits": 5, "iterations": 3, "abnormal": 1,
           "incidents": 1, "cost_usd": 1.5, "duration": 5 * 3600 + 12 * 60}


def test_the_end_of_the_night_is_a_summary():
    t = make("loop_end", reason="done: the work is finished (GENESIS_DONE_WHEN)", exit_code=0, summary=SUMMARY)
    said = text(t, ENV).splitlines()
    assert said[0] == "night2: night over: 3/4 tasks done"
    assert "Ended: done: the work is finished (GENESIS_DONE_WHEN) (exit 0)." in said
    assert "Tasks: 3 of 4 done (2 tonight), 1 open." in said
    assert "5 commits, 3 iterations, 1 abnormal phase, 1 incident." in said
    assert any(line.startswith("Cost $1.50") and "5h" in line for line in said), said
    assert said[-1].startswith("Nothing to do") and t.severity == "low"
    stopped = make("loop_end", reason="the circuit breaker is OPEN", exit_code=3, summary={})
    assert title(stopped, ENV) == "night2: breaker OPEN, loop stopped"
    assert stopped.lines[-1].startswith("Act: fix the task list") and "Cost not known." in stopped.lines


class Book:
    """The deliverer's book, scripted: what was told, whether the run's end is recorded."""

    def __init__(self, told=(), ended=False, folded=()):
        self._told, self._ended, self._folded, self.records = list(told), ended, list(folded), []

    def turn(self, wait):
        return nullcontext()

    def told(self, since):
        return list(self._told)

    def record(self, run_id, detail):
        self.records.append(detail)

    def ended(self, run_id):
        return self._ended() if callable(self._ended) else self._ended

    def folded(self, run_id, since):
        return list(self._folded)


def test_a_ticket_whose_event_ends_the_loop_is_folded_into_the_loops_end_or_told_alone_when_it_never_comes(
        monkeypatch):
    opened = make("iteration_end", iteration=3, breaker="OPEN", no_progress=5, ends_loop=True)
    assert opened.holds_for_end and title(opened, ENV) == "night2: breaker OPEN, loop stopped"
    sent = []
    monkeypatch.setattr(deliver.notify, "tell", lambda ticket, settings, deadline, env, to=None: sent.append(ticket) or
                        SimpleNamespace(delivered=["webhook"], failed={}, skipped={}))
    asked = iter([False, False, True])
    folded = deliver.run(opened, AlertSettings(desktop="false"), Book(ended=lambda: next(asked)), env=ENV)
    assert (folded["decision"], folded["folded"], sent) == ("dismiss", True, [])
    # The loop died before its end: after the hold, the ticket is told alone.
    monkeypatch.setattr(deliver, "HOLD_FOR_END", 0.3)
    alone = deliver.run(opened, AlertSettings(desktop="false"), Book(ended=False), env=ENV)
    assert (alone["decision"], alone["delivered"], sent) == ("intervene", ["webhook"], [opened])
    # The loop end's message names what was folded into it, and takes its action.
    end = make("loop_end", reason="the circuit breaker is OPEN", exit_code=3, summary=SUMMARY)
    spent = make("recovery_spent", iteration=3, phase="Builder", retries=4, ends_loop=True)
    deliver.run(end, AlertSettings(desktop="false"), Book(folded=[opened, spent]), env=ENV)
    told = sent[-1]
    assert told.kind == "loop_end" and len(told.lines) <= 8
    assert "Also: 5 iterations in a row changed nothing in the repository." in told.lines  # same title: its line
    assert "Also: recovery budget spent, loop stopped" in told.lines
    assert told.lines[-1].startswith("Act: read the incidents")

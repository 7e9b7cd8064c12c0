"""Tickets: each event kind the loop records maps to its ticket (or to none), every field
is checked, the JSON round-trips, and no secret survives into a ticket's text."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import replace

import pytest

from genesis.redact import MARK, redact
from genesis.alerts.tickets import LIMIT_CAUSE, OUTAGE_CAUSE, Ticket, ticket_for
from genesis.hints import hint

AT = "2026-11-21T03:14:00Z"
KEY = "sk-ant-api03-Zx9_kQ7-vB2mN4pL8rT1yW6uE3oI5aS0dF"
ENV = {"MY_API_KEY": "supersecretvalue123", "PATH": "/usr/bin:/bin", "SHORT_TOKEN": "abc"}


def event(kind: str, /, **detail) -> dict:
    """An event as the ledger gives it back: at, run_id, event, then the step's detail."""
    return {"at": AT, "run_id": "run-1", "event": kind, "id": 7, "epoch": 1795245240.0, **detail}


def make(kind: str, /, **detail) -> Ticket | None:
    return ticket_for(event(kind, **detail), "/home/me/src/myapp", env=ENV)


def test_health_stuck_is_medium_and_wedged_is_high_with_the_reason_as_evidence():
    stuck = make("health", iteration=3, phase="Builder", classification="stuck", stall_score=1.2,
                 reason="no heartbeat for 900.0s (stale after 900s)")
    assert (stuck.severity, stuck.cause, stuck.kind, stuck.final) == ("medium", "Builder stuck", "health", False)
    assert (stuck.iteration, stuck.phase, stuck.run_id, stuck.created_at) == (3, "Builder", "run-1", AT)
    assert "no heartbeat for 900.0s" in stuck.evidence and "iteration 3" in stuck.evidence
    wedged = make("health", iteration=3, phase="Builder", classification="wedged", stall_score=0.0,
                  reason="doom_loop: the last 12 calls cycle over 2 inputs and the repository did not change")
    assert (wedged.severity, wedged.cause) == ("high", "Builder wedged")
    assert "doom_loop: the last 12 calls" in wedged.evidence
    for healthy in ("healthy", "slow"):
        assert make("health", iteration=3, phase="Builder", classification=healthy, stall_score=0.6,
                    reason="") is None


def test_health_carries_steps_and_stall_minutes_when_the_event_has_them():
    t = make("health", iteration=1, phase="Builder", classification="stuck", stall_score=1.0, reason="x",
             idle=330.0, steps_since_success=12)
    assert (t.stall_minutes, t.steps_since_success) == (5.5, 12)
    bare = make("health", iteration=1, phase="Builder", classification="stuck", stall_score=1.0, reason="x")
    assert (bare.stall_minutes, bare.steps_since_success) == (None, None)


def test_an_incident_is_high_and_shares_the_health_tickets_cause():
    for kind, cause in (("stuck", "Criticizer stuck"), ("wedged", "Criticizer wedged"),
                        ("overtime", "Criticizer over time")):
        t = make("incident", iteration=2, phase="Criticizer", id="20261121T031400-Criticizer", kind=kind,
                 reason="no heartbeat for 900.0s", silent_for=912.0)
        assert (t.severity, t.cause, t.stall_minutes) == ("high", cause, 15.2)
        assert t.suggested_action.startswith(
            f"`{hint('/home/me/src/myapp', 'incidents', 'show', '20261121T031400-Criticizer')}` says")
        assert "no heartbeat for 900.0s" in t.evidence
    # read back from the ledger, "id" is the event's row number: no incident id is made up from it
    t = ticket_for({**event("incident", iteration=2, phase="Criticizer", kind="stuck"), "id": 41}, "/p")
    assert t.suggested_action == f"read `{hint('/p', 'incidents')}`" and "41" not in t.evidence


@pytest.mark.fault(65)
def test_every_command_a_ticket_suggests_acts_on_the_ticket_s_project():
    tickets = [make("health", iteration=1, phase="Builder", classification="wedged", stall_score=1.0, reason="x"),
               make("incident", iteration=2, phase="Builder", id="20261121T031400Z-Builder-i1", kind="stuck"),
               make("phase_failed", iteration=2, phase="Builder", kind="stuck", retries=1, reason="x"),
               make("recovery_spent", iteration=2, phase="Builder", retries=8),
               make("iteration_end", iteration=7, progress=False, breaker="OPEN", no_progress=5, waited=False),
               make("loop_end", reason="done", exit_code=0), make("loop_end", reason="breaker", exit_code=3)]
    for t in tickets:
        commands = re.findall(r"`([^`]*)`", t.suggested_action)
        assert commands, t.suggested_action
        for command in commands:
            words = shlex.split(command)
            assert words[words.index("--project") + 1] == "/home/me/src/myapp", command


def test_phase_failed_is_high_and_recovery_spent_is_critical():
    failed = make("phase_failed", iteration=4, phase="Builder", kind="wedged", reason="stall_same_tool: ...",
                  retries=1)
    assert (failed.severity, failed.cause, failed.steps_since_success) == ("high", "Builder failed for the "
                                                                                   "iteration", 2)
    spent = make("recovery_spent", iteration=4, phase="Builder", retries=8)
    assert (spent.severity, spent.cause) == ("critical", "the night's recovery budget is spent")
    assert "8 retries" in spent.evidence


def test_the_breaker_half_open_is_medium_open_is_critical_closed_is_nothing():
    half = make("iteration_end", iteration=5, progress=False, breaker="HALF_OPEN", no_progress=3, waited=False)
    opened = make("iteration_end", iteration=7, progress=False, breaker="OPEN", no_progress=5, waited=False)
    assert (half.severity, opened.severity) == ("medium", "critical")
    assert "5 iteration(s) in a row without a change" in opened.evidence
    assert make("iteration_end", iteration=5, progress=True, breaker="CLOSED", no_progress=0, waited=False) is None


def test_waits_a_limit_is_low_an_outage_medium_with_its_attempt_others_nothing():
    limit = make("wait_start", kind="limit", until=1795263240.0, seconds=18000.0, phase="Builder", iteration=2,
                 attempt=0, reason="usage limit (five_hour), resets 2026-11-21 08:14")
    assert (limit.severity, limit.cause, limit.stall_minutes) == ("low", LIMIT_CAUSE, 300.0)
    outage = make("wait_start", kind="outage", until=1795245300.0, seconds=60.0, phase="Builder", iteration=2,
                  attempt=2, reason="API error 529 overloaded_error")
    assert (outage.severity, outage.cause, outage.steps_since_success, outage.stall_minutes) == (
        "medium", OUTAGE_CAUSE, 2, 1.0)
    for kind in ("cooldown", "retry"):
        assert make("wait_start", kind=kind, until=0.0, seconds=10.0, phase="", iteration=2, attempt=1,
                    reason="x") is None


def test_disk_full_is_critical():
    t = make("disk_full", path="/var/tmp/state", free=1024, needed=65536)
    assert (t.severity, t.cause, t.iteration, t.phase) == ("critical", "disk full", None, None)
    assert "1024 bytes free, 65536 needed" in t.evidence


@pytest.mark.parametrize("code, severity", [(0, "low"), (3, "critical"), (20, "critical"), (25, "critical"),
                                            (1, "high"), (6, "high"), (130, "high")])
def test_the_loops_end_is_final_and_its_severity_follows_the_exit_code(code, severity):
    t = make("loop_end", reason="done: every task in TASKS.md is done" if code == 0 else "stopped", exit_code=code)
    assert (t.final, t.severity) == (True, severity)
    assert f"exit {code}" in t.evidence


def test_other_events_raise_no_ticket():
    for kind in ("phase_start", "phase_end", "phase_work", "wait_end", "loop_start", "alert", "tamper"):
        assert make(kind, iteration=1, phase="Builder") is None


def test_a_bad_at_falls_back_to_now_and_a_long_reason_is_cut_to_the_evidence_limit():
    t = ticket_for({"event": "phase_failed", "run_id": "r", "at": "yesterday", "phase": "B", "iteration": 1,
                    "kind": "stuck", "reason": "x" * 5000, "retries": 1}, "p")
    assert t.created_at.endswith("Z") and t.created_at != "yesterday"
    assert len(t.evidence) == 500 and t.evidence.endswith("...")


@pytest.mark.fault(51)
def test_secrets_are_redacted_from_every_text_of_a_ticket():
    reason = f"curl -H 'x-api-key: {KEY}' failed; MY_API_KEY=supersecretvalue123; token=ghp_abcdefghijklmnop1234"
    t = make("phase_failed", iteration=1, phase="Builder", kind="wedged", reason=reason, retries=1)
    text = json.dumps(t.to_json())
    assert "supersecretvalue123" not in text and KEY not in text and "ghp_abcdef" not in text
    assert "sk-ant-" not in text
    assert MARK in t.evidence


def test_redact_covers_the_token_shapes_and_labelled_values_and_keeps_ordinary_words():
    cases = {
        "sk-proj-abcdefghijklmnop": MARK,
        "ghp_abcdefghijklmnop1234 gho_abcdefghijklmnop1234": f"{MARK} {MARK}",
        "github_pat_11ABCDEFG0abcdefghijkl": MARK,
        "xoxb-1234-5678-abcdefgh": MARK,
        "AKIAIOSFODNN7EXAMPLE": MARK,
        "Authorization: Bearer abc.def.ghi123": f"Authorization: {MARK}",
        "bearer abcdefgh12345": f"bearer {MARK}",
        "password=hunter22 secret: 's p a c e' api_key=zzz&x=1": f"password={MARK} secret: {MARK} api_key={MARK}&x=1",
        '{"password": "s3cr3t"}': f'{{"password": {MARK}}}',
        "https://user:pa55@example.com/x": f"https://{MARK}@example.com/x",
        "MY_API_KEY is supersecretvalue123!": f"MY_API_KEY is {MARK}!",
        # ordinary text stays: no false positives on words near the patterns
        "input_tokens=500; the token expired; task-abcdefghijkl; risk-assessment": None,
        "SHORT_TOKEN abc stays (too short to hide)": None,
    }
    for text, expected in cases.items():
        assert redact(text, ENV) == (text if expected is None else expected), text


def valid() -> Ticket:
    return make("phase_failed", iteration=1, phase="Builder", kind="stuck", reason="r", retries=1)


@pytest.mark.parametrize("change, message", [
    ({"severity": "urgent"}, "severity 'urgent' is not one of low, medium, high, critical"),
    ({"evidence": "e" * 501}, "evidence is 501 characters long; at most 500"),
    ({"cause": ""}, "cause is empty"),
    ({"cause": "c" * 201}, "cause is 201 characters long"),
    ({"reasoning": "  "}, "reasoning is empty"),
    ({"suggested_action": ""}, "suggested_action is empty"),
    ({"ticket_id": "not-hex"}, "ticket_id 'not-hex' is not a uuid4 hex string"),
    ({"created_at": "2026-11-21 03:14"}, "created_at '2026-11-21 03:14' is not a UTC time"),
    ({"iteration": -1}, "iteration -1 is not a whole number"),
    ({"iteration": True}, "iteration True is not a whole number"),
    ({"steps_since_success": 1.5}, "steps_since_success 1.5 is not a whole number"),
    ({"stall_minutes": -2.0}, "stall_minutes -2.0 is not a number of minutes"),
    ({"final": "yes"}, "final 'yes' is not true or false"),
    ({"run_id": ""}, "run_id is empty"),
])
def test_an_invalid_field_is_refused_with_a_message_naming_it(change, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        replace(valid(), **change)


def test_json_round_trips_and_a_partial_ticket_is_refused():
    t = valid()
    assert Ticket.from_json(json.loads(json.dumps(t.to_json()))) == t
    data = t.to_json()
    del data["reasoning"], data["kind"]
    with pytest.raises(ValueError, match="the ticket has no reasoning, kind"):
        Ticket.from_json(data)
    with pytest.raises(ValueError, match="a ticket is a JSON object"):
        Ticket.from_json(["not", "a", "ticket"])
    assert Ticket.from_json({**t.to_json(), "stall_minutes": 3}).stall_minutes == 3.0

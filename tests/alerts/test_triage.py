"""Triage: its rules, each way they dismiss or intervene, and the optional command
(real processes): its answers in each form, and every way it can fail, the rules deciding."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import replace
from pathlib import Path

import psutil
import pytest
from helpers.waits import wait_for

from genesis.alerts.tickets import LIMIT_CAUSE, OUTAGE_CAUSE, Ticket, epoch_of, iso
from genesis.alerts.triage import Verdict, by_rules, triage

T0 = epoch_of("2026-11-21T03:14:00Z")
PY = os.path.basename(sys.executable)


def ticket(n: int = 0, **change) -> Ticket:
    base = Ticket(ticket_id=f"{n:032x}", created_at=iso(T0), run_id="run-1", iteration=3, phase="Builder",
                  project="/src/app", severity="medium", cause="Builder stuck", reasoning="no sign of life",
                  suggested_action="read its log", evidence="Builder (iteration 3): stuck", steps_since_success=None,
                  stall_minutes=None, kind="health", final=False)
    return replace(base, **change)


def told(n: int, minutes_before: float, **change) -> Ticket:
    return ticket(n, created_at=iso(T0 - minutes_before * 60), **change)


def decision(t: Ticket, recent=()) -> str:
    return by_rules(t, list(recent)).decision


# --- the rules -------------------------------------------------------------------------------

def test_the_loops_end_is_always_told_even_low_and_already_told():
    end = ticket(severity="low", final=True, kind="loop_end", cause="loop ended: done")
    assert by_rules(end, [told(1, 5, severity="low", final=True, kind="loop_end", cause="loop ended: done")]) == \
        Verdict("intervene", "the loop's end is always told", "rules")


def test_low_severity_is_dismissed_under_8_steps_and_told_from_10():
    assert decision(ticket(severity="low", steps_since_success=7)) == "dismiss"
    assert decision(ticket(severity="low", steps_since_success=None)) == "dismiss"
    assert decision(ticket(severity="low", steps_since_success=9)) == "dismiss"   # no intervene sign either
    assert decision(ticket(severity="low", steps_since_success=10)) == "intervene"


def test_transient_waits_are_dismissed_a_usage_limit_and_the_first_outage_wait():
    limit = ticket(severity="low", cause=LIMIT_CAUSE, kind="wait_start", stall_minutes=300.0, steps_since_success=9)
    assert by_rules(limit, []).why == "transient: a usage limit the loop waits out by itself"
    first = ticket(cause=OUTAGE_CAUSE, kind="wait_start", steps_since_success=1, stall_minutes=0.5)
    assert by_rules(first, []).why.startswith("transient: the first wait of an outage")
    # the outage goes on: its later waits are told once the loop stands still for long
    assert decision(replace(first, steps_since_success=2, stall_minutes=1.0)) == "dismiss"
    assert decision(replace(first, steps_since_success=5, stall_minutes=8.0)) == "intervene"


def test_the_same_cause_told_within_30_minutes_is_not_told_again():
    high = ticket(severity="high", cause="Builder wedged")
    assert decision(high) == "intervene"
    verdict = by_rules(high, [told(1, 10, severity="high", cause="Builder wedged")])
    assert verdict.decision == "dismiss" and "told at 2026-11-21T03:04:00Z" in verdict.why
    assert decision(high, [told(1, 31, cause="Builder wedged")]) == "intervene"           # too long ago
    assert decision(high, [told(1, 10, cause="Criticizer wedged")]) == "intervene"        # another cause
    assert decision(high, [told(1, 10, cause="Builder wedged", project="/src/other")]) == "intervene"


def test_high_critical_many_steps_a_long_stall_or_a_doom_loop_intervene():
    assert decision(ticket(severity="high")) == "intervene"
    assert decision(ticket(severity="critical")) == "intervene"
    assert decision(ticket(steps_since_success=10)) == "intervene"
    assert decision(ticket(steps_since_success=9)) == "dismiss"
    assert by_rules(ticket(stall_minutes=4.5), []).why == "the loop stands still for 4.5 minutes (over 4)"
    assert decision(ticket(stall_minutes=4.0)) == "dismiss"
    assert decision(ticket(evidence="Builder: wedged: doom_loop: the last 12 calls cycle over 2 inputs")) == \
        "intervene"
    assert by_rules(ticket(), []) == Verdict("dismiss", "medium severity with no sign of a long stall or a loop",
                                             "rules")


# --- the command -------------------------------------------------------------------------------

def script(tmp_path: Path, body: str) -> tuple[str, ...]:
    path = tmp_path / "judge.py"
    path.write_text(body)
    return (sys.executable, str(path))


@pytest.mark.parametrize("answer, expected", [
    ("dismiss: the agent recovered on its own\nmore lines are ignored\n",
     Verdict("dismiss", "the agent recovered on its own", "command")),
    ("**Intervene** - it is looping on pytest\n", Verdict("intervene", "it is looping on pytest", "command")),
    ("INTERVENE\n", Verdict("intervene", "the triage command said intervene", "command")),
    (json.dumps({"decision": "Dismiss", "why": "a known flaky test"}),
     Verdict("dismiss", "a known flaky test", "command")),
    (json.dumps({"type": "result", "subtype": "success", "result": "intervene: a doom loop"}),
     Verdict("intervene", "a doom loop", "command")),
])
def test_the_commands_answer_decides(tmp_path, answer, expected):
    argv = script(tmp_path, f"import sys\nsys.stdin.read()\nsys.stdout.write({answer!r})\n")
    assert triage(ticket(severity="high"), [], argv, 10.0) == expected


def test_the_command_gets_the_ticket_json_on_stdin(tmp_path):
    seen = tmp_path / "seen.json"
    argv = script(tmp_path, f"import sys\nopen({str(seen)!r}, 'w').write(sys.stdin.read())\nprint('dismiss')\n")
    t = ticket(severity="high")
    triage(t, [], argv, 10.0)
    assert Ticket.from_json(json.loads(seen.read_text())) == t


@pytest.mark.parametrize("body, why", [
    ("print('maybe? hard to say')", f"the triage command {PY} answered neither dismiss nor intervene"),
    ("print(json.dumps({'decision': 'escalate'}))", "answered neither dismiss nor intervene"),
    ("print('intervene'); sys.exit(3)", f"the triage command {PY} exited with status 3"),
    ("sys.stdout.write('intervene ' + 'x' * 100000)", f"the triage command {PY} printed more than 64 KiB"),
])
def test_a_failing_command_falls_back_to_the_rules_saying_why(tmp_path, body, why):
    argv = script(tmp_path, f"import json, sys\nsys.stdin.read()\n{body}\n")
    verdict = triage(ticket(), [], argv, 10.0)
    assert (verdict.decision, verdict.by) == ("dismiss", "rules")  # the rules' verdict for a plain medium
    assert why in verdict.why and "the rules decided" in verdict.why


def test_a_missing_command_falls_back_to_the_rules(tmp_path):
    verdict = triage(ticket(severity="high"), [], (str(tmp_path / "no-such-judge"),), 10.0)
    assert (verdict.decision, verdict.by) == ("intervene", "rules")
    assert "could not start" in verdict.why


def test_a_sleeping_command_is_killed_at_its_timeout_with_its_process_group(tmp_path):
    pids = tmp_path / "pids"
    argv = ("sh", "-c", f"sleep 300 & echo $$ $! > {pids}; wait")
    verdict = triage(ticket(severity="critical"), [], argv, 0.5)
    assert (verdict.decision, verdict.by) == ("intervene", "rules")
    assert "the triage command sh timed out after 0.5s" in verdict.why
    shell, child = map(int, pids.read_text().split())

    def gone(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    wait_for(lambda: gone(shell) and gone(child), timeout=5, what="the command and its child to be ended")


def test_a_final_ticket_never_runs_the_command(tmp_path):
    ran = tmp_path / "ran"
    argv = ("sh", "-c", f"touch {ran}; echo dismiss")
    end = ticket(final=True, kind="loop_end", cause="loop ended: done", severity="low")
    assert triage(end, [], argv, 10.0) == Verdict("intervene", "the loop's end is always told", "rules")
    assert not ran.exists()
    triage(ticket(), [], argv, 10.0)
    assert ran.exists()  # the same command does run for a non-final ticket

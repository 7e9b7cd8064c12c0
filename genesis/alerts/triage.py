"""Triage: is a ticket worth waking someone for?

The rules are its criteria, applied in order: the loop's end is always told; a
resolution is told when what it resolves was; low, transient and already-told tickets are
dismissed; a stall being retried is told (quietly); serious, long or looping ones
intervene; anything else is dismissed. An optional command (a `claude -p` call, say) may
decide instead; whatever goes wrong with it, the rules decide and say why.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Mapping, Sequence

from genesis.alerts.bounded import MAX_OUTPUT, run_bounded
from genesis.alerts.message import safe_ticket
from genesis.alerts.tickets import LIMIT_CAUSE, OUTAGE_CAUSE, Ticket
from genesis.words import one_line

__all__ = ["Verdict", "triage", "by_rules", "by_command", "REPEAT_WINDOW", "DISMISS", "INTERVENE"]

DISMISS, INTERVENE = "dismiss", "intervene"
REPEAT_WINDOW = 30 * 60        # seconds: the same cause told within this is not told again
LOW_STEPS = 8                  # a low ticket this far from a success is still dismissed
MANY_STEPS = 10
STALL_MINUTES = 4.0
DOOM_SIGNS = re.compile(r"doom_loop|stall_same_tool|doom loop", re.I)
MAX_WHY = 300


@dataclass(frozen=True)
class Verdict:
    decision: str   # dismiss or intervene
    why: str
    by: str         # rules or command


def by_rules(ticket: Ticket, recent: Sequence[Ticket]) -> Verdict:
    """The queen's criteria. `recent`: tickets already told (any run of the project)."""

    def verdict(decision: str, why: str) -> Verdict:
        return Verdict(decision, why, "rules")

    steps = ticket.steps_since_success
    if ticket.final:
        return verdict(INTERVENE, "the loop's end is always told")
    if ticket.kind == "resolved":  # the deliverer found the told ticket it resolves, or none
        return verdict(INTERVENE, "it resolves a stall that was told") if ticket.resolves else \
            verdict(DISMISS, "no stall of this phase was told: nothing to resolve")
    if ticket.severity == "low" and (steps or 0) < LOW_STEPS:
        return verdict(DISMISS, f"low severity, {steps or 0} steps since the last success (under {LOW_STEPS})")
    if ticket.cause == LIMIT_CAUSE:
        return verdict(DISMISS, "transient: a usage limit the loop waits out by itself")
    if ticket.cause == OUTAGE_CAUSE and (steps or 1) <= 1:
        return verdict(DISMISS, "transient: the first wait of an outage; the loop backs off and retries")
    told = _told_before(ticket, recent)
    if told is not None:
        return verdict(DISMISS, f"the same cause was told at {told.created_at} (within {REPEAT_WINDOW // 60} "
                                f"minutes): no repeated pages")
    if ticket.severity in ("high", "critical"):
        return verdict(INTERVENE, f"{ticket.severity} severity")
    if ticket.kind == "retry":
        return verdict(INTERVENE, "a stall Genesis retries: told once, quietly, and resolved if the retry recovers")
    if steps is not None and steps >= MANY_STEPS:
        return verdict(INTERVENE, f"{steps} steps since the last success (at least {MANY_STEPS})")
    if ticket.stall_minutes is not None and ticket.stall_minutes > STALL_MINUTES:
        return verdict(INTERVENE, f"the loop stands still for {ticket.stall_minutes:g} minutes (over "
                                  f"{STALL_MINUTES:g})")
    if DOOM_SIGNS.search(ticket.evidence):
        return verdict(INTERVENE, "the evidence shows a doom loop")
    return verdict(DISMISS, f"{ticket.severity} severity with no sign of a long stall or a loop")


def _told_before(ticket: Ticket, recent: Sequence[Ticket]) -> Ticket | None:
    for other in reversed(recent):
        if (other.ticket_id != ticket.ticket_id and other.cause == ticket.cause and other.project == ticket.project
                and 0 <= ticket.epoch - other.epoch <= REPEAT_WINDOW):
            return other
    return None


def by_command(ticket: Ticket, argv: Sequence[str], timeout: float,
               env: Mapping[str, str] | None = None) -> Verdict | str:
    """The command's verdict, or why it gave none (a string)."""
    env = dict(os.environ if env is None else env)
    done = run_bounded(argv, json.dumps(safe_ticket(ticket, env)).encode(), env, timeout)
    name = os.path.basename(argv[0])
    if done.error:
        return done.error
    if done.too_much:
        return f"the triage command {name} printed more than {MAX_OUTPUT >> 10} KiB"
    if done.returncode is None:
        return f"the triage command {name} timed out after {timeout:g}s"
    if done.returncode != 0:
        return f"the triage command {name} exited with status {done.returncode}"
    answer = _answer(done.output.decode("utf-8", "replace"))
    if answer is None:
        return f"the triage command {name} answered neither dismiss nor intervene"
    decision, why = answer
    return Verdict(decision, why or f"the triage command said {decision}", "command")


def _answer(text: str) -> tuple[str, str] | None:
    """(decision, why) from `intervene: why...` on the first line, or a JSON object with a
    decision (and why or reason); a JSON result of `claude -p --output-format json` is read
    for its text."""
    text = text.strip()
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if isinstance(data, dict):
            if isinstance(data.get("decision"), str):
                decision = data["decision"].strip().lower()
                why = data.get("why") or data.get("reason") or ""
                return (decision, _one_line(str(why))) if decision in (DISMISS, INTERVENE) else None
            if isinstance(data.get("result"), str):
                return _answer(data["result"])
            return None
    first = text.splitlines()[0] if text else ""
    found = re.match(r"\W*([A-Za-z]+)\W*(.*)$", first)
    if not found or found.group(1).lower() not in (DISMISS, INTERVENE):
        return None
    return found.group(1).lower(), _one_line(found.group(2))


def _one_line(text: str) -> str:
    text = one_line(text, None)  # the command's answer is shown in the report and status: untrusted
    return text if len(text) <= MAX_WHY else text[:MAX_WHY - 3] + "..."


def triage(ticket: Ticket, recent: Sequence[Ticket], command: Sequence[str] | None = None,
           timeout: float = 60.0, env: Mapping[str, str] | None = None) -> Verdict:
    """The rules' verdict, or the command's when one is set and answers; final tickets skip
    the command (the loop's end is always told)."""
    rules = by_rules(ticket, recent)
    if ticket.final or ticket.kind == "resolved" or not command:
        return rules
    said = by_command(ticket, command, timeout, env)
    if isinstance(said, Verdict):
        return said
    return Verdict(rules.decision, f"{rules.why} ({said}; the rules decided)", "rules")

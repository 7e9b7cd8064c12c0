"""Escalation tickets: one ledger event the operator may need to hear about, with what was
seen, why it matters and what to do, secrets removed.

Every field is required and checked, so a half-made ticket never reaches triage. The
cause is kept short and stable (no counts, no times) so that repeats can be recognised;
the numbers go to the evidence. (The loop's end is the exception: it is always told.)
"""

from __future__ import annotations

import functools
import re
import time
import uuid
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Callable, Mapping

from genesis.redact import redact
from genesis.clock import iso
from genesis.clock import parse_iso as epoch_of
from genesis.hints import hint
from genesis.words import LABELS, duration, money, one_line

__all__ = ["Ticket", "ticket_for", "SEVERITIES", "MAX_EVIDENCE", "MAX_CAUSE", "LIMIT_CAUSE", "OUTAGE_CAUSE",
           "MAX_HEADLINE", "MAX_LINES", "MAX_LINE", "STOP_WORDS", "iso", "epoch_of"]

SEVERITIES = ("low", "medium", "high", "critical")
MAX_EVIDENCE = 500
MAX_CAUSE = 200
MAX_TEXT = 1000          # reasoning and suggested action
HEX32 = re.compile(r"^[0-9a-f]{32}$")
LIMIT_CAUSE = "usage limit: the loop waits for the reset"
OUTAGE_CAUSE = "API outage: the loop backs off and retries"
CRITICAL_EXITS = {3, 20, 21, 22, 23, 24, 25, 27}   # breaker OPEN, and the night-without-waste stops
MAX_HEADLINE = 80        # the message's title after the project's name: a phone shows one line
MAX_LINES = 8            # the message's body: a few short lines a person reads at 3 a.m.
MAX_LINE = 200
# The loop's end by its code, in the title's words (the loop's own words otherwise).
STOP_WORDS = {3: "breaker OPEN", 6: "disk full", 7: "phase watcher lost", 8: "a step of Genesis overran",
              20: "usage limit resets too late", 21: "API outage too long", 22: "the agent cannot go on",
              23: "runtime cap reached", 24: "cost cap reached", 25: "recovery budget spent",
              26: "Genesis's state lost", 27: "git history rewritten", 29: "sandbox unavailable",
              34: "the fleet's monitor is gone", 35: "stepped aside for another loop of its task",
              129: "terminal closed", 130: "interrupted (Ctrl-C)", 143: "stopped (SIGTERM)"}


@dataclass(frozen=True)
class Ticket:
    ticket_id: str                   # uuid4 hex
    created_at: str                  # UTC, ISO
    run_id: str
    iteration: int | None
    phase: str | None
    project: str
    severity: str                    # low, medium, high, critical
    cause: str                       # what was observed, short and stable
    reasoning: str                   # why it is escalated
    suggested_action: str
    evidence: str                    # the event's own words, redacted, at most MAX_EVIDENCE
    steps_since_success: int | None  # tool calls since the last successful one, or phases since one finished
    stall_minutes: float | None      # how long the loop stands still
    kind: str                        # the event kind that raised it
    final: bool                      # the loop's end
    # What a person reads (message.py): the title's cause and a few lines (what happened, what
    # Genesis did, whether to act). Older tickets have neither: the message falls back on the rest.
    headline: str = ""
    lines: tuple[str, ...] = ()
    resolves: str | None = None      # the ticket_id of the told ticket this one resolves (set by the deliverer)
    holds_for_end: bool = False      # the loop ends right after it: told with the loop's end when that comes soon
    task: str = ""                   # the fleet's task it is about ("": the loop or the fleet): its action links

    def __post_init__(self) -> None:
        if not isinstance(self.ticket_id, str) or not HEX32.match(self.ticket_id):
            raise ValueError(f"ticket_id {self.ticket_id!r} is not a uuid4 hex string")
        try:
            epoch_of(self.created_at)
        except (TypeError, ValueError):
            raise ValueError(f"created_at {self.created_at!r} is not a UTC time like 2025-01-31T23:59:00Z") from None
        for name in ("run_id", "project", "kind", "cause", "reasoning", "suggested_action"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{name} is empty; a ticket says what, why and what to do")
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity {self.severity!r} is not one of {', '.join(SEVERITIES)}")
        if len(self.cause) > MAX_CAUSE:
            raise ValueError(f"cause is {len(self.cause)} characters long; at most {MAX_CAUSE} (details go to "
                             f"evidence)")
        for name in ("reasoning", "suggested_action"):
            if len(getattr(self, name)) > MAX_TEXT:
                raise ValueError(f"{name} is longer than {MAX_TEXT} characters")
        if not isinstance(self.evidence, str):
            raise ValueError("evidence is not text")
        if len(self.evidence) > MAX_EVIDENCE:
            raise ValueError(f"evidence is {len(self.evidence)} characters long; at most {MAX_EVIDENCE}")
        if self.iteration is not None and not _whole(self.iteration):
            raise ValueError(f"iteration {self.iteration!r} is not a whole number or None")
        if self.phase is not None and not isinstance(self.phase, str):
            raise ValueError(f"phase {self.phase!r} is not text or None")
        if self.steps_since_success is not None and not _whole(self.steps_since_success):
            raise ValueError(f"steps_since_success {self.steps_since_success!r} is not a whole number or None")
        if self.stall_minutes is not None and (isinstance(self.stall_minutes, bool) or
                                               not isinstance(self.stall_minutes, (int, float)) or
                                               not 0 <= self.stall_minutes < float("inf")):
            raise ValueError(f"stall_minutes {self.stall_minutes!r} is not a number of minutes or None")
        if not isinstance(self.final, bool):
            raise ValueError(f"final {self.final!r} is not true or false")
        if not isinstance(self.headline, str) or len(self.headline) > MAX_HEADLINE or "\n" in self.headline:
            raise ValueError(f"headline is not one line of at most {MAX_HEADLINE} characters")
        if (not isinstance(self.lines, tuple) or len(self.lines) > MAX_LINES
                or not all(isinstance(x, str) and len(x) <= MAX_LINE and "\n" not in x for x in self.lines)):
            raise ValueError(f"lines are not at most {MAX_LINES} lines of at most {MAX_LINE} characters")
        if self.resolves is not None and (not isinstance(self.resolves, str) or not HEX32.match(self.resolves)):
            raise ValueError(f"resolves {self.resolves!r} is not a ticket id")
        if not isinstance(self.holds_for_end, bool):
            raise ValueError(f"holds_for_end {self.holds_for_end!r} is not true or false")
        if not isinstance(self.task, str) or len(self.task) > MAX_CAUSE or "\n" in self.task:
            raise ValueError(f"task {self.task!r} is not a task's id")

    def to_json(self) -> dict:
        data = asdict(self)
        data["lines"] = list(self.lines)
        return data

    @classmethod
    def from_json(cls, data: object) -> "Ticket":
        """Every field present and valid (but those an older ticket may lack); ValueError names
        the first that is not."""
        if not isinstance(data, dict):
            raise ValueError("a ticket is a JSON object")
        names = [f.name for f in fields(cls) if f.name not in OPTIONAL]
        missing = [name for name in names if name not in data]
        if missing:
            raise ValueError(f"the ticket has no {', '.join(missing)}")
        values = {name: data[name] for name in names + [n for n in OPTIONAL if n in data]}
        if isinstance(values.get("lines"), list):
            values["lines"] = tuple(values["lines"])
        if isinstance(values["stall_minutes"], int) and not isinstance(values["stall_minutes"], bool):
            values["stall_minutes"] = float(values["stall_minutes"])
        return cls(**values)

    @property
    def epoch(self) -> float:
        return epoch_of(self.created_at)


OPTIONAL = ("headline", "lines", "resolves", "holds_for_end", "task")


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _cut(text: str, limit: int) -> str:
    text = one_line(str(text), None)  # one safe line: it goes into chat messages and headers
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _int(value: object) -> int | None:
    return value if _whole(value) else None


def _num(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
        return None
    return float(value)


# --- one builder per event kind: (severity, cause, reasoning, suggested action, evidence, steps, stall) ---

# (severity, cause, reasoning, suggested action, evidence, steps, stall[, headline, lines])
Draft = tuple
Run = Callable[..., str]  # the command that does ARGS on the ticket's project, as the ticket says it


def _command(project: str | Path, *args: str) -> str:
    return f"`{hint(project, *args)}`"


def _health(e: Mapping[str, Any], name: str, where: str, run: Run) -> Draft | None:
    cls, reason = e.get("classification"), str(e.get("reason", ""))
    steps, idle = _int(e.get("steps_since_success")), _num(e.get("idle"))
    stall = round(idle / 60, 1) if idle is not None else None
    score = _num(e.get("stall_score"))
    said = f" (stall score {min(score, 1.0):.2f})" if score is not None else ""
    evidence = f"{where}: {cls}{said}: {reason}"
    if cls == "stuck":
        return ("medium", f"{name} stuck",
                "the agent shows no sign of life for its stale window; the watcher ends a stuck phase",
                "nothing yet: the phase is ended and retried (PHASE_RETRIES); if it recurs, read its log for the "
                "command it waits on", evidence, steps, stall)
    if cls == "wedged":
        return ("high", f"{name} wedged",
                "the agent keeps calling tools and gets nowhere (a doom loop); the watcher ends the phase",
                f"read the phase's log and incident ({run('incidents')}); the task may be ambiguous or a tool "
                "broken: fix it or reword the task in TASKS.md", evidence, steps, stall)
    return None


def _incident(e: Mapping[str, Any], name: str, where: str, run: Run) -> Draft:
    # The incident's id is text; read back from the ledger, "id" is the event's row number.
    kind, ident = str(e.get("kind", "stuck")), e.get("incident") or e.get("id")
    ident = ident if isinstance(ident, str) else ""
    silent = _num(e.get("silent_for"))
    why = _why(e, kind)
    state = LABELS.get(kind, kind)  # the health ticket's words: one cause, told once
    evidence = f"incident {ident}: {where} ended as {state} ({why})" + (f": {e['reason']}" if e.get("reason") else "")
    # Raised before the auto-commit of what the phase left: whether its work is kept is not known yet.
    return ("high", f"{name} {state}",
            f"the watcher is ending a stuck agent's whole process tree ({why}); what it left is committed as "
            f"partial work when auto-commit is on",
            f"{run('incidents', 'show', ident)} says what it was doing" if ident else f"read {run('incidents')}",
            evidence, None, round(silent / 60, 1) if silent is not None else None)


# The window that ended a phase (recorded with the phase's end and its incident), in words.
WINDOWS = {"stale": "no sign of life for its stale window", "tool_silent": "a tool call silent past its window",
           "tool_busy": "one tool call running past its limit", "runtime": "over its runtime cap",
           "first_event": "nothing at all from it since its start",
           "wakeup": "a wake-up it scheduled itself never came"}
KIND_WHY = {"stuck": "no heartbeat for the stale window", "wedged": "a doom loop", "overtime": "over its runtime cap"}


def _why(e: Mapping[str, Any], kind: str) -> str:
    window = e.get("window")
    if isinstance(window, str) and window in WINDOWS:
        return WINDOWS[window]
    return KIND_WHY.get(kind, kind)


def _work(e: Mapping[str, Any], none: str = "nothing was committed") -> str | None:
    """What the phase's auto-commit kept (its `phase_work`, when the loop attached it), or None
    when that is not known: a ticket says only what is known."""
    work = e.get("work")
    if not isinstance(work, dict):
        return None
    commits = [c for c in work.get("commits") or [] if isinstance(c, dict) and isinstance(c.get("sha"), str)]
    if not commits:
        return none
    more = f" and {len(commits) - 1} more commit(s)" if len(commits) > 1 else ""
    return f"partial work committed ({commits[-1]['sha'][:12]}{more})"


def _said(work: str | None) -> list[str]:
    """The work's words as a line of the message (none when not known)."""
    return [f"{work[:1].upper()}{work[1:]}."] if work else []


def _plural(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


def _retry(e: Mapping[str, Any], name: str, where: str, run: Run) -> Draft:
    """A stuck or wedged phase that Genesis ended and retries: told once, quietly; a follow-up
    says whether the retry recovered."""
    kind = str(e.get("type", "stuck"))
    state = LABELS.get(kind, kind)
    count, allowed = _int(e.get("count")), _int(e.get("allowed"))
    night, night_allowed = _int(e.get("night")), _int(e.get("night_allowed"))
    why = _why(e, kind)
    which = f"retry {count}" + (f" of {allowed}" if allowed is not None else "") if count is not None else "a retry"
    left = (f", {_plural(max(0, night_allowed - night), 'retry', 'retries')} left tonight"
            if night is not None and night_allowed is not None else "")
    work = _work(e)
    lines = [f"{where} was {state} ({why}); Genesis ended it.", *_said(work),
             f"Retrying ({which}){left}.", "Nothing to do: a follow-up says whether the retry recovered."]
    return ("medium", f"{name} {state}, retrying",
            f"the watcher ended the phase ({why}); Genesis retries it (PHASE_RETRIES, GENESIS_MAX_RECOVERIES)",
            "nothing yet: the phase is retried; if it gets stuck again, read its incident "
            f"({run('incidents')}) for the command it waits on",
            f"{where}: {state} ({why}); {which}{left}: {e.get('reason', '')}"
            + (f"; {work}" if work else ""), count, None,
            f"{name} {state}, retrying", lines)


def _resolved(e: Mapping[str, Any], name: str, where: str, run: Run) -> Draft:
    """The retry of a stuck phase finished: the open stall ticket is resolved."""
    attempt, fixes = _int(e.get("attempt")), _int(e.get("fixes"))
    work = _work(e, "nothing new was committed")
    said = _said(work and work.replace("partial work", "its work"))
    if fixes is not None and not attempt:  # the next iteration did what an earlier one gave up on
        return ("low", f"{name} recovered", f"the phase finished again after it gave up in iteration {fixes}",
                "nothing", f"{where}: finished; it gave up in iteration {fixes}" + (f"; {work}" if work else ""),
                None, None, f"resolved: {name} works again",
                [f"{where} finished; it had given up in iteration {fixes}.", *said, "Nothing to do."])
    on = f"retry {attempt}" if attempt else "a retry"
    lines = [f"{where} finished on {on}.", *said, "Nothing to do."]
    return ("low", f"{name} recovered on retry", f"the retried phase finished ({on})", "nothing",
            f"{where}: finished on {on}" + (f"; {work}" if work else ""), None, None,
            f"resolved: {name} recovered on {on}", lines)


def _phase_failed(e: Mapping[str, Any], name: str, where: str, run: Run) -> Draft:
    kind, retries = str(e.get("kind", "stuck")), _int(e.get("retries"))
    state, why, work = LABELS.get(kind, kind), _why(e, kind), _work(e)
    tried = f"after {_plural(retries, 'retry', 'retries')}" if retries is not None else "after its retries"
    lines = [f"{where} was {state} again ({why}) {tried}.", *_said(work),
             "The loop goes on to the next phase without its work.",
             "Act: read its incident and log; fix what it waits on, or reword the task in TASKS.md."]
    return ("high", f"{name} failed for the iteration",
            "the phase got stuck again after its retries; the loop goes on without its work",
            f"read the phase's incidents ({run('incidents')}) and its log; fix what it waits on or the task",
            f"{where}: {state} {tried}: {e.get('reason', '')}" + (f"; {work}" if work else ""),
            retries + 1 if retries is not None else None, None,
            f"{name} {state} {tried}, gave up", lines)


def _recovery_spent(e: Mapping[str, Any], name: str, where: str, run: Run) -> Draft:
    work = _work(e)
    lines = [f"{where} was stuck again and the night's {e.get('retries')} retries (GENESIS_MAX_RECOVERIES) are "
             f"spent.", *_said(work), "The loop stops (exit 25).",
             "Act: read the incidents for what keeps getting stuck, fix it, then restart the loop."]
    return ("critical", "the night's recovery budget is spent",
            "stuck phases were retried so often that the loop only thrashes; it stops (exit 25)",
            f"read {run('incidents')} for what keeps getting stuck, fix it, then restart the loop",
            f"{where}: {e.get('retries')} retries of stuck phases in this run (GENESIS_MAX_RECOVERIES)", None, None,
            "recovery budget spent, loop stopped", lines)


def _iteration_end(e: Mapping[str, Any], name: str, where: str, run: Run) -> Draft | None:
    state = e.get("breaker")
    evidence = (f"iteration {e.get('iteration')}: {e.get('no_progress')} iteration(s) in a row without a change to "
                f"the repository; breaker {state}")
    if state == "HALF_OPEN":
        return ("medium", "breaker HALF_OPEN: no progress",
                "iterations end without changing the repository; the loop stops at CB_STOP_THRESHOLD",
                "look at the last phases' logs: is the task list stuck or done?", evidence, None, None)
    if state == "OPEN":
        cools = bool(e.get("cooldown"))
        lines = [f"{e.get('no_progress')} iterations in a row changed nothing in the repository.",
                 "The loop cools down and tries again (CB_COOLDOWN_MINUTES)." if cools else "The loop stops (exit 3).",
                 "Act: fix the task list or the agent's setup, then reset the breaker and "
                 "restart." if not cools else "Nothing to do yet: a trial iteration follows the cooldown."]
        return ("critical", "breaker OPEN: the loop makes no progress",
                "too many iterations in a row changed nothing; the loop stops (or cools down, with "
                "CB_COOLDOWN_MINUTES)",
                f"fix the task list or the agent's setup, then {run('breaker', 'reset')} and restart", evidence,
                None, None, "breaker OPEN, cooling down" if cools else "breaker OPEN, loop stopped", lines)
    return None


def _wait_start(e: Mapping[str, Any], name: str, where: str, run: Run) -> Draft | None:
    kind, seconds = e.get("kind"), _num(e.get("seconds"))
    stall = round(seconds / 60, 1) if seconds is not None else None
    evidence = f"{where}: {e.get('reason', kind)}; waiting {seconds:.0f}s" if seconds is not None else \
        f"{where}: {e.get('reason', kind)}"
    if kind == "limit":
        return ("low", LIMIT_CAUSE, "a usage limit was met; the loop waits for its reset and runs the phase again",
                "nothing: the loop goes on by itself after the reset", evidence, None, stall)
    if kind == "outage":
        return ("medium", OUTAGE_CAUSE, "the model API is failing; the loop backs off before running the phase "
                "again, and stops after GENESIS_MAX_OUTAGE_MINUTES",
                "check the provider's status page; the loop goes on by itself when the API is back",
                evidence + f" (attempt {e.get('attempt')})", _int(e.get("attempt")), stall)
    return None


def _disk_full(e: Mapping[str, Any], name: str, where: str, run: Run) -> Draft:
    return ("critical", "disk full", "there is no room left to write the loop's state or the agent's work; "
            "the loop stops cleanly (exit 6)", "free space on that disk, then restart the loop",
            f"no room at {e.get('path')}" + "".join(f", {text}" for text in (
                f"{e['free']} bytes free" if _int(e.get("free")) is not None else "",
                f"{e['needed']} needed" if _int(e.get("needed")) is not None else "") if text), None, None)


def _history_rewritten(e: Mapping[str, Any], name: str, where: str, run: Run) -> Draft:
    changes = [c for c in e.get("changes") or [] if isinstance(c, dict)]
    kinds = sorted({str(c.get("kind")) for c in changes})
    told = "; ".join(f"{c.get('kind')} {c.get('branch') or 'HEAD'}"
                     + (f" ({c.get('lost_count')} commit(s) off it)" if c.get("lost_count") else "")
                     + f", kept by {c.get('ref')}" for c in changes)
    allowed = bool(e.get("allowed"))
    return ("medium" if allowed else "critical", f"{name} changed git history: {', '.join(kinds)}",
            "a phase rewrote or deleted commits or a branch, or left its branch; "
            + ("GENESIS_ALLOW_HISTORY_REWRITE=true lets the loop go on" if allowed else
               "the loop stops (exit 27, GENESIS_ALLOW_HISTORY_REWRITE=false)"),
            f"see what the safety refs keep and restore it: {run('restore')}", f"{where}: {told}", None, None,
            f"{name} changed git history" + ("" if allowed else ", loop stopped"),
            [_cut(f"{where}: {told}.", MAX_LINE), "Safety refs keep every commit it took off.",
             "The loop goes on (GENESIS_ALLOW_HISTORY_REWRITE=true)." if allowed else "The loop stops (exit 27).",
             "Act: see what the safety refs keep and restore it."])


def _commit_failed(e: Mapping[str, Any], name: str, where: str, run: Run) -> Draft:
    count = _int(e.get("in_a_row"))
    return ("high", f"auto-commit failed {count} times in a row",
            "the agents' work is not being committed: a kill now would lose it",
            f"read git's words below and {run('report')}; fix the repository (`git status` there), the loop "
            f"commits again at the next phase", f"{where}: {_cut(str(e.get('error', '')), 300)}", None, None,
            f"auto-commit failed {count} times in a row",
            [_cut(f"{where}: git said: {e.get('error', '')}", 160),
             "The agents' work is not being committed: a kill now would lose it.",
             "The loop tries again after the next phase.",
             "Act: fix the repository (git status there); the report has git's words."])


def _summary_lines(summary: Mapping[str, Any]) -> list[str]:
    """The night in a few lines, from the loop_end's summary (finish.py sums the run)."""
    lines = []
    done, total, tonight = (_int(summary.get(k)) for k in ("tasks_done", "tasks_total", "tasks_tonight"))
    if total is not None and done is not None:
        lines.append(f"Tasks: {done} of {total} done" + (f" ({tonight} tonight)" if tonight is not None else "")
                     + f", {max(0, total - done)} open.")
    counts = [(summary.get("commits"), "commit", "commits"), (summary.get("iterations"), "iteration", "iterations"),
              (summary.get("abnormal"), "abnormal phase", "abnormal phases"),
              (summary.get("incidents"), "incident", "incidents")]
    said = [_plural(n, one, many) for n, one, many in counts if _int(n) is not None]
    if said:
        lines.append(", ".join(said) + ".")
    cost, took = _num(summary.get("cost_usd")), _num(summary.get("duration"))
    spent = [f"cost {money(cost)}" if cost is not None else "cost not known",
             *([f"duration {duration(took)}"] if took is not None else [])]
    lines.append(", ".join(spent).capitalize() + ".")
    return lines


STOP_ACTS = {3: "Act: fix the task list or the agent's setup, then reset the breaker and "
                "restart.",
             6: "Act: free space on that disk, then restart the loop.",
             25: "Act: read the incidents for what keeps getting stuck, fix it, then restart the loop.",
             27: "Act: see what the safety refs keep and restore it, then restart the loop."}


def _loop_end(e: Mapping[str, Any], name: str, where: str, run: Run) -> Draft:
    code, reason = e.get("exit_code"), str(e.get("reason", "")) or "no reason given"
    if code == 0:
        severity, why = "low", "the loop ended normally"
    elif code in CRITICAL_EXITS:
        severity, why = "critical", "the loop stopped before its work was done and needs you to go on"
    else:
        severity, why = "high", "the loop stopped with an error"
    summary = e.get("summary") if isinstance(e.get("summary"), dict) else {}
    done, total = _int(summary.get("tasks_done")), _int(summary.get("tasks_total"))
    stop = STOP_WORDS.get(code) if isinstance(code, int) else None
    if code == 0:
        headline = f"night over: {done}/{total} tasks done" if done is not None and total else "night over"
    else:
        headline = f"{stop or _cut(reason, MAX_HEADLINE - len(', loop stopped'))}, loop stopped"  # its cause said
    act = ("Nothing to do: the report has the night." if code == 0 else
           STOP_ACTS.get(code, "Act: read the report, fix what stopped it, then restart the loop."))
    lines = [_cut(f"Ended: {reason} (exit {code}).", MAX_LINE), *_summary_lines(summary), act]
    return (severity, _cut(f"loop ended: {reason}", MAX_CAUSE), f"{why} (exit {code})",
            f"read {run('report')} for the night" if code == 0 else
            f"read {run('report')}; fix what stopped it, then restart the loop",
            f"exit {code}: {reason}", None, None, _cut(headline, MAX_HEADLINE), lines)


def _loop_frozen(e: Mapping[str, Any], name: str, where: str, run: Run) -> Draft:
    pid = _int(e.get("pid"))
    return ("critical", "the loop is frozen (stopped by a signal)",
            "the loop's process is stopped (SIGSTOP, SIGTSTP or a debugger): no phase runs and nothing ends the "
            "night until it is continued or stopped", f"continue it (kill -CONT {pid}) or stop it "
            f"({run('stop')}, then kill -CONT {pid})", f"pid {pid} in state T (stopped)", None, None,
            "the loop is frozen (stopped by a signal)",
            [f"The loop's process (pid {pid}) is stopped: SIGSTOP, SIGTSTP or a debugger.",
             "No phase runs and nothing ends the night until it is continued.",
             f"Act: continue it (kill -CONT {pid}), or stop the loop and then continue it."])


def _agent_committed_secret(e: Mapping[str, Any], name: str, where: str, run: Run) -> Draft:
    files = e.get("files") if isinstance(e.get("files"), list) else []
    named = ", ".join(f"{f.get('path')} in {f.get('commit')}" for f in files[:5] if isinstance(f, dict))
    return ("high", "the agent committed a file that looks like a secret",
            "a key or credentials file in the repository's history can leak with the next push; Genesis never "
            "rewrites the agent's commits, and does not push this phase's work",
            "check the commits named; if the file holds a real secret, rotate it, then remove the file from the "
            "history (git rm --cached, and rewrite the commits) before pushing",
            f"{where}: {e.get('count')} file(s): {named}", None, None)


def _monitor_down(e: Mapping[str, Any], name: str, where: str, run: Run) -> Draft:
    """A fleet's child found its monitor's heartbeat stale: said once a run by each child."""
    task = str(e.get("task") or e.get("task_id") or "its task")
    again = (f"start-multi-agent-loop.sh --project {e['project']} --parallel N"
             if e.get("project") else "start-multi-agent-loop.sh --parallel N on the project")
    why = str(e.get("why") or "its heartbeat is stale")
    return ("high", "the fleet's monitor is down",
            "nothing restarts failed children, merges finished tasks or launches new ones until it is back; this "
            "child goes on to its own end",
            f"start the fleet again ({again}): it adopts the children still running",
            f"a child working on {task}: the monitor {why}", None, None,
            "the fleet's monitor is down",
            [_cut(f"A child working on {task} found the monitor down: {why}.", MAX_LINE),
             "The children go on to their own ends; nothing restarts, merges or launches meanwhile.",
             _cut(f"Act: start the fleet again ({again}); it adopts the running children.", MAX_LINE)])


def _monitor_back(e: Mapping[str, Any], name: str, where: str, run: Run) -> Draft:
    return ("low", "the fleet's monitor is back", "its heartbeat is fresh again", "nothing",
            f"heartbeat {e.get('age')}s old", None, None, "resolved: the fleet's monitor is back",
            ["The fleet's monitor beats again.", "Nothing to do."])


BUILDERS = {"health": _health, "incident": _incident, "phase_failed": _phase_failed, "retry": _retry,
            "resolved": _resolved,
            "recovery_spent": _recovery_spent, "iteration_end": _iteration_end, "wait_start": _wait_start,
            "disk_full": _disk_full, "loop_end": _loop_end, "loop_frozen": _loop_frozen,
            "history_rewritten": _history_rewritten, "agent_committed_secret": _agent_committed_secret,
            "commit_failed": _commit_failed, "monitor_down": _monitor_down, "monitor_back": _monitor_back}


def ticket_for(event: Mapping[str, Any], project: str | Path,
               env: Mapping[str, str] | None = None) -> Ticket | None:
    """The ticket one ledger event raises, or None when it raises none. Every text is
    redacted (env: whose secret-named values to hide; default the process's own)."""
    kind = event.get("event")
    build = BUILDERS.get(kind) if isinstance(kind, str) else None
    if build is None:
        return None
    iteration = _int(event.get("iteration"))
    phase = event.get("phase") if isinstance(event.get("phase"), str) and event.get("phase") else None
    where = " ".join(filter(None, [phase or "", f"(iteration {iteration})" if iteration is not None else ""])) \
        or "the loop"
    draft = build(event, phase or "the loop", where, functools.partial(_command, project))
    if draft is None:
        return None
    severity, cause, reasoning, action, evidence, steps, stall = draft[:7]
    headline, lines = (draft[7], draft[8]) if len(draft) > 7 else (cause, _lines(evidence, reasoning, action))
    at = event.get("at")
    try:
        epoch_of(at)
    except (TypeError, ValueError):
        at = iso(time.time())
    return Ticket(ticket_id=uuid.uuid4().hex, created_at=at, run_id=str(event.get("run_id") or "-"),
                  iteration=iteration, phase=phase, project=str(project), severity=severity,
                  cause=_cut(redact(cause, env), MAX_CAUSE), reasoning=_cut(redact(reasoning, env), MAX_TEXT),
                  suggested_action=_cut(redact(action, env), MAX_TEXT),
                  evidence=_cut(redact(evidence, env), MAX_EVIDENCE), steps_since_success=steps,
                  stall_minutes=stall, kind=kind, final=kind == "loop_end",
                  headline=_cut(redact(headline, env), MAX_HEADLINE),
                  lines=tuple(_cut(redact(line, env), MAX_LINE) for line in lines[:MAX_LINES] if line),
                  holds_for_end=bool(event.get("ends_loop")) and kind != "loop_end")


def _lines(evidence: str, reasoning: str, action: str) -> list[str]:
    """A ticket's body when its builder gives none: what was seen, what it means, what to do."""
    def short(text: str) -> str:
        text = _cut(text, 160)
        return text if text.endswith((".", "...", ")")) else text + "."

    act = action if action.lower().startswith("nothing") else f"Act: {action}"
    return [short(evidence), short(reasoning[:1].upper() + reasoning[1:]), short(act[:1].upper() + act[1:])]

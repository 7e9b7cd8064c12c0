"""What a fleet tells its user: one alert per event that needs them (alert_ticket, the words from
fleet/decide.py's builders, the same from the local monitor and the Temporal home), and:

- its end, once, summed up for every project it ran: what came home, what failed (and why),
  what needs review, what is still open, the cost and the duration (the children's own ends
  are the fleet's to tell: alerts/fleetchild.py);
- a resolution when a task comes home after trouble its attempts told (a stall, a phase that
  gave up): the follow-up goes wherever that alert went.

Pure: the monitor gathers the facts (Outcome) and dispatches the tickets.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import PurePath
from typing import Sequence

from genesis import exitcodes
from genesis.alerts.tickets import (MAX_CAUSE, MAX_EVIDENCE, MAX_HEADLINE, MAX_LINE, MAX_LINES, MAX_TEXT, STOP_WORDS,
                                    Ticket, iso)
from genesis.words import duration, money

__all__ = ["Outcome", "alert_ticket", "end_ticket", "resolution", "FLEET_END", "OWN_KINDS"]

FLEET_END = "fleet_end"
OWN_KINDS = ("fleet", FLEET_END, "resolved", "monitor_down", "monitor_back")  # tickets no task attempt raised
NAMED = 3   # tasks named in one line of the end's message


def alert_ticket(severity: str, cause: str, what: str, action: str, *, run_id: str, project: str,
                 at: float, task: str = "") -> Ticket:
    """One alert of the fleet (a cascade, a task failed for good or left for review) as its ticket."""
    def line(text: str, most: int) -> str:
        text = " ".join(text.split())
        return text if len(text) <= most else text[:most - 3] + "..."

    return Ticket(ticket_id=uuid.uuid4().hex, created_at=iso(at), run_id=run_id, iteration=None, phase=None,
                  project=project, severity=severity, cause=line(cause, MAX_CAUSE), reasoning=line(what, MAX_TEXT),
                  suggested_action=line(action, MAX_TEXT), evidence=line(what, MAX_EVIDENCE),
                  steps_since_success=None, stall_minutes=None, kind="fleet", final=False,
                  headline=line(cause, MAX_HEADLINE), lines=(line(what, MAX_LINE), line(action, MAX_LINE)),
                  task=task)


@dataclass(frozen=True)
class Outcome:
    """One project's fleet run, as its end is told."""
    project: str
    code: int
    reason: str
    home: tuple[str, ...]                  # task texts merged (or kept ready) in this run
    failed: tuple[tuple[str, str], ...]    # (task text, why) failed permanently in this run
    review: tuple[tuple[str, str], ...]    # (task text, why) sent to review in this run
    still_open: int                        # tasks neither finished nor decided
    cost_usd: float | None                 # the children's cost in this run (None: none known)
    seconds: float


def _cut(text: str, most: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= most else text[:most - 3].rstrip() + "..."


def _named(items: Sequence[str]) -> str:
    shown = ", ".join(items[:NAMED])
    return shown + (f" and {len(items) - NAMED} more" if len(items) > NAMED else "")


def _severity(code: int) -> str:
    if code == exitcodes.OK:
        return "low"
    if code in (exitcodes.FLEET_TASKS_FAILED, exitcodes.FLEET_NEEDS_REVIEW):
        return "high"
    return "critical" if code in (exitcodes.DISK_FULL, exitcodes.SANDBOX_UNAVAILABLE) else "high"


def end_ticket(outcomes: Sequence[Outcome], run_id: str, at: float) -> Ticket:
    """The one message of the fleet's end (several projects: one for all of them)."""
    # As the fleet's exit code is chosen (monitor.worst_exit): a stop first, then 31, then 32.
    worst = max(outcomes, key=lambda o: (o.code != exitcodes.OK, o.code not in (exitcodes.FLEET_TASKS_FAILED,
                                                                               exitcodes.FLEET_NEEDS_REVIEW),
                                         o.code == exitcodes.FLEET_TASKS_FAILED))
    code = worst.code
    home = [t for o in outcomes for t in o.home]
    failed = [(t, why) for o in outcomes for t, why in o.failed]
    review = [(t, why) for o in outcomes for t, why in o.review]
    still = sum(o.still_open for o in outcomes)
    costs = [o.cost_usd for o in outcomes if o.cost_usd is not None]
    took = max(o.seconds for o in outcomes)
    decided = len(home) + len(failed) + len(review)
    where = outcomes[0].project if len(outcomes) == 1 else \
        f"{PurePath(outcomes[0].project).name} and {len(outcomes) - 1} more project(s)"
    if code == exitcodes.OK:
        headline = f"fleet over: {len(home)}/{decided} tasks came home" if decided else "fleet over: nothing to do"
    elif code in (exitcodes.FLEET_TASKS_FAILED, exitcodes.FLEET_NEEDS_REVIEW):
        headline = f"fleet over: {len(home)}/{decided} home, " + ", ".join(filter(None, [
            f"{len(failed)} failed" if failed else "", f"{len(review)} to review" if review else ""]))
    else:
        headline = f"fleet stopped: {STOP_WORDS.get(code) or _cut(worst.reason, 40)}"
    lines = [f"Ended: {worst.reason or 'no reason recorded'} (exit {code})."]
    if home:
        lines.append(f"Came home: {_named(home)}.")
    lines += [f"Failed: {text} ({why})." for text, why in failed[:2]]
    if len(failed) > 2:
        lines.append(f"Failed too: {_named([t for t, _ in failed[2:]])}.")
    lines += [f"Needs review: {text} ({why})." for text, why in review[:1]]
    if len(review) > 1:
        lines.append(f"To review too: {_named([t for t, _ in review[1:]])}.")
    if still:
        lines.append(f"Still open: {still} task(s), for the next fleet start.")
    lines.append(", ".join([f"Cost {money(sum(costs))}" if costs else "Cost not known",
                            f"duration {duration(took)}"]) + ".")
    act = ("Nothing to do: the fleet's report has the night." if not failed and not review and code == exitcodes.OK
           else "Act: look at the failed and unreviewed tasks' branches (fleet status, the fleet's report), fix, "
                "then reopen or merge them." if failed or review else
           "Act: read the fleet's report, fix what stopped it, then start the fleet again.")
    lines = [_cut(line, MAX_LINE) for line in lines]
    lines = [*lines[:MAX_LINES - 1], _cut(act, MAX_LINE)]
    severity = _severity(code)
    return Ticket(ticket_id=uuid.uuid4().hex, created_at=iso(at), run_id=run_id, iteration=None, phase=None,
                  project=where, severity=severity, cause=_cut(f"fleet ended: {worst.reason or code}", MAX_CAUSE),
                  reasoning=f"the fleet's end is always told (exit {code})",
                  suggested_action=_cut(act.removeprefix("Act: "), MAX_CAUSE),
                  evidence=_cut(" ".join(lines[:-1]), MAX_EVIDENCE), steps_since_success=None, stall_minutes=None,
                  kind=FLEET_END, final=True, headline=_cut(headline, MAX_HEADLINE), lines=tuple(lines))


def resolution(task: str, attempt: int, told: Sequence[Ticket], project: str, run_id: str,
               at: float) -> Ticket | None:
    """The follow-up to the newest alert told about a task's attempts, once the task came home
    (None: nothing was told, or it is resolved already)."""
    settled = {t.resolves for t in told if t.resolves}
    open_ = [t for t in told if t.kind not in OWN_KINDS and not t.final and t.ticket_id not in settled]
    if not open_:
        return None
    last = open_[-1]
    name = _cut(task, 40)
    lines = (_cut(f"{name} came home on attempt {attempt}.", MAX_LINE),
             _cut(f"It resolves: {last.headline or last.cause}.", MAX_LINE), "Nothing to do.")
    return Ticket(ticket_id=uuid.uuid4().hex, created_at=iso(at), run_id=run_id, iteration=None, phase=None,
                  project=project, severity="low", cause=_cut(f"task {name} came home", MAX_CAUSE),
                  reasoning="a later attempt did the task the alert was about", suggested_action="nothing",
                  evidence=_cut(f"{task}: merged on attempt {attempt}", MAX_EVIDENCE), steps_since_success=None,
                  stall_minutes=None, kind="resolved", final=False,
                  headline=_cut(f"resolved: {name} came home", MAX_HEADLINE), lines=lines, resolves=last.ticket_id)

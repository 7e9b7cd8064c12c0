"""The health score of a project (0-100) and of the machine, from the documents `status --json`
and `fleet status --json` give (docs/reference/status-json.md, docs/reference/fleet-status-json.md): pure and fast.

A project starts at 100; each thing wrong takes the points of its row in COSTS, and the score
stops at 0. What stops work or loses it (a stuck or wedged agent, an open breaker, a task failed
for good, a loop that ended abnormally) costs the most; what slows it (a slow agent, a restart,
an incident of this run) less; a wait for a usage limit costs a little (nothing is wrong, but
nothing moves). Counted causes (restarts, incidents, slow agents) are capped, so that one noisy
cause cannot hide the others. The machine is as healthy as its worst project. The README's
table is this module's COSTS, in words.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from genesis import exitcodes
from genesis.config import default_of
from genesis.durations import seconds
from genesis.status.view import KILLED_PREFIX
from genesis.when import clock
from genesis.words import duration, one_line

__all__ = ["Score", "Reason", "Cost", "COSTS", "score", "machine_score", "ENDED_WELL", "FLEET_ENDED_WELL",
           "SILENT_SECONDS", "MONITOR_SILENT_SECONDS", "FULL"]

FULL = 100
SILENT_SECONDS = seconds("HEARTBEAT_STALE", default_of("HEARTBEAT_STALE"), "s")   # older than the default stale window
MONITOR_SILENT_SECONDS = 120    # the fleet's monitor beats every few seconds: two minutes is far past that
NAME_CHARS = 40                 # a task's text in a reason, at most

# A loop's or a fleet's exit that is no trouble: done, a ceiling the user set, a usage limit that
# resets after the longest wait (stopped to be started again), stopped by the user.
ENDED_WELL = frozenset({exitcodes.OK, exitcodes.WORK_DONE, exitcodes.USAGE_LIMIT, exitcodes.MAX_RUNTIME,
                        exitcodes.MAX_COST, exitcodes.INTERRUPTED_INT, exitcodes.INTERRUPTED_TERM})
# A fleet's failed and to-review tasks are counted each by itself.
FLEET_ENDED_WELL = ENDED_WELL | {exitcodes.FLEET_TASKS_FAILED, exitcodes.FLEET_NEEDS_REVIEW}


@dataclass(frozen=True)
class Reason:
    points: int                    # negative: what it takes
    why: str                       # one short line a user understands, its points at the end

    def as_json(self) -> dict[str, Any]:
        return {"points": self.points, "why": self.why}


@dataclass(frozen=True)
class Score:
    value: int                     # 0-100
    reasons: tuple[Reason, ...]    # the most costly first

    def as_json(self) -> dict[str, Any]:
        return {"score": self.value, "reasons": [r.as_json() for r in self.reasons]}


@dataclass(frozen=True)
class Cost:
    key: str
    points: int                    # taken each time
    most: int | None               # taken at most, in all (None: no cap but the floor)
    what: str                      # the README's words


COSTS: dict[str, Cost] = {c.key: c for c in (
    Cost("unreadable", -50, None, "the project cannot be read at all (its ledgers or state files)"),
    Cost("ended_abnormally", -30, None, "the loop (or the fleet) ended abnormally: killed, breaker OPEN, an error "
                                        "(until its next start)"),
    Cost("breaker_open", -30, None, "circuit breaker OPEN (a loop it stopped: once, as its end)"),
    Cost("stuck", -25, None, "an agent stuck or wedged (each)"),
    Cost("frozen", -25, None, "the loop's process is stopped by a signal (frozen)"),
    Cost("killed", -15, -30, "an agent killed as stuck in the last minute, its retry perhaps already running "
                             "(each, at most -30)"),
    Cost("cascade", -25, None, "a cascade pause: too many children failed, restarts held"),
    Cost("failed", -30, None, "a fleet task failed permanently (each): its work will not come home by itself"),
    Cost("silent", -15, -30, "a running agent's heartbeat older than 15 min that its watcher does not call stuck "
                             "(each, at most -30)"),
    Cost("monitor_silent", -15, None, "the fleet's monitor has not beaten for 2 min while it runs"),
    Cost("slow", -10, -30, "an agent slow (each, at most -30)"),
    Cost("breaker_half_open", -10, None, "circuit breaker HALF_OPEN"),
    Cost("needs_review", -10, None, "a fleet task needs review (each)"),
    Cost("partly_unreadable", -10, None, "part of the project's state cannot be read"),
    Cost("restarts", -5, -15, "a restart or escalation in progress (each, at most -15)"),
    Cost("incidents", -5, -20, "an incident of this run (each, at most -20)"),
    Cost("limit", -5, None, "waiting for a usage limit or an API outage (nothing is wrong, but nothing moves)"),
)}


class _Tally:
    """Reasons, with each capped cause's points kept within its cap."""

    def __init__(self) -> None:
        self.reasons: list[Reason] = []
        self.spent: dict[str, int] = {}

    def take(self, key: str, why: str, times: int = 1) -> None:
        cost = COSTS[key]
        points = cost.points * times
        if cost.most is not None:
            points = max(points, cost.most - self.spent.get(key, 0))
        if points >= 0:
            return
        self.spent[key] = self.spent.get(key, 0) + points
        self.reasons.append(Reason(points, f"{one_line(why, 160)} ({points})"))

    def score(self) -> Score:
        reasons = tuple(sorted(self.reasons, key=lambda r: r.points))
        return Score(max(0, FULL + sum(r.points for r in reasons)), reasons)


def score(status_doc: Mapping[str, Any] | None, fleet_doc: Mapping[str, Any] | None, now: float,
          error: str | None = None, killed: Sequence[str] = ()) -> Score:
    """A project's score from its `status --json` and `fleet status --json` documents (either may be
    None: no loop, no fleet); `error`, or neither document: the project cannot be read. killed: the
    loops or tasks whose agent was killed as stuck lately and whose health no longer says so (a
    retry runs): the documents alone would call them healthy."""
    tally = _Tally()
    if error is not None or (status_doc is None and fleet_doc is None):
        tally.take("unreadable", f"cannot be read: {error or 'no status'}")
        return tally.score()
    for name in killed:
        tally.take("killed", f"{name} killed as stuck in the last minute")
    if status_doc is not None:
        _loop(tally, status_doc, now)
    if fleet_doc is not None:
        _fleet(tally, fleet_doc, now)
    return tally.score()


def machine_score(scores: Sequence[Score], names: Sequence[str] | None = None) -> Score:
    """The machine's score: its worst project's, with that project's reasons (prefixed by its
    name when names are given, one per score). No project: 100."""
    if not scores:
        return Score(FULL, ())
    worst = min(range(len(scores)), key=lambda i: scores[i].value)
    chosen = scores[worst]
    if names is None:
        return chosen
    return Score(chosen.value, tuple(Reason(r.points, f"{names[worst]}: {r.why}") for r in chosen.reasons))


# --- a loop ------------------------------------------------------------------------------------

def _loop(tally: _Tally, doc: Mapping[str, Any], now: float) -> None:
    state = doc.get("state")
    if doc.get("error"):
        tally.take("partly_unreadable", f"part of the loop's state cannot be read: {doc['error']}")
    run = _dict(doc.get("run"))
    if state == "frozen":
        tally.take("frozen", "the loop's process is stopped (frozen): nothing moves")
    elif state == "stopped":  # killed: its run has no end, or the end its companion recorded says so
        reason = str(run.get("reason") or "")
        tally.take("ended_abnormally", reason if reason.startswith(KILLED_PREFIX) else
                   "the loop was killed: its run has no end")
    elif state == "not_running" and run and _int(run.get("exit_code")) is not None \
            and run["exit_code"] not in ENDED_WELL:
        why = run.get("reason") or f"exit {run['exit_code']}"
        tally.take("ended_abnormally", f"the loop ended abnormally: {why}")
    breaker = _dict(doc.get("breaker"))
    stopped_by_it = state == "not_running" and run.get("exit_code") == exitcodes.BREAKER_OPEN  # said once, above
    if breaker.get("state") == "OPEN" and not stopped_by_it:
        tally.take("breaker_open", "circuit breaker OPEN: the loop made no progress")
    elif breaker.get("state") == "HALF_OPEN":
        tally.take("breaker_half_open", "circuit breaker HALF_OPEN: progress is stalling")
    running = state in ("running", "waiting")
    phase = _dict(doc.get("phase")) if running else {}
    if phase:
        name = phase.get("name") or "the phase"
        _health(tally, str(name), phase.get("health_class"), _num(phase.get("heartbeat_age_seconds")))
        if _int(phase.get("attempt")):
            tally.take("restarts", f"{name} is running again after a stall (retry {phase['attempt']})")
    wait = _dict(doc.get("wait")) if running else {}
    if wait.get("kind") in ("limit", "outage"):
        until = _num(wait.get("until_epoch"))
        tally.take("limit", f"waiting: {wait.get('label') or wait['kind']}" +
                   (f" until {clock(until)}" if until is not None and until > now else ""))
    elif wait.get("kind") == "retry":
        tally.take("restarts", f"{wait.get('phase') or 'a phase'} waits to run again after a stall")
    totals = _dict(doc.get("totals"))
    incidents = _int(totals.get("incidents")) or 0
    if incidents and totals.get("scope") == "this_run":
        tally.take("incidents", f"{incidents} incident{'s' if incidents != 1 else ''} this run", incidents)


def _health(tally: _Tally, name: str, health: Any, beat_age: float | None) -> None:
    """A running agent's health as its watcher judged it, and a heartbeat older than any default."""
    if health in ("stuck", "wedged"):
        tally.take("stuck", f"{name} {health}")
    elif health == "slow":
        tally.take("slow", f"{name} slow")
    if health not in ("stuck", "wedged") and beat_age is not None and beat_age > SILENT_SECONDS:
        tally.take("silent", f"{name}: no heartbeat for {duration(beat_age)}")


# --- a fleet -----------------------------------------------------------------------------------

def _fleet(tally: _Tally, doc: Mapping[str, Any], now: float) -> None:
    state = doc.get("state")
    if state == "not_running":
        return
    if doc.get("error"):
        tally.take("partly_unreadable", f"part of the fleet's state cannot be read: {doc['error']}")
    fleet = _dict(doc.get("fleet"))
    if state == "stopped":
        tally.take("ended_abnormally", "the fleet's monitor was killed: no end recorded")
    elif state == "ended" and _int(fleet.get("exit_code")) is not None and fleet["exit_code"] not in FLEET_ENDED_WELL:
        why = fleet.get("reason") or f"exit {fleet['exit_code']}"
        tally.take("ended_abnormally", f"the fleet ended abnormally: {why}")
    monitor = _dict(doc.get("monitor"))
    age = _num(monitor.get("heartbeat_age_seconds"))
    if state == "running" and age is not None and age > MONITOR_SILENT_SECONDS:
        tally.take("monitor_silent", f"the fleet's monitor has not beaten for {duration(age)}")
    if doc.get("cascade"):
        tally.take("cascade", "cascade pause: too many children failed, restarts are held")
    limit = _dict(doc.get("limit"))
    if limit:
        until = _num(limit.get("until_epoch"))
        what = "an API outage" if limit.get("kind") == "outage" else "a usage limit"
        tally.take("limit", f"the fleet waits for {what}" + (f" until {clock(until)}" if until and until > now else ""))
    for task in doc.get("tasks") or ():
        if not isinstance(task, Mapping):
            continue
        name = _task_name(task)
        st = task.get("state")
        if st == "failed":
            tally.take("failed", f"task failed permanently: {name}")
        elif st == "needs-review":
            tally.take("needs_review", f"task needs review: {name}")
        elif st in ("restarting", "escalated"):
            tally.take("restarts", f"task {'restarting' if st == 'restarting' else 'escalated'}: {name}")
        child = _dict(task.get("child"))
        if st == "running" and child.get("read"):
            _health(tally, name, child.get("health_class"), _num(child.get("heartbeat_age_seconds")))


def _task_name(task: Mapping[str, Any]) -> str:
    text = task.get("text") or task.get("id") or "?"
    return one_line(str(text), NAME_CHARS)


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

"""The morning report: what each run did, read back from the events log."""

from __future__ import annotations

import calendar
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import events
from .layout import Layout

__all__ = ["RunSummary", "UnknownRun", "run_events", "runs", "summary", "summary_lines", "list_lines", "duration"]

Event = dict[str, Any]

# How a phase_end status reads in the report; anything but a clean exit is abnormal.
LABELS = {"exited": "exited", "stale": "stuck", "wedged": "wedged", "overtime": "over time", "api_fatal": "refused by the API",
          "interrupted": "interrupted",
          "not_started": "could not start", "watcher_lost": "watcher lost"}


class UnknownRun(LookupError):
    """No run with that id in the events log."""


@dataclass(frozen=True)
class RunSummary:
    run_id: str
    started: str
    ended: str | None               # None: no loop_end (still running, or the loop was killed)
    seconds: float | None
    reason: str
    exit_code: int | None
    iterations: int
    phases: tuple[Event, ...]       # phase_end events, in order
    skipped: int
    reaped: int
    breaker: str | None
    no_progress: int
    waits: tuple[Event, ...] = ()   # wait_end events: usage limits, outages, cooldowns sat out

    @property
    def abnormal(self) -> tuple[Event, ...]:
        return tuple(e for e in self.phases if not (e.get("status") == "exited" and e.get("returncode") == 0))


def epoch_of(stamp: str | None) -> float | None:
    try:
        return float(calendar.timegm(time.strptime(stamp or "", "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return None


def duration(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def _by_run(layout: Layout) -> dict[str, list[Event]]:
    """Every run's events, in the order the runs started (one read of the log)."""
    grouped: dict[str, list[Event]] = {}
    for e in events.read_events(layout.events_file, all_runs=True):
        if e.get("event") == "loop_start" or e["run_id"] in grouped:
            grouped.setdefault(e["run_id"], []).append(e)
    return grouped


def run_events(layout: Layout, run_id: str) -> list[Event]:
    """The events of one run, in order (none if it is unknown)."""
    return _by_run(layout).get(run_id, [])


def runs(layout: Layout) -> list[str]:
    """Run ids in the order they started."""
    return list(_by_run(layout))


def summary(layout: Layout, run_id: str | None = None) -> RunSummary:
    """One run (the latest when run_id is None); UnknownRun if there is none such."""
    grouped = _by_run(layout)
    if not grouped:
        raise UnknownRun(f"no Genesis run recorded in {layout.events_file}")
    if run_id is None:
        run_id = list(grouped)[-1]
    elif run_id not in grouped:
        raise UnknownRun(f"no run {run_id!r} in {layout.events_file}; `genesis report --list` lists the runs")
    return _summarize(run_id, grouped[run_id])


def _summarize(run_id: str, evs: list[Event]) -> RunSummary:
    start = evs[0]
    end = next((e for e in reversed(evs) if e["event"] == "loop_end"), None)
    iterations = {e.get("iteration") for e in evs if e["event"] == "iteration_start"}
    last_breaker = next((e for e in reversed(evs) if e["event"] == "iteration_end"), {})
    began, finished = epoch_of(start.get("at")), epoch_of(end.get("at")) if end else None
    return RunSummary(
        run_id=run_id, started=start.get("at", "?"), ended=end.get("at") if end else None,
        seconds=(finished - began) if began is not None and finished is not None else None,
        reason=str(end.get("reason", "")) if end else "", exit_code=end.get("exit_code") if end else None,
        iterations=len(iterations), phases=_with_logs(evs),
        skipped=sum(1 for e in evs if e["event"] == "phase_skip"),
        reaped=sum(len(e.get("pids", [])) for e in evs if e["event"] == "reap")
        + sum(int(e.get("swept", 0) or 0) for e in evs if e["event"] == "phase_end"),
        breaker=last_breaker.get("breaker"), no_progress=int(last_breaker.get("no_progress", 0) or 0),
        waits=tuple(e for e in evs if e["event"] == "wait_end"))


def _with_logs(evs: list[Event]) -> tuple[Event, ...]:
    """phase_end events, each with the log its phase_start named."""
    logs = {(e.get("iteration"), e.get("phase")): e.get("log") for e in evs if e["event"] == "phase_start"}
    return tuple({**e, "log": logs.get((e.get("iteration"), e.get("phase")))} for e in evs
                 if e["event"] == "phase_end")


def _phase_line(e: Event) -> str:
    status = e.get("status", "?")
    label = LABELS.get(status, status)
    if status == "exited":
        label = f"exited with status {e.get('returncode')}"
    killed = f"; killed {e['killed']} process(es)" if e.get("killed") else ""
    return (f"iteration {e.get('iteration')} {e.get('phase')}: {label} after {duration(e.get('duration', 0))}: "
            f"{e.get('detail') or '-'}{killed}")


def summary_lines(layout: Layout, run_id: str | None = None, running: bool = False) -> list[str]:
    """The report of one run, for the terminal; `running` if its loop is still alive."""
    s = summary(layout, run_id)
    by_status: dict[str, int] = {}
    for e in s.phases:
        key = "finished" if e.get("status") == "exited" and e.get("returncode") == 0 else \
            f"exit {e.get('returncode')}" if e.get("status") == "exited" else LABELS.get(e.get("status"), "?")
        by_status[key] = by_status.get(key, 0) + 1
    if s.ended:
        when = f"ended {s.ended} after {duration(s.seconds or 0)}: {s.reason} (exit {s.exit_code})"
    elif running:
        when = "still running"
    else:
        when = "no end recorded (the loop was killed, or its events log lost the end)"
    lines = [f"run {s.run_id}: started {s.started}, {when}",
             f"  iterations: {s.iterations}; phases run: {len(s.phases)} "
             f"({', '.join(f'{n} {k}' for k, n in sorted(by_status.items())) or 'none'}); skipped: {s.skipped}",
             f"  leftover processes ended: {s.reaped}"]
    pending = pending_wait_line(layout, s.run_id, time.time()) if running else None
    if pending:
        lines.insert(1, pending)
    health = health_line(layout, s.run_id) if running and not pending else None
    if health:
        lines.insert(1, health)
    if s.breaker:
        lines.append(f"  breaker: {s.breaker} ({s.no_progress} iteration(s) without progress at the end)")
    lines += _night_lines(s)
    if s.abnormal:
        lines.append(f"  abnormal phases ({len(s.abnormal)}):")
        for e in s.abnormal:
            lines.append(f"    {_phase_line(e)}")
            lines += [f"      | {line}" for line in _transcript_tail(e)]
    lines.append(f"  logs: {layout.run_dir(s.run_id)}")
    return lines


def _transcript_tail(end: Event, lines: int = 3) -> list[str]:
    """The last lines of an abnormal phase's transcript (sanitised), where its log still is."""
    from .agentlog import tail

    log = end.get("log")
    return [line for line in tail(Path(log), lines) if line.strip()] if isinstance(log, str) else []


WAIT_LABELS = {"limit": "usage limit", "outage": "API outage", "cooldown": "breaker cooldown",
               "retry": "retry of a stuck phase"}


def reported(phases: list[Event] | tuple[Event, ...], key: str) -> list[float]:
    """A figure the agents reported (cost_usd, num_turns) over phase_end events: real numbers only."""
    return [e[key] for e in phases if isinstance(e.get(key), (int, float)) and not isinstance(e.get(key), bool)]


def _night_lines(s: RunSummary) -> list[str]:
    """What the night cost and what it sat out: reported costs and turns, waits by kind."""
    lines = []
    costs = reported(s.phases, "cost_usd")
    turns = int(sum(reported(s.phases, "num_turns")))
    if costs:
        lines.append(f"  reported by the agents: ${sum(costs):.4f}, {turns} turn(s)")
    waits: dict[str, list[float]] = {}
    for e in s.waits:
        waits.setdefault(str(e.get("kind")), []).append(float(e.get("waited", 0) or 0))
    if waits:
        lines.append("  waited: " + "; ".join(f"{WAIT_LABELS.get(k, k)} {len(v)} time(s), {duration(sum(v))}"
                                              for k, v in sorted(waits.items())))
    retried = [e for e in s.phases if (e.get("attempt") or 0) > 0]
    if retried:
        how = ", ".join(f"iteration {e.get('iteration')} {e.get('phase')}: {e.get('ending')}" for e in retried[:6])
        lines.append(f"  retried after a stall: {len(retried)} time(s) ({how})")
    would = sum(1 for e in s.phases if e.get("would_kill"))
    if would:
        lines.append(f"  warn-only: {would} phase(s) would have been killed as stuck (GENESIS_HEALTH_ENFORCE=false)")
    errors = sum(1 for e in s.phases if e.get("ending") in ("outage", "fatal"))
    if errors:
        lines.append(f"  phases ended by an API error: {errors}")
    return lines


def health_line(layout: Layout, run_id: str) -> str | None:
    """The running phase's health, from the snapshot its watcher keeps."""
    from .atomicio import CorruptFile, read_json

    snaps = []
    for path in sorted(layout.heartbeat_dir.glob("*.health.json")) if layout.heartbeat_dir.is_dir() else []:
        try:
            data = read_json(path, limit=64 << 10)
        except (CorruptFile, OSError):
            continue
        if isinstance(data, dict) and data.get("run_id") == run_id:
            snaps.append(data)
    if not snaps:
        return None
    snap = max(snaps, key=lambda d: str(d.get("at", "")))
    inside = f", inside {snap['tool_in_flight']}" if snap.get("tool_in_flight") else ""
    return (f"  now: iteration {snap.get('iteration')} {snap.get('phase')} is {snap.get('classification')} "
            f"(stall score {snap.get('stall_score')}, as of {snap.get('at')}){inside}")


def pending_wait_line(layout: Layout, run_id: str, now: float) -> str | None:
    """The wait a running loop sits out now, if any."""
    from .atomicio import CorruptFile, read_json

    try:
        data = read_json(layout.wait_file)
    except CorruptFile:
        return None
    if not isinstance(data, dict) or data.get("run_id") != run_id or not isinstance(data.get("until"), (int, float)):
        return None
    label = WAIT_LABELS.get(str(data.get("kind")), "a wait")
    until = time.strftime("%H:%M:%S", time.localtime(data["until"]))
    return f"  now: waiting out a {label} until {until} ({duration(max(0.0, data['until'] - now))} left): " \
           f"{data.get('reason', '')}"


def list_lines(layout: Layout) -> list[str]:
    """One line per run: id, start, iterations, and how it ended."""
    lines = []
    for run_id, evs in _by_run(layout).items():
        s = _summarize(run_id, evs)
        end = f"{duration(s.seconds or 0)}, exit {s.exit_code}: {s.reason}" if s.ended else "no end recorded"
        lines.append(f"{s.run_id}  started {s.started}  {s.iterations} iteration(s)  {end}")
    return lines

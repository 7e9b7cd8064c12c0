"""A fleet's child watching its monitor: one "monitor down" alert when the monitor's heartbeat is stale.

The monitor writes `<fleet dir>/monitor.json` ({"pid", "run_id", "started", "at"}) each tick.
A child (GENESIS_FLEET_DIR in its environment) reads it between phases: at an iteration's
start and before each phase. Older than GENESIS_FLEET_MONITOR_STALE_SECONDS, missing or
unreadable, the monitor is down: the child records `monitor_down` in its ledger, which raises
one alert, and goes on to its own end (nothing it does needs the monitor). It says so once a
run; when the heartbeat is fresh again it records `monitor_back` (a resolved alert), and a
later stale heartbeat is news again. One small file read with a size bound, no symlink
followed, nothing waited on.

With GENESIS_FLEET_MONITOR_STOP_SECONDS set, a monitor gone that long ends the child at that
check instead (`monitor_gone`, exit MONITOR_LOST): on Temporal the monitor is the worker's
activity, and a worker down that long has its task placed on another machine, where a second
loop must not meet this one on the same branch. Each phase commits its own work before the
next check, so stopping there loses nothing.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Mapping

from genesis import exitcodes
from genesis.loop.onetask import task_id_of, task_of
from genesis.loop.step import Step
from genesis.store.atomicio import CorruptFile, finite, read_json

__all__ = ["HEARTBEAT", "MAX_BYTES", "monitor_age", "watch_monitor", "monitor_gone"]

HEARTBEAT = "monitor.json"
MAX_BYTES = 64 << 10
DOWN, BACK, LOST = "monitor_down", "monitor_back", "monitor_lost"


def monitor_age(fleet_dir: Path, now: float) -> tuple[float | None, int | None, str]:
    """How old the monitor's heartbeat is (None: there is none to read), its pid, and why not."""
    path = fleet_dir / HEARTBEAT
    try:
        beat = read_json(path, MAX_BYTES)
    except (CorruptFile, OSError) as exc:
        return None, None, f"its heartbeat {path} cannot be read ({exc})"
    if beat is None:
        return None, None, f"it has no heartbeat ({path} is missing)"
    at = finite(beat.get("at")) if isinstance(beat, dict) else None
    if at is None:
        return None, None, f"its heartbeat {path} holds no time (\"at\")"
    pid = beat.get("pid")
    return max(0.0, now - at), pid if isinstance(pid, int) and not isinstance(pid, bool) else None, ""


def _project_of(fleet_dir: str) -> str:
    """The fleet's project: its state is `<work tree>/.git/genesis/fleet` (store/layout.py)."""
    git_dir = Path(fleet_dir).parent.parent
    return str(git_dir.parent) if git_dir.name == ".git" else ""


def watch_monitor(step: Step, env: Mapping[str, str], now: float | None = None) -> bool | None:
    """Between phases: whether the fleet's monitor is up (None: not a fleet's child). Says and
    records a change: the first stale heartbeat of a run (one alert), and its return."""
    folder = env.get("GENESIS_FLEET_DIR", "").strip()
    if not folder:
        return None
    now = time.time() if now is None else now
    stale = step.cfg.monitor_stale
    age, pid, why = monitor_age(Path(folder), now)
    up = age is not None and age <= stale
    told = step.events(kinds=(DOWN, BACK))
    down_since = told[-1] if told and told[-1].get("event") == DOWN else None
    if up and down_since is not None:
        step.say(f"the fleet's monitor is back (heartbeat {age:.0f}s old)", "ok")
        step.event(BACK, age=round(age, 1), pid=pid, down_at=down_since.get("epoch"), fleet_dir=folder)
    elif not up and down_since is None:
        if age is not None:
            why = f"its heartbeat is {age:.0f}s old (more than GENESIS_FLEET_MONITOR_STALE_SECONDS={stale:g})"
        step.say(f"the fleet's monitor looks down: {why}. This loop goes on to its own end; starting the "
                 f"fleet again adopts it", "warn")
        step.event(DOWN, age=None if age is None else round(age, 1), pid=pid, why=why, stale=stale,
                   seen=now, fleet_dir=folder, task=task_of(env) or "", task_id=task_id_of(env),
                   project=_project_of(folder))
    return up


def monitor_gone(step: Step, env: Mapping[str, str], now: float | None = None) -> int | None:
    """Between phases: watch the monitor (watch_monitor), and MONITOR_LOST when it has been
    gone for GENESIS_FLEET_MONITOR_STOP_SECONDS (recorded, with the loop's stop reason), else
    None. A missing or unreadable heartbeat counts from the first check that found it so."""
    now = time.time() if now is None else now
    up = watch_monitor(step, env, now)
    limit = step.cfg.monitor_stop
    if up is None or limit <= 0:
        return None
    folder = env.get("GENESIS_FLEET_DIR", "").strip()
    age, pid, why = monitor_age(Path(folder), now)
    if age is None:
        told = step.events(kinds=(DOWN,))
        seen = finite(told[-1].get("seen", told[-1].get("epoch"))) if told else None
        gone = None if seen is None else max(0.0, now - seen)
    else:
        gone = age
    if gone is None or gone < limit:
        return None
    what = f"its heartbeat is {age:.0f}s old" if age is not None else f"{why}, for {gone:.0f}s now"
    reason = (f"the fleet's monitor is gone ({what}, GENESIS_FLEET_MONITOR_STOP_SECONDS={limit:g}): this loop "
              f"stops so that it never works its task beside another machine's loop, which may have it by now")
    step.say(f"{reason}; its phases' work is committed", "error")
    step.event(LOST, gone=round(gone, 1), pid=pid, why=what, stop=limit, fleet_dir=folder,
               task=task_of(env) or "", task_id=task_id_of(env), project=_project_of(folder))
    step.event("stop_reason", code=exitcodes.MONITOR_LOST, reason=reason[:1000])
    return exitcodes.MONITOR_LOST

"""The loop's side of a phase under watch: what the watcher calls at each of its checks (the
repairs, the judge of the tool calls, the keepers of the health snapshot and of incidents)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from genesis.health.capture import capture
from genesis.health.classify import Snapshot, Tracker
from genesis.health.doomloop import DOOM_LOOP, judge
from genesis.health.incidents import write
from genesis.health.toollog import describe, in_flight, pairs, read_tail, rotate, tool_log_path
from genesis.hints import hint
from genesis.loop.guard import guard_breaker
from genesis.loop.step import Step
from genesis.phases import Phase
from genesis.repo.gitcmd import GitFailed
from genesis.repo.progress import Fingerprint, fingerprint
from genesis.store.atomicio import CorruptFile, read_json, write_json
from genesis.watch.evidence import transcript_tail
from genesis.watch.decide import Judgement

__all__ = ["incident_keeper", "on_check", "judge_of", "repo_changed", "health_keeper"]


def incident_keeper(step: Step, phase: Phase, iteration: int, heartbeat: Path, log: Path):
    """Records what an abnormal phase was doing, just before its tree is killed."""

    def keep(root, found, kind: str, reason: str, window: str | None = None) -> None:
        calls = read_tail(tool_log_path(heartbeat))
        flying = in_flight(calls)
        try:
            beat = read_json(heartbeat, limit=64 << 10)
        except CorruptFile:
            beat = None
        extra = [p for p in found if root is None or p != root]
        inc = capture(root, extra, phase=phase.name, iteration=iteration, run_id=step.run_id, reason=reason,
                      kind=kind, heartbeat=beat if isinstance(beat, dict) else None,
                      tool_in_flight=flying, tool_calls=calls[-20:], transcript=transcript_tail(log),
                      project=step.cfg.project, now=time.time(), git_timeout=2.0, window=window, log=str(log))
        path = write(inc, step.layout.incidents_dir)
        step.say(f"{phase.name}: incident recorded: `{hint(step.cfg.project, 'incidents', 'show', path.stem)}`",
                 "info")
        last_beat = beat.get("epoch") if isinstance(beat, dict) else None
        silent = round(time.time() - last_beat, 2) if isinstance(last_beat, (int, float)) else None
        step.event("incident", iteration=iteration, phase=phase.name, id=path.stem, kind=kind, reason=reason[:500],
                   silent_for=silent, window=window, log=str(log))

    return keep


def on_check(step: Step, heartbeat: Path) -> None:
    """At every check of the watcher: the breaker file is back, the tool log stays bounded."""
    guard_breaker(step)
    rotate(tool_log_path(heartbeat))


def judge_of(step: Step, heartbeat: Path) -> Callable[[], Judgement]:
    """Judges the phase's tool calls at every check. Whether the repository changed is measured
    only when a cycle is seen (git costs)."""

    def now() -> Judgement:
        calls = read_tail(tool_log_path(heartbeat))
        flying = in_flight(calls)
        done = pairs(calls)
        last_ok = next((c.t for c in reversed(done) if c.ok), None)
        verdict = judge(done, repo_changed=False, limits=step.cfg.doom_limits)
        wedged = verdict.wedged
        if verdict.pattern == DOOM_LOOP and repo_changed(step):
            wedged = ""
        since = f" since {time.strftime('%H:%M:%S', time.localtime(flying.t))}" if flying else ""
        return Judgement(wedged, verdict.severity, verdict.calls,
                         f"{describe(flying, 120)}{since}" if flying else "", last_ok)

    return now


def repo_changed(step: Step) -> bool:
    """Whether the repository differs from the iteration's baseline (any doubt: changed)."""
    try:
        base = Fingerprint.from_json(read_json(step.layout.baseline_file))
        return base is None or base != fingerprint(step.cfg.project, step.layout.ignored())
    except (CorruptFile, GitFailed, OSError):
        return True


def health_keeper(step: Step, phase: Phase) -> Callable[[Snapshot], None]:
    """Keeps the phase's health snapshot in the state folder at every check (for status and
    the report) and records each change of its class; a worse class is said at most once per
    stale window."""
    tracker = Tracker(step.cfg.stale_after)
    path = step.layout.health_file(phase.name)

    def keep(snap: Snapshot) -> None:
        write_json(path, snap.to_json())
        changed, say = tracker.update(snap)
        if changed:
            step.event("health", iteration=snap.iteration, phase=phase.name, classification=snap.classification,
                       stall_score=snap.stall_score, reason=snap.reason[:300], idle=round(snap.idle, 1),
                       steps_since_success=snap.tool_calls)
        if say:
            step.say(f"{phase.name}: {snap.classification} (stall score {snap.stall_score:.2f}; last event: "
                     f"{snap.last_event})", "warn")

    return keep

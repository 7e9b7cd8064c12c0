"""A keyed child: a fleet child whose phase commits carry a key (GENESIS_COMMIT_KEY, which
only the fleet on Temporal sets), and whose task branch is shared through the remote.

The engine may run one attempt of a task more than once (a lost worker's retry, here or on a
fresh clone of the branch as pushed), and each try starts a new loop at iteration 1. So:

- a phase whose commit of this key, iteration and phase is already on the branch, made by
  another loop, is not run again: an earlier try committed it (`already_committed`), so no
  phase is committed by two tries. A loop that runs a phase again itself (a retry after a
  stall, a usage limit or an outage, its partial work committed) commits each run of it
  under the same key, as a key names a phase of an iteration, not one run of it;
- the task branch gets an upstream on its first push (`gives_upstream`), so that a retry on
  another machine starts where this one left off. A local fleet's child (no key) pushes as it
  always did: only to an upstream the user set;
- a push the remote refuses as non-fast-forward means another loop of the task pushed its
  branch meanwhile (the task moved while this loop was still in a phase): this loop steps
  aside with STEPPED_ASIDE (`stepped_aside`), its work committed here, and the newer loop owns
  the branch. Nothing is ever forced.
"""

from __future__ import annotations

import os
from typing import Iterable, Mapping

from genesis import exitcodes
from genesis.config import Config
from genesis.loop.onetask import task_id_of
from genesis.loop.step import Step
from genesis.repo.autocommit import CommitResult
from genesis.repo.gitcmd import GitFailed, run_git
from genesis.repo.phasekeys import PhaseKey, keys_on, trailer_value

__all__ = ["keyed", "gives_upstream", "already_committed", "replayed", "stepped_aside", "KEYED_SKIP"]

KEYED_SKIP = "keyed"   # the phase_skip event's field naming the commit an earlier try made
GIT_TIMEOUT = 30.0     # seconds for each git read of the branch


def keyed(cfg: Config, env: Mapping[str, str]) -> bool:
    """A fleet child run by the engine that keys its commits (the fleet on Temporal)."""
    return bool(cfg.commit_key) and bool(task_id_of(env))


def gives_upstream(cfg: Config, env: Mapping[str, str] | None = None) -> bool:
    """Whether a branch without an upstream gets one on its first push: only a keyed child's
    task branch, which another machine may take up from the remote."""
    return keyed(cfg, os.environ if env is None else env)


def _committed(step: Step, iteration: int, phase: str) -> PhaseKey | None:
    """The newest commit on the branch keyed with this phase by another loop (an earlier try)."""
    mine = f"[run {step.run_id}]"   # the run named in the subject of each of Genesis's phase commits
    try:
        for key in keys_on(step.cfg.project, "HEAD", prefix=step.cfg.commit_key, timeout=GIT_TIMEOUT):
            if key.key == step.cfg.commit_key and key.iteration == iteration and key.phase == phase:
                subject = run_git(step.cfg.project, ["log", "-1", "--format=%s", key.sha, "--"],
                                  timeout=GIT_TIMEOUT)
                if subject.returncode == 0 and mine not in subject.text:
                    return key
    except GitFailed as exc:   # the phase runs: git's trouble is said where it matters, at its commit
        step.say(f"{phase}: the phase keys on the branch could not be read ({exc}); running it", "warn")
    return None


def already_committed(step: Step, phase: str, iteration: int) -> int | None:
    """PHASE_SKIPPED (said and recorded) when the branch already carries this phase's key from
    another loop: an earlier try of this attempt ran it and committed its work, however it
    ended; None otherwise, when the loop is not keyed, or when this loop ran the phase itself
    in this iteration (a retry after a stall or a wait commits under the same key again)."""
    if not keyed(step.cfg, os.environ):
        return None
    if any(e.get("phase") == phase for e in step.events(kinds=("phase_start",), iteration=iteration)):
        return None   # this loop ran it already: its own retry (after a stall or a wait) always runs
    done = _committed(step, iteration, phase)
    if done is None:
        return None
    value = trailer_value(done.key, iteration, phase)
    step.say(f"{phase}: skipped: an earlier try of this attempt committed it ({done.sha[:12]}, "
             f"Genesis-Phase: {value})", "info")
    step.event("phase_skip", iteration=iteration, phase=phase, why="committed by an earlier try of this attempt",
               **{KEYED_SKIP: done.sha})
    return exitcodes.PHASE_SKIPPED


def replayed(events: Iterable[Mapping]) -> bool:
    """An iteration (its events) whose phases were all skipped, some as already committed by an
    earlier try: its work was done then, so the breaker does not count it as no progress."""
    mine = [e for e in events if e.get("event") in ("phase_start", "phase_skip")]
    return bool(mine) and all(e.get("event") == "phase_skip" for e in mine) and \
        any(e.get(KEYED_SKIP) for e in mine)


def stepped_aside(step: Step, phase: str, iteration: int, result: CommitResult | None) -> int | None:
    """STEPPED_ASIDE (said and recorded as the loop's stop reason) when a keyed child's push was
    refused as non-fast-forward; None otherwise (an unkeyed loop says it and goes on, as ever)."""
    if result is None or not result.rejected or not keyed(step.cfg, os.environ):
        return None
    reason = (f"{phase}: the remote refused the push of the task's branch (another loop of this task pushed it "
              f"meanwhile): this loop steps aside so that no two loops work its task; its work stays committed "
              f"here ({result.sha}), and the newer loop owns the branch")
    step.say(reason, "error")
    step.event("stepped_aside", iteration=iteration, phase=phase, sha=result.sha, error=result.error[:1000])
    step.event("stop_reason", code=exitcodes.STEPPED_ASIDE, reason=reason[:1000])
    return exitcodes.STEPPED_ASIDE

"""A green merge: the merged tree's checks, run before the project branch may move.

The merge queue replays a task's branch onto the project branch's tip (fleet/merging.py); on
that tree, in the task's worktree, Genesis runs the task's own check (its `check:` line in the
project branch's TASKS.md, the fleet's list, which no child's agent edits) and the project's
(GENESIS_CHECK_CMD), as a loop runs them after a claim (loop/taskcheck.py): by bash, in the
agent's box, bounded in time (GENESIS_CHECK_TIMEOUT, killed with everything they started) and
in output (its tail kept, made safe and redacted). A box that cannot run fails the check: no
check runs unboxed. The runs are the merge's evidence (CheckRun), green only when all passed.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Sequence

import genesis
from genesis.config import CONFIG_FILE, default_layout
from genesis.loop.claims import CheckRun
from genesis.loop.taskcheck import OUTPUT_KEEP, TAIL_BYTES, TAIL_LINES
from genesis.procs.bounded import run_bounded
from genesis.repo.tasks import parse, same_text
from genesis.sandbox.box import Unavailable, choose
from genesis.sandbox.detect import probe
from genesis.sandbox.places import places_for
from genesis.watch.evidence import tail_of

__all__ = ["check_of", "run_checks", "green", "failure", "evidence"]


def check_of(tasks_text: str | None, task: str) -> str:
    """The task's `check:` command in this TASKS.md text ("": none, or no such task)."""
    if not tasks_text or not task:
        return ""
    return next((t.check for t in parse(tasks_text).items if same_text(t.text, task) and t.check), "")


def run_checks(worktree: Path, cfg, task_check: str) -> tuple[CheckRun, ...]:
    """The task's check and the project's, each run by bash in the worktree, in the box."""
    wanted = [(kind, command) for kind, command in (("task", task_check), ("project", cfg.check_cmd)) if command]
    if not wanted:
        return ()
    env = {k: v for k, v in os.environ.items() if k != "GENESIS_FLEET_DIR"}  # the fleet's state is no check's
    env["PWD"] = str(worktree)
    return tuple(_run(worktree, cfg, kind, command, env) for kind, command in wanted)


def _run(worktree: Path, cfg, kind: str, command: str, env: dict[str, str]) -> CheckRun:
    argv = ("bash", "-c", command)
    lay = default_layout(worktree)
    try:  # the box keeps the state folder from the check: it must be there (a worktree no loop ran in lacks it)
        lay.heartbeat_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return CheckRun(kind, command, None, 0.0, error=f"its state folder cannot be made: {exc}")
    places = places_for(worktree, lay.state_dir, lay.heartbeat_dir, lay.log_dir, worktree / CONFIG_FILE,
                        Path(genesis.__file__).resolve().parent, argv, env, allow=cfg.box_allow)
    try:
        box = choose(cfg.sandbox, probe(), places, cfg.network)
    except Unavailable as exc:
        return CheckRun(kind, command, None, 0.0, error=f"the agent's box cannot run here: {exc}")

    def in_child() -> None:
        signal.pthread_sigmask(signal.SIG_SETMASK, set())  # a stop signal the monitor blocks is not the check's
        box.in_child()

    ran = run_bounded(box.wrap(argv), worktree, env, cfg.check_timeout, OUTPUT_KEEP, preexec=in_child)
    tail = tail_of(ran.output.decode("utf-8", "replace"), TAIL_LINES, TAIL_BYTES, env)
    return CheckRun(kind, command, ran.exit_code, ran.seconds, tuple(tail), ran.timed_out, ran.error)


def green(runs: Sequence[CheckRun]) -> bool:
    return all(r.passed for r in runs)


def failure(runs: Sequence[CheckRun]) -> tuple[str, tuple[str, ...]]:
    """What failed, in words, and the first failed check's tail ("", () when none failed)."""
    failed = [r for r in runs if not r.passed]
    if not failed:
        return "", ()
    return "; ".join(f"the {r.kind}'s check {r.said()}" for r in failed), failed[0].tail


def evidence(runs: Sequence[CheckRun]) -> list[dict]:
    """The runs as the fleet ledger records them: each with its output's tail."""
    return [{**r.to_json(), "tail": list(r.tail)} for r in runs]

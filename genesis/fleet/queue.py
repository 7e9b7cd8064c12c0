"""A fleet's queue and where it comes home: the project branch, TASKS.md as committed there,
whether a task is done on a branch, and the start's trust check. Shared by the local monitor
and the Temporal engine's home activities, which must not import the monitor."""

from __future__ import annotations

from pathlib import Path

from genesis.config import Config
from genesis.hints import hint
from genesis.repo.gitcmd import GitFailed, run_git
from genesis.repo.tasks import DONE, parse
from genesis.trust import approve, judge

__all__ = ["project_branch", "tasks_at", "done_at", "check_trust", "GIT_TIMEOUT"]

GIT_TIMEOUT = 60.0


def project_branch(project: Path) -> str:
    done = run_git(project, ["symbolic-ref", "--quiet", "--short", "HEAD"], timeout=GIT_TIMEOUT)
    if done.returncode != 0 or not done.text.strip():
        raise GitFailed(f"{project} is on a detached HEAD: check out the branch the fleet's work comes home to")
    return done.text.strip()


def tasks_at(project: Path, ref: str) -> str | None:
    """TASKS.md as committed at ref (the branch's tip, never the user's work tree), or None."""
    done = run_git(project, ["show", f"{ref}:TASKS.md"], timeout=GIT_TIMEOUT)
    return done.text if done.returncode == 0 else None


def done_at(project: Path, branch: str, text: str) -> bool:
    """The task is `[x]` in TASKS.md at the branch's tip, by the child's own rule (loop/onetask.py):
    found by its text, runs of spaces as one; a line of that text still open keeps it not done."""
    found = tasks_at(project, branch)
    if found is None:
        return False
    same = [t.state for t in parse(found).items if " ".join(t.text.split()) == " ".join(text.split())]
    return DONE in same and all(state == DONE for state in same)


def check_trust(cfg: Config, state_dir: Path, trust: bool) -> str | None:
    """The single loop's trust check, once for the whole fleet (children start with --trust)."""
    verdict = judge(cfg.settings, state_dir)
    if verdict.unapproved and not trust:
        shown = "; ".join(f"{c.shown()} ({c.state} since the last approved start)" for c in verdict.unapproved)
        return (f"orchestrator/genesis.conf names commands you have not approved: {shown}. Approve them with "
                f"`{hint(cfg.project, 'config', 'trust')}` or start with --trust")
    approve(verdict.commands, state_dir)
    return None

"""What never goes into Genesis's commits, told: the files an auto-commit left out (a secret, a
huge file: repo/commitfilter.py), and the secret-looking files the agent committed itself,
which are its own doing (named and alerted, never rewritten).

Each is said on the console and recorded with its path and reason, never its content.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from genesis.config import Config
from genesis.repo.autocommit import CommitResult, Rules
from genesis.repo.gitcmd import GitFailed, run_git
from genesis.repo.phasework import Before
from genesis.repo.secrets import secret_name

if TYPE_CHECKING:
    from genesis.loop.step import Step

__all__ = ["rules_of", "note_left_out", "agent_committed", "MAX_LISTED"]

MAX_LISTED = 50        # files of one commit's left-out list kept in the ledger
SHOWN = 5              # ... and said on the console
GIT_BOUND = 10.0       # seconds for the look at the agent's own commits
MAX_COMMITS = 200


def rules_of(cfg: Config) -> Rules:
    """What the project's auto-commits leave out, by its settings."""
    return Rules(cfg.commit_max_file)


def _listed(items: list[tuple[str, str]]) -> str:
    shown = "; ".join(f"{path} ({why})" for path, why in items[:SHOWN])
    return shown + (f"; and {len(items) - SHOWN} more" if len(items) > SHOWN else "")


def note_left_out(step: "Step", result: CommitResult, where: str, iteration: int | None = None,
                  phase: str | None = None) -> None:
    """Say and record what the commit left out, if anything."""
    if not result.left_out:
        return
    items = [(item.path, item.reason) for item in result.left_out]
    step.say(f"{where}: {len(items)} file(s) left out of the commit, and of every later auto-commit (they stay in "
             f"the work tree, uncommitted): {_listed(items)}", "warn")
    step.event("commit_left_out", iteration=iteration, phase=phase, where=where, count=len(items),
               files=[{"path": path, "reason": why} for path, why in items[:MAX_LISTED]])


def agent_committed(step: "Step", iteration: int, phase: str, start: Before) -> bool:
    """Name the secret-looking files the agent added in its own commits during the phase (since
    HEAD at its start): said, recorded as `agent_committed_secret`, which alerts. True when
    there are any: the phase's work is then not pushed."""
    span = [f"{start.head}..HEAD"] if start.head else ["HEAD"]
    try:
        done = run_git(step.cfg.project, ["log", f"--max-count={MAX_COMMITS}", "--format=%x01%h", "--name-only",
                                          "--diff-filter=A", "--no-renames", "-z", *span, "--"],
                       timeout=GIT_BOUND, limit=1 << 20)
    except (GitFailed, OSError):
        return False
    if done.returncode != 0:
        return False
    found: list[dict] = []
    sha = ""
    for part in done.stdout.split(b"\0"):
        if part.startswith(b"\x01"):  # a commit's record; its file names follow
            sha = part[1:].decode("ascii", "replace")
            continue
        name = part.decode("utf-8", "replace").lstrip("\n")
        why = secret_name(name) if name else None
        if why:
            found.append({"path": name, "commit": sha, "reason": f"looks like a secret by its name: {why}"})
    if not found:
        return False
    listing = "; ".join(f"{f['path']} in {f['commit']}" for f in found[:SHOWN])
    step.say(f"{phase}: the agent itself committed {len(found)} file(s) that look like secrets ({listing}). Genesis "
             f"does not rewrite the agent's commits: check them, rotate what leaked, and remove the files from "
             f"history; this phase's work is not pushed", "error")
    step.event("agent_committed_secret", iteration=iteration, phase=phase, count=len(found),
               files=found[:MAX_LISTED])
    return True

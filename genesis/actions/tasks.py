"""What an action does to one of a fleet's tasks, on the repository and the fleet's ledger.

Approve brings a branch kept for review home (replayed, tested, ticked: the merge queue's own
step, with GENESIS_FLEET_MERGE=queue for that one branch). Send back reopens the task on its
branch with the note below it, for its next child to read, and relaunches it. Retry of a failed
task reopens it on the project branch (`- [!]` back to `- [ ]`, as a user would): the monitor
starts it afresh. Skip marks it `- [!]` (skipped) on the project branch: nothing starts it again
until it is reopened.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from genesis.actions.errors import Failed, NotApplicable
from genesis.config import Config
from genesis.fleet import merging
from genesis.fleet.ledger import FleetLedger, TaskRow
from genesis.fleet.queue import project_branch
from genesis.fleet.taskref import TaskRef
from genesis.fleet.worktrees import rev
from genesis.repo.autocommit import user_changes
from genesis.repo.gitcmd import GitFailed
from genesis.repo.tasks import FAILED, OPEN, TASKS_FILE, marked, parse

__all__ = ["approve", "send_back", "reopen", "skip", "NOTE"]

NOTE = "note:"     # the line under a task sent back: what its next child reads


def approve(cfg: Config, ledger: FleetLedger, row: TaskRow) -> str:
    target = project_branch(cfg.project)
    # One branch merged into the project branch and tested, whatever GENESIS_FLEET_MERGE says.
    result = merging.merge_home(cfg.project, Path(row.worktree), row.branch, target, TaskRef(row.id, row.text, 0),
                                replace(cfg, fleet_merge="queue"), resolve=None)
    if result.outcome != merging.MERGED:
        raise Failed(f"{row.text!r} did not come home: {result.detail}")
    ledger.set_state(row.id, "merged", f"approved: {result.detail}", merged_sha=result.sha)
    ledger.record("merged", row.id, sha=result.sha, commits=list(result.commits), outcome="merged", approved=True)
    return f"approved {row.text!r}: {result.detail} ({result.sha[:10]})"


def send_back(cfg: Config, ledger: FleetLedger, row: TaskRow, note: str) -> str:
    """The task open again on its branch, the note under it, in a commit; relaunched at once."""
    worktree = Path(row.worktree)
    if not row.worktree or not worktree.is_dir():
        raise NotApplicable(f"{row.text!r} has no worktree to send it back to")
    git = merging._git(worktree, cfg.project, cfg.git_hooks)
    if user_changes(worktree).changed:
        raise Failed(f"the worktree {worktree} has uncommitted changes: commit or discard them first")
    path = worktree / TASKS_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise Failed(f"cannot read {path}: {exc}") from None
    edited = _reopened(text, row.text, note)
    if edited is None:
        raise Failed(f"{row.text!r} is not listed in {path}")
    path.write_text(edited, encoding="utf-8")
    git.out("add", "--", TASKS_FILE)
    git.out("commit", "-q", "--no-verify", "-m", f"Genesis: task sent back: {row.text}\n\n{note}", identity=True)
    ledger.set_state(row.id, "restarting", f"sent back: {note}", not_before=0.0, pid=None)
    ledger.record("sent_back", row.id, note=note, sha=rev(git, "HEAD"))
    return f"sent {row.text!r} back with the note; it starts again on its branch"


def reopen(cfg: Config, ledger: FleetLedger, row: TaskRow, now: float) -> str:
    """`- [!] text (failed: ...)` back to `- [ ] text` on the project branch: the monitor (or the next
    start) starts it afresh."""
    project = cfg.project
    target = project_branch(project)
    git = merging._git(project, project, cfg.git_hooks)
    for _ in range(merging.ROUNDS):
        tip = rev(git, f"refs/heads/{target}")
        data = merging._blob(git, f"{tip}:{TASKS_FILE}") if tip else None
        edited = None if data is None else _unfailed(data.decode("utf-8", "replace"), row.text)
        if edited is None:
            break  # not marked failed there: the ledger alone reopens it
        sha = merging._with_tasks(git, tip, edited.encode("utf-8"), f"Genesis: task reopened: {row.text}")
        moved = merging._advance(project, target, tip, sha, cfg.git_hooks)
        if moved is None:
            break
        if moved:
            raise Failed(f"{row.text!r} could not be reopened on {target}: {moved}")
    why = f"reopened by retry after it was {row.state}: a fresh start"
    ledger.set_state(row.id, "queued", why, strategy=0, attempts=0, restarts=0, escalations=0, not_before=0.0,
                     pid=None, merged_sha="")
    ledger.record("reopened", row.id, was=row.state, reason=why)
    return f"reopened {row.text!r} on {target}: it starts afresh"


def skip(cfg: Config, ledger: FleetLedger, row: TaskRow, why: str) -> str:
    """Marked `- [!] text (failed: skipped ...)` on the project branch: nothing starts it again."""
    target = project_branch(cfg.project)
    try:
        sha = merging.mark_failed(cfg.project, target, TaskRef(row.id, row.text, 0), why, hooks=cfg.git_hooks)
    except (GitFailed, OSError):
        sha = ""
    ledger.set_state(row.id, "failed", why, pid=None, not_before=0.0)
    ledger.record("skipped", row.id, reason=why, sha=sha)
    if not sha:
        ledger.record("mark_pending", row.id, reason=why)  # the monitor marks it once the checkout lets it
    return f"skipped {row.text!r}: marked [!] on {target}" + ("" if sha else " as soon as the checkout lets it")


def _reopened(text: str, task: str, note: str) -> str | None:
    lines = text.splitlines(keepends=True)
    same = " ".join(task.split())
    for item in parse(text).items:
        if " ".join(item.text.split()) == same:
            line = lines[item.line - 1]
            new = marked(line, OPEN)
            if new is None:
                return None
            indent = line[:len(line) - len(line.lstrip())] + "  "
            lines[item.line - 1] = new if new.endswith("\n") else new + "\n"
            lines.insert(item.line, f"{indent}{NOTE} {' '.join(note.split())}\n")  # one line: it stays the task's
            return "".join(lines)
    return None


def _unfailed(text: str, task: str) -> str | None:
    lines = text.splitlines(keepends=True)
    same = " ".join(task.split())
    for item in parse(text).items:
        said = " ".join(item.text.split())
        if item.state == FAILED and (said == same or said.startswith(same + " (failed:")):
            line = lines[item.line - 1]
            body = line.rstrip("\r\n")
            cut = body.find(" (failed:")
            opened = marked((body[:cut] if cut >= 0 else body) + line[len(body):], OPEN)
            if opened is None:
                return None
            lines[item.line - 1] = opened
            return "".join(lines)
    return None

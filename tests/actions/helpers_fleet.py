"""A project whose fleet kept task branches for review, in real worktrees (shared by the actions' tests)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from helpers.dashboard import fleet_running, task
from helpers.git import commit_file, git, new_repo

from genesis.fleet.taskref import task_id

__all__ = ["reviewed_fleet"]


def reviewed_fleet(tmp_path: Path, states: dict[str, str], monitor: bool = False) -> tuple[Path, dict[str, str], int]:
    """TASKS.md lists each text open; each task's branch holds one file of work and its tick, in its
    own worktree; the fleet ledger gives each its state. (project, {text: id}, the monitor lock's fd
    or -1)."""
    project = new_repo(tmp_path / "project")
    commit_file(project, "TASKS.md", "# Tasks\n\n" + "".join(f"- [ ] {t}\n" for t in states), "tasks")
    ids, rows, now = {}, [], time.time()
    for n, (text, state) in enumerate(states.items()):
        tid = task_id(text)
        where = tmp_path / "worktrees" / tid
        git(project, "worktree", "add", "-q", "-b", f"genesis/task/{tid}", str(where))
        commit_file(where, f"work{n}.txt", f"{text}\n", f"work on {text}")
        (where / "TASKS.md").write_text((where / "TASKS.md").read_text().replace(f"- [ ] {text}", f"- [x] {text}"))
        git(where, "commit", "-qam", "tick")
        ids[text] = tid
        rows.append(task(tid, state, now, text=text, worktree=str(where)))
    fd = fleet_running(project, now, rows)
    if not monitor:
        os.close(fd)
        fd = -1
    return project, ids, fd

"""The user's data is safe from git, through the real loop script and real git: an agent that
resets, deletes a branch, expires the reflog, prunes and cleans every untracked and ignored
file, that switches branch or detaches HEAD, or that force-pushes with AUTO_PUSH on.
The loop names each change and stops (exit 27) unless allowed, its report keeps Genesis's
own commits and calls orphaned ones orphaned, and `genesis restore` brings the work back."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from helpers.agent import script
from helpers.git import git
from helpers.gitstates import branch_of
from helpers.loop import loop_env, run_loop
from helpers.state import events_of
from helpers.waits import wait_for

from genesis.cli import cli

FAST = dict(GENESIS_PHASES="Builder", HEARTBEAT_STALE="120s", HEARTBEAT_COUNT_OUTPUT="true")
HISTORY_REWRITTEN = 27


def genesis(project: Path, *args: str) -> Result:
    """`genesis --project PROJECT ARGS...`: a command the user runs after the night, in this process."""
    return CliRunner().invoke(cli, ["--project", str(project), *args], catch_exceptions=False)


def commit(project: Path, name: str, text: str) -> str:
    (project / name).write_text(text)
    git(project, "add", name)
    git(project, "commit", "-qm", f"the user's {name}")
    return git(project, "rev-parse", "--short", "HEAD").strip()


def subjects(project: Path, rev: str) -> list[str]:
    return git(project, "log", "--format=%s", rev).splitlines()


def exists(project: Path, sha: str) -> bool:
    return subprocess.run(["git", "cat-file", "-e", f"{sha}^{{commit}}"], cwd=project).returncode == 0


@pytest.fixture
def history(project: Path) -> dict:
    """The user's branch with three commits of theirs after init, and a branch `feature` with
    a commit found on no other branch."""
    main = branch_of(project)
    git(project, "switch", "-qc", "feature")
    feature = commit(project, "feature.txt", "the user's feature\n")
    git(project, "switch", "-q", main)
    mine = [commit(project, f"u{i}.txt", f"the user's work {i}\n") for i in (1, 2, 3)]
    return {"main": main, "feature": feature, "mine": mine}


# Iteration 2 throws away three commits, the feature branch and every trace git keeps of them,
# and every untracked and ignored file.
WIPER = r"""#!/bin/sh
set -e
if [ "$GENESIS_ITERATION" = 2 ]; then
  git reset -q --hard HEAD~3
  git branch -D feature >/dev/null
  git reflog expire --expire=now --all
  git gc -q --prune=now
  git clean -fdxq
fi
echo "work of iteration $GENESIS_ITERATION" >>work.txt
"""
UNTRACKED = ["notes.txt", "tools/run.sh", "notes-link", "settings.local", "build/out.bin", "huge.local"]


def users_untracked_files(project: Path) -> None:
    """Notes, an executable, a link, an ignored setting, rebuildable output and a file over the
    copy's cap (1 MB here), none of them committed."""
    (project / ".git" / "info" / "exclude").write_text("*.local\nbuild/\n")
    (project / "notes.txt").write_text("the user's notes\n")
    (project / "tools").mkdir()
    (project / "tools" / "run.sh").write_text("#!/bin/sh\necho run\n")
    (project / "tools" / "run.sh").chmod(0o750)
    os.symlink("notes.txt", project / "notes-link")
    (project / "settings.local").write_text("API_URL=http://localhost\n")
    (project / "build").mkdir()
    (project / "build" / "out.bin").write_bytes(b"\0" * 1024)    # rebuildable output: not copied
    (project / "huge.local").write_bytes(b"x" * (2 << 20))         # over the cap of 1 MB: listed, not copied


@pytest.mark.fault(82)
def test_reset_branch_deletion_reflog_expire_gc_and_clean_fdx_stop_the_loop_naming_each_and_restore_brings_all_back(
        project, history, tmp_path):
    users_untracked_files(project)
    done = run_loop(project, "--agent-cmd", str(script(tmp_path / "wiper.sh", WIPER)), "--max-iterations", "3",
                    env=loop_env(GENESIS_UNTRACKED_COPY_MAX_MB="1", **FAST))
    assert done.returncode == HISTORY_REWRITTEN, done.stderr
    main, ours = history["main"], [e for e in events_of(project, kind="phase_work")]
    assert f"branch {main} was rewritten" in done.stderr and "3 commit(s) no longer on it" in done.stderr
    assert "branch feature was deleted: 1 commit(s) no longer on any branch" in done.stderr
    assert "GENESIS_ALLOW_HISTORY_REWRITE=false" in done.stderr
    # Nothing of iteration 3 ran; the rewrite is in the ledger, with the safety ref of each change.
    assert [e["iteration"] for e in events_of(project, kind="phase_start")] == [1, 2]
    (rewrite,) = events_of(project, kind="history_rewritten")
    assert {(c["kind"], c["branch"]) for c in rewrite["changes"]} == {("rewritten", main), ("deleted", "feature")}
    assert all(c["ref"].startswith("refs/genesis/") for c in rewrite["changes"]) and rewrite["allowed"] is False
    # Genesis's own commits of the night are both in its report, the one the reset took too.
    own = [c["sha"] for e in ours for c in e["commits"]]
    assert len(own) == 2 and all(exists(project, sha) for sha in own)
    report = genesis(project, "report")
    assert "2 commits" in report.stdout and all(sha in report.stdout for sha in own), report.stdout
    assert "branch feature was deleted" in report.stdout
    # The alert's deliverer is a process of its own, which records its ticket when it has told it.
    wait_for(lambda: any(a["cause"].startswith("Builder changed git history") for a in _alerts(project)), 30,
             "the alert of the rewrite")
    assert not any(os.path.lexists(project / rel) for rel in UNTRACKED)
    # What the run started with comes back; the tips it replaces are kept as well.
    listing = genesis(project, "restore")
    assert listing.exit_code == 0 and "feature" in listing.stdout, listing.stderr
    assert "huge.local" in listing.stdout and "GENESIS_UNTRACKED_COPY_MAX_MB" in listing.stdout, listing.stdout
    planned = genesis(project, "restore", "--branch", "feature")
    assert planned.exit_code == 0 and "branch -f feature" in planned.stdout
    assert "feature" not in git(project, "branch", "--list", "feature")  # printed, not done
    for branch in ("feature", main):
        put_back = genesis(project, "restore", "--branch", branch, "--yes")
        assert put_back.exit_code == 0, put_back.stderr
    assert git(project, "rev-parse", "--short", "feature").strip() == history["feature"]
    assert subjects(project, main)[:3] == ["the user's u3.txt", "the user's u2.txt", "the user's u1.txt"]
    assert (project / "u3.txt").read_text() == "the user's work 3\n"
    # The untracked files too, from the copy the run's start took; never over a file written since.
    (project / "notes.txt").write_text("written again since\n")
    put_back = genesis(project, "restore", "--untracked")
    assert put_back.exit_code == 0, put_back.stderr
    assert (project / "notes.txt").read_text() == "written again since\n"
    assert (project / "settings.local").read_text() == "API_URL=http://localhost\n"
    assert stat.S_IMODE(os.stat(project / "tools" / "run.sh").st_mode) == 0o750
    assert os.readlink(project / "notes-link") == "notes.txt"
    assert not (project / "build").exists() and not (project / "huge.local").exists()
    assert "1 already there (never overwritten)" in put_back.stdout


def _alerts(project: Path) -> list[dict]:
    return [e["ticket"] for e in events_of(project, kind="alert") if isinstance(e.get("ticket"), dict)]


SWITCHER = r"""#!/bin/sh
set -e
git switch -q feature
echo "the agent's work" >>work.txt
"""
DETACHER = r"""#!/bin/sh
set -e
git switch -q --detach
echo "the agent's work" >>work.txt
"""


@pytest.mark.fault(82)
def test_a_branch_switch_mid_night_is_reported_as_orphaned_not_committed_and_stops_the_loop(
        project, history, tmp_path):
    done = run_loop(project, "--agent-cmd", str(script(tmp_path / "switcher.sh", SWITCHER)), "--max-iterations", "2",
                    env=loop_env(**FAST))
    assert done.returncode == HISTORY_REWRITTEN, done.stderr
    assert f"HEAD was switched from branch {history['main']} to feature" in done.stderr
    assert "orphaned" in done.stderr
    (work,) = events_of(project, kind="phase_work")
    assert work.get("orphaned") is True and len(work["commits"]) == 1  # the user's feature commit is not the night's
    sha = work["commits"][0]["sha"]
    assert sha not in git(project, "log", "--format=%h", history["main"])
    report = genesis(project, "report")
    assert "1 commit (1 orphaned)" in report.stdout and "ORPHANED" in report.stdout, report.stdout


@pytest.mark.fault(82)
def test_a_detached_head_allowed_goes_on_orphaned_work_is_kept_and_not_counted_as_progress(project, tmp_path):
    done = run_loop(project, "--agent-cmd", str(script(tmp_path / "detacher.sh", DETACHER)), "--max-iterations", "1",
                    env=loop_env(GENESIS_ALLOW_HISTORY_REWRITE="true", **FAST))
    assert done.returncode == 0, done.stderr
    assert "HEAD was detached from branch" in done.stderr and "not counted as progress" in done.stderr
    (end,) = events_of(project, kind="iteration_end")
    assert end["progress"] is False
    (work,) = events_of(project, kind="phase_work")
    sha = work["commits"][0]["sha"]
    # The user goes back to their branch and git prunes: the orphaned commit is still there.
    git(project, "switch", "-q", branch_of_start(project))
    git(project, "reflog", "expire", "--expire=now", "--all")
    git(project, "gc", "-q", "--prune=now")
    assert exists(project, sha)
    assert "ORPHANED" in genesis(project, "report").stdout


def branch_of_start(project: Path) -> str:
    """The branch the run started on, as its safety refs keep it."""
    refs = git(project, "for-each-ref", "--format=%(refname)", "refs/genesis/runs/").split()
    return next(r.rsplit("/heads/", 1)[1] for r in refs if "/heads/" in r)


FORCE_PUSHER = r"""#!/bin/sh
set -e
if [ "$GENESIS_ITERATION" = 1 ]; then
  git config remote.origin.mirror true   # a plain `git push` would now send every ref
else
  git config remote.origin.mirror false
  git reset -q --hard HEAD~2
  git push -q -f origin HEAD:refs/heads/"$BRANCH"
fi
echo "work of iteration $GENESIS_ITERATION" >>work.txt
"""


@pytest.mark.fault(82)
def test_a_force_push_with_auto_push_never_sends_the_safety_refs_and_the_work_is_restorable_locally(
        project, history, tmp_path):
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(project, "remote", "add", "origin", str(remote))
    git(project, "push", "-q", "-u", "origin", history["main"])
    main = history["main"]
    # The remote is a folder here, which the box would hide from the agent; a real one is on the
    # network, which the box leaves open: this is the night without the box.
    env = loop_env(AUTO_PUSH="true", GENESIS_SANDBOX="off", BRANCH=main, **FAST)
    done = run_loop(project, "--agent-cmd", str(script(tmp_path / "pusher.sh", FORCE_PUSHER)),
                    "--max-iterations", "3", env=env)
    assert done.returncode == HISTORY_REWRITTEN, done.stderr
    assert "Builder: committed" in done.stderr and "and pushed" in done.stderr   # iteration 1, by Genesis
    assert git(project, "for-each-ref", "refs/genesis/runs/")  # kept locally...
    on_remote = git(remote, "for-each-ref", "--format=%(refname)").split()
    assert not [r for r in on_remote if r.startswith("refs/genesis/")], on_remote   # ...never pushed
    # The agent's force-push took the user's commits from the remote; Genesis did not push after the
    # rewrite (its commit of iteration 2 is local only).
    (_, second) = events_of(project, kind="phase_work")
    assert second["commits"], done.stderr
    assert git(remote, "rev-parse", "--short", main).strip() != second["commits"][0]["sha"]
    assert "the user's u3.txt" not in subjects(remote, main)
    put_back = genesis(project, "restore", "--branch", main, "--yes")
    assert put_back.exit_code == 0, put_back.stderr
    assert subjects(project, main)[:3] == ["the user's u3.txt", "the user's u2.txt", "the user's u1.txt"]

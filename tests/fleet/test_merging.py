"""The merge queue's step with real git: a verified task's branch comes home to the project
branch, its TASKS.md edits dropped and the task ticked by Genesis, the user's files never touched."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import psutil
import pytest
from helpers.git import commit_file, git
from helpers.waits import wait_for

from genesis.config import ConfigError, resolve
from genesis.fleet.merging import mark_failed, merge_home
from genesis.fleet.taskref import TaskRef, open_refs, task_id
from genesis.fleet.worktrees import create
from genesis.repo.tasks import DONE, FAILED, OPEN, parse

TASKS = "# Tasks\n\n- [ ] Add alpha\n- [ ] Add beta\n- [ ] Add gamma\n"


@pytest.fixture
def fleet(project):
    """The project with its task list committed; its branch's name."""
    commit_file(project, "TASKS.md", TASKS)
    commit_file(project, "shared.txt", "one\ntwo\nthree\n")
    return git(project, "symbolic-ref", "--short", "HEAD").strip()


def _ref(text: str) -> TaskRef:
    return TaskRef(task_id(text), text, TASKS.splitlines().index(f"- [ ] {text}") + 1)


def _child(project: Path, target: str, text: str, files: dict[str, str],
           ticks: tuple[str, ...] = ()) -> tuple[TaskRef, Path]:
    """A child's worktree after its night: its work committed, and its own task (and `ticks`)
    marked `[x]` in its TASKS.md, as the agent does following the shipped prompts."""
    ref = _ref(text)
    wt = create(project, project.parent / "trees", ref.id, ref.branch, target)
    for name, content in files.items():
        (wt / name).write_text(content)
    tasks = (wt / "TASKS.md").read_text()
    for done in (text, *ticks):
        tasks = tasks.replace(f"- [ ] {done}", f"- [x] {done}")
    (wt / "TASKS.md").write_text(tasks)
    git(wt, "add", "-A")
    git(wt, "commit", "-qm", f"{text}")
    return ref, wt


def _cfg(project: Path, **env: str):
    return resolve(project, env=env)


def _states(text: str) -> dict[str, str]:
    return {t.text: t.state for t in parse(text).items}


def _tip(project: Path, branch: str) -> str:
    return git(project, "rev-parse", f"refs/heads/{branch}").strip()


def test_verified_branches_come_home_each_ticking_only_its_own_task(project, fleet):
    # alpha's agent ticked beta too; both edit neighbouring lines of TASKS.md: neither may matter.
    alpha, alpha_wt = _child(project, fleet, "Add alpha", {"alpha.txt": "a\n"}, ticks=("Add beta",))
    beta, beta_wt = _child(project, fleet, "Add beta", {"beta.txt": "b\n"})
    cfg = _cfg(project)

    first = merge_home(project, alpha_wt, alpha.branch, fleet, alpha, cfg, resolve=None)
    assert first.outcome == "merged", first.detail
    assert _tip(project, fleet) == first.sha == _tip(project, alpha.branch)
    assert (project / "alpha.txt").read_text() == "a\n"  # the user's checkout fast-forwarded
    assert _states((project / "TASKS.md").read_text()) == {"Add alpha": DONE, "Add beta": OPEN, "Add gamma": OPEN}

    second = merge_home(project, beta_wt, beta.branch, fleet, beta, cfg, resolve=None)
    assert second.outcome == "merged", second.detail
    assert _states((project / "TASKS.md").read_text()) == {"Add alpha": DONE, "Add beta": DONE, "Add gamma": OPEN}
    assert (project / "beta.txt").is_file() and git(project, "status", "--porcelain") == ""
    log = git(project, "log", "--format=%an|%s", f"{fleet}").splitlines()
    assert log[:4] == ["Genesis|Genesis: task done: Add beta", "T|Add beta", "Genesis|Genesis: task done: Add alpha",
                       "T|Add alpha"]
    assert len(second.commits) == 1
    assert git(project, "show", "--format=", "--name-only", second.commits[0]) == "beta.txt\n"


def test_a_project_branch_checked_out_nowhere_moves_by_compare_and_swap(project, fleet):
    alpha, wt = _child(project, fleet, "Add alpha", {"alpha.txt": "a\n"})
    git(project, "checkout", "-qb", "elsewhere")
    commit_file(project, "mine.txt", "the user's\n")
    result = merge_home(project, wt, alpha.branch, fleet, alpha, _cfg(project), resolve=None)
    assert result.outcome == "merged" and _tip(project, fleet) == result.sha
    assert git(project, "symbolic-ref", "--short", "HEAD").strip() == "elsewhere"
    assert not (project / "alpha.txt").exists() and git(project, "status", "--porcelain") == ""


@pytest.mark.fault(92)
def test_a_dirty_checkout_of_the_project_branch_holds_the_merge_and_keeps_every_byte(project, fleet):
    alpha, wt = _child(project, fleet, "Add alpha", {"alpha.txt": "a\n", "shared.txt": "ONE\ntwo\nthree\n"})
    before = _tip(project, fleet)
    (project / "shared.txt").write_bytes(b"one\ntwo\nthree\nthe user's edit, uncommitted\r\n")
    (project / "draft.txt").write_bytes(b"\x00the user's untracked draft\n")
    result = merge_home(project, wt, alpha.branch, fleet, alpha, _cfg(project), resolve=None)

    assert result.outcome == "held", result.detail
    assert "uncommitted changes" in result.detail and "shared.txt" in result.detail
    assert _tip(project, fleet) == before and git(project, "rev-parse", "HEAD").strip() == before
    assert (project / "shared.txt").read_bytes() == b"one\ntwo\nthree\nthe user's edit, uncommitted\r\n"
    assert (project / "draft.txt").read_bytes() == b"\x00the user's untracked draft\n"
    assert not (project / "alpha.txt").exists() and _states((project / "TASKS.md").read_text())["Add alpha"] == OPEN
    assert mark_failed(project, fleet, _ref("Add gamma"), "no luck") == "" and _tip(project, fleet) == before

    git(project, "checkout", "-q", "--", "shared.txt")  # the user is done with it: the next try comes home
    again = merge_home(project, wt, alpha.branch, fleet, alpha, _cfg(project), resolve=None)
    assert again.outcome == "merged", again.detail
    assert (project / "alpha.txt").is_file() and (project / "shared.txt").read_text() == "ONE\ntwo\nthree\n"
    assert (project / "draft.txt").read_bytes() == b"\x00the user's untracked draft\n"


@pytest.mark.fault(92)
def test_the_users_ignored_and_untracked_files_are_never_overwritten_by_a_merge(project, fleet):
    commit_file(project, ".gitignore", ".env\nlogs\ncache/\n")
    alpha, wt = _child(project, fleet, "Add alpha", {"alpha.txt": "a\n"})
    (wt / ".env").write_text("TOKEN=the agent's\n")          # the agent forced in files the user ignores
    (wt / "logs").mkdir()
    (wt / "logs" / "keep.txt").write_text("the agent's\n")
    (wt / "notes.txt").write_text("the agent's notes\n")
    git(wt, "add", "-f", ".env", "logs/keep.txt", "notes.txt")
    git(wt, "commit", "-qm", "config")
    before = _tip(project, fleet)
    (project / ".env").write_bytes(b"TOKEN=the user's own secret\n")   # ignored there: git would overwrite it
    (project / "logs").write_bytes(b"the user's log, a file\n")       # ignored, where the branch brings a folder
    result = merge_home(project, wt, alpha.branch, fleet, alpha, _cfg(project), resolve=None)

    assert result.outcome == "held", result.detail
    assert ".env" in result.detail and "logs" in result.detail, result.detail
    assert "alpha.txt" not in result.detail and ".gitignore" not in result.detail
    assert _tip(project, fleet) == before and git(project, "rev-parse", "HEAD").strip() == before
    assert (project / ".env").read_bytes() == b"TOKEN=the user's own secret\n"
    assert (project / "logs").read_bytes() == b"the user's log, a file\n"
    assert not (project / "alpha.txt").exists()

    # An ignored folder the user keeps files in where the branch brings a file, and an untracked
    # file: held too, naming them.
    for name in (".env", "logs"):
        os.unlink(project / name)
    (project / ".env").mkdir()
    (project / ".env" / "local").write_text("the user's\n")
    (project / "notes.txt").write_bytes(b"the user's untracked notes\n")
    again = merge_home(project, wt, alpha.branch, fleet, alpha, _cfg(project), resolve=None)
    assert again.outcome == "held" and ".env" in again.detail and "notes.txt" in again.detail, again.detail
    assert (project / ".env" / "local").read_text() == "the user's\n" and _tip(project, fleet) == before
    assert (project / "notes.txt").read_bytes() == b"the user's untracked notes\n"

    (project / ".env" / "local").unlink()  # moved away: an empty folder holds nothing of the user's
    (project / "notes.txt").unlink()
    (project / "cache").mkdir()            # an ignored folder the branch brings nothing into is no obstacle
    (project / "cache" / "big.bin").write_bytes(b"\x00" * 10)
    done = merge_home(project, wt, alpha.branch, fleet, alpha, _cfg(project), resolve=None)
    assert done.outcome == "merged", done.detail
    assert (project / ".env").read_text() == "TOKEN=the agent's\n" and (project / "alpha.txt").is_file()
    assert (project / "cache" / "big.bin").read_bytes() == b"\x00" * 10


@pytest.mark.fault(93)
def test_two_tasks_changing_the_same_lines_the_second_goes_to_the_merger_once(project, fleet):
    alpha, alpha_wt = _child(project, fleet, "Add alpha", {"shared.txt": "one\nALPHA\nthree\n"})
    beta, beta_wt = _child(project, fleet, "Add beta", {"shared.txt": "one\nBETA\nthree\n"})
    cfg = _cfg(project)
    assert merge_home(project, alpha_wt, alpha.branch, fleet, alpha, cfg, resolve=None).outcome == "merged"
    home, beta_old = _tip(project, fleet), _tip(project, beta.branch)
    asked: list[list[str]] = []

    def gives_up(worktree: Path, files: list[str]) -> bool:
        asked.append(files)
        assert "<<<<<<<" in (worktree / "shared.txt").read_text()
        return False

    def adds_the_markers(worktree: Path, files: list[str]) -> bool:
        asked.append(files)
        git(worktree, "add", *files)  # "resolved" in the index, the markers still in the text
        return True

    for resolver in (gives_up, adds_the_markers):
        result = merge_home(project, beta_wt, beta.branch, fleet, beta, cfg, resolve=resolver)
        assert result.outcome == "conflict" and "shared.txt" in result.detail
        assert _tip(project, beta.branch) == beta_old and _tip(project, fleet) == home  # nothing moved
        assert git(beta_wt, "symbolic-ref", "--short", "HEAD").strip() == beta.branch
        assert git(beta_wt, "status", "--porcelain") == ""
        assert (beta_wt / "shared.txt").read_text() == "one\nBETA\nthree\n"
    assert asked == [["shared.txt"], ["shared.txt"]]  # once per merge, never twice

    def resolves(worktree: Path, files: list[str]) -> bool:
        (worktree / "shared.txt").write_text("one\nALPHA\nBETA\nthree\n")
        git(worktree, "add", "shared.txt")
        return True

    result = merge_home(project, beta_wt, beta.branch, fleet, beta, cfg, resolve=resolves)
    assert result.outcome == "merged", result.detail
    assert (project / "shared.txt").read_text() == "one\nALPHA\nBETA\nthree\n"
    assert _states((project / "TASKS.md").read_text()) == {"Add alpha": DONE, "Add beta": DONE, "Add gamma": OPEN}
    assert git(project, "log", "-1", "--skip=1", "--format=%s", fleet).strip() == "Add beta"


def test_the_test_command_runs_on_the_replayed_tree_and_a_failure_keeps_the_branch_out(project, fleet):
    alpha, wt = _child(project, fleet, "Add alpha", {"alpha.txt": "a\n"})
    commit_file(project, "gate.txt", "on the project branch only\n")
    before, branch = _tip(project, fleet), _tip(project, alpha.branch)
    failing = _cfg(project, GENESIS_MERGE_TEST_CMD="test -f gate.txt && test -f alpha.txt && echo broke && exit 3")
    result = merge_home(project, wt, alpha.branch, fleet, alpha, failing, resolve=None)
    assert result.outcome == "tests_failed" and "exited 3" in result.detail and "broke" in result.detail
    assert _tip(project, fleet) == before and _tip(project, alpha.branch) == branch
    assert git(wt, "status", "--porcelain") == "" and not (wt / "gate.txt").exists()

    passing = _cfg(project, GENESIS_MERGE_TEST_CMD="test -f gate.txt && test -f alpha.txt")
    assert merge_home(project, wt, alpha.branch, fleet, alpha, passing, resolve=None).outcome == "merged"


def test_a_test_command_over_its_time_is_killed_with_what_it_started(project, fleet, tmp_path):
    alpha, wt = _child(project, fleet, "Add alpha", {"alpha.txt": "a\n"})
    pidfile = tmp_path / "sleeper.pid"
    cfg = _cfg(project, GENESIS_MERGE_TEST_CMD=f"sleep 300 & echo $! > {pidfile}; wait",
               GENESIS_MERGE_TEST_TIMEOUT="1s")
    result = merge_home(project, wt, alpha.branch, fleet, alpha, cfg, resolve=None)
    assert result.outcome == "tests_failed" and "ran over 1s and was killed" in result.detail
    pid = int(pidfile.read_text())

    def gone() -> bool:
        try:
            return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    wait_for(gone, 10, "the test command's background sleep to be killed")


def test_the_repositorys_hooks_do_not_run_unless_asked(project, fleet, tmp_path):
    ran = tmp_path / "hooks-ran"
    for hook in ("pre-commit", "commit-msg", "post-commit", "post-checkout", "post-merge", "reference-transaction"):
        path = project / ".git" / "hooks" / hook
        path.write_text(f"#!/bin/sh\necho {hook} >> {ran}\n")
        path.chmod(0o755)
    alpha, wt = _child(project, fleet, "Add alpha", {"alpha.txt": "a\n"})
    ran.unlink(missing_ok=True)  # the test's own commits ran them
    assert merge_home(project, wt, alpha.branch, fleet, alpha, _cfg(project), resolve=None).outcome == "merged"
    assert not ran.exists()
    beta, wt = _child(project, fleet, "Add beta", {"beta.txt": "b\n"})
    ran.unlink(missing_ok=True)
    assert merge_home(project, wt, beta.branch, fleet, beta, _cfg(project, GENESIS_GIT_HOOKS="true"),
                      resolve=None).outcome == "merged"
    assert "post-merge" in ran.read_text().split()


def test_a_merge_interrupted_mid_replay_is_undone_and_done_again(project, fleet):
    alpha, wt = _child(project, fleet, "Add alpha", {"alpha.txt": "a\n", "shared.txt": "x\n"})
    commit_file(project, "shared.txt", "the project's\n")
    git(wt, "checkout", "-q", "--detach", fleet)  # as a monitor killed mid-replay left it
    os.system(f"cd {wt} && git cherry-pick --no-commit {alpha.branch} >/dev/null 2>&1")
    result = merge_home(project, wt, alpha.branch, fleet, alpha, _cfg(project),
                        resolve=lambda w, f: ((w / "shared.txt").write_text("the project's\nx\n"),
                                              git(w, "add", *f)) and True)
    assert result.outcome == "merged", result.detail
    assert (project / "shared.txt").read_text() == "the project's\nx\n" and (project / "alpha.txt").is_file()


def test_branch_mode_keeps_the_branch_rebased_and_pushes_it(project, fleet, tmp_path):
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(project, "remote", "add", "origin", str(remote))
    git(project, "push", "-q", "-u", "origin", fleet)
    alpha, wt = _child(project, fleet, "Add alpha", {"alpha.txt": "a\n"})
    commit_file(project, "first.txt")
    cfg = _cfg(project, GENESIS_FLEET_MERGE="branch", AUTO_PUSH="true")
    home = _tip(project, fleet)

    ready = merge_home(project, wt, alpha.branch, fleet, alpha, cfg, resolve=None)
    assert ready.outcome == "ready" and "pushed to origin" in ready.detail, ready.detail
    assert _tip(project, fleet) == home and not (project / "alpha.txt").exists()
    assert git(project, "merge-base", "--is-ancestor", home, alpha.branch) == ""
    assert git(remote, "rev-parse", f"refs/heads/{alpha.branch}").strip() == ready.sha == _tip(project, alpha.branch)
    assert _states(git(project, "show", f"{alpha.branch}:TASKS.md"))["Add alpha"] == DONE

    moved = commit_file(project, "second.txt")  # the project branch moves on: the next call rebases again
    again = merge_home(project, wt, alpha.branch, fleet, alpha, cfg, resolve=None)
    assert again.outcome == "ready" and again.sha != ready.sha
    assert git(project, "merge-base", "--is-ancestor", moved, alpha.branch) == ""
    assert git(remote, "rev-parse", f"refs/heads/{alpha.branch}").strip() == again.sha
    assert _tip(project, fleet) == moved


def test_mark_failed_marks_the_task_on_the_project_branch(project, fleet):
    sha = mark_failed(project, fleet, _ref("Add gamma"), "the agent failed three times\nand escalated twice")
    assert sha == _tip(project, fleet) == git(project, "rev-parse", "HEAD").strip()
    text = (project / "TASKS.md").read_text()
    assert "- [!] Add gamma (failed: the agent failed three times and escalated twice)\n" in text
    assert _states(text)["Add gamma (failed: the agent failed three times and escalated twice)"] == FAILED
    assert [r.text for r in open_refs(parse(text))] == ["Add alpha", "Add beta"]
    assert git(project, "log", "-1", "--format=%an", fleet).strip() == "Genesis"
    assert mark_failed(project, fleet, _ref("Add gamma"), "again") == sha  # nothing more to mark


def test_a_project_branch_being_rebased_by_the_user_is_not_moved_under_the_rebase(project, fleet):
    alpha, wt = _child(project, fleet, "Add alpha", {"alpha.txt": "a\n"})
    git(project, "checkout", "-qb", "side")
    commit_file(project, "shared.txt", "side\n")
    git(project, "checkout", "-q", fleet)
    before = commit_file(project, "shared.txt", "mine\n")
    rebasing = subprocess.run(["git", "-c", "user.name=T", "-c", "user.email=t@example.invalid", "rebase", "side"],
                              cwd=project, capture_output=True)
    assert rebasing.returncode != 0  # stopped on its conflict, the user mid-way
    result = merge_home(project, wt, alpha.branch, fleet, alpha, _cfg(project), resolve=None)
    assert result.outcome == "held" and "being rebased" in result.detail
    assert _tip(project, fleet) == before


def test_signing_that_would_prompt_is_never_tried_in_the_merge(project, fleet, tmp_path):
    alpha, wt = _child(project, fleet, "Add alpha", {"alpha.txt": "a\n"})
    calls = tmp_path / "signer-calls"
    signer = tmp_path / "signer"
    signer.write_text(f"#!/bin/sh\necho called >> {calls}\nexit 1\n")  # no key, no agent: as at night
    signer.chmod(0o755)
    git(project, "config", "commit.gpgsign", "true")
    git(project, "config", "gpg.program", str(signer))
    result = merge_home(project, wt, alpha.branch, fleet, alpha, _cfg(project), resolve=None)
    assert result.outcome == "merged", result.detail
    assert calls.read_text().split() == ["called"]  # the one bounded probe, never a commit's signature
    assert "Genesis-Unsigned: commit.gpgsign is on" in git(project, "log", "-1", "--format=%B", fleet)


@pytest.mark.parametrize("env, said", [
    ({"GENESIS_FLEET_MERGE": "rebase"}, "expected queue or branch"),
    ({"GENESIS_MERGE_TEST_TIMEOUT": "20 min"}, "is not a duration: write 90s, 15m or 2h"),
])
def test_the_merge_settings_are_checked_at_the_start(project, env, said):
    with pytest.raises(ConfigError, match=said):
        resolve(project, env=env)


def test_a_merger_that_leaves_the_replay_moves_nothing(project, fleet):
    alpha, alpha_wt = _child(project, fleet, "Add alpha", {"shared.txt": "ALPHA\n"})
    beta, beta_wt = _child(project, fleet, "Add beta", {"shared.txt": "BETA\n"})
    cfg = _cfg(project)
    assert merge_home(project, alpha_wt, alpha.branch, fleet, alpha, cfg, resolve=None).outcome == "merged"
    home, beta_old = _tip(project, fleet), _tip(project, beta.branch)

    def wanders_off(worktree: Path, files: list[str]) -> bool:
        git(worktree, "reset", "-q", "--hard")
        git(worktree, "checkout", "-q", beta.branch)  # "resolved" by going back to the old work
        return True

    result = merge_home(project, beta_wt, beta.branch, fleet, beta, cfg, resolve=wanders_off)
    assert result.outcome == "conflict" and "left the replay" in result.detail
    assert _tip(project, fleet) == home and _tip(project, beta.branch) == beta_old
    assert (project / "shared.txt").read_text() == "ALPHA\n"


def test_the_planners_branch_brings_its_tasks_home_with_the_fleets_ticks(project, fleet):
    plan = create(project, project.parent / "trees", "plan", "genesis/plan/run-1", fleet)
    (plan / "TASKS.md").write_text(TASKS + "- [ ] Add delta\n- [ ] Add epsilon\n")
    commit_file(plan, "notes.md", "planned\n")
    git(plan, "add", "TASKS.md")
    git(plan, "commit", "-qm", "plan more")
    # Meanwhile a merge ticked the last task, on the line next to the Planner's additions.
    (project / "TASKS.md").write_text(TASKS.replace("- [ ] Add gamma", "- [x] Add gamma"))
    git(project, "commit", "-qam", "gamma done")
    planner = TaskRef("plan", "", 0)
    result = merge_home(project, plan, "genesis/plan/run-1", fleet, planner, _cfg(project), resolve=None,
                        keep_tasks=True)
    assert result.outcome == "merged", result.detail
    assert _states((project / "TASKS.md").read_text()) == {"Add alpha": OPEN, "Add beta": OPEN, "Add gamma": DONE,
                                                           "Add delta": OPEN, "Add epsilon": OPEN}
    assert (project / "notes.md").read_text() == "planned\n"

    commit_file(plan, "later.md")  # a clean three-way merge keeps the Planner's own placement
    (plan / "TASKS.md").write_text("- [ ] Add zeta\n" + (plan / "TASKS.md").read_text())
    git(plan, "commit", "-qam", "plan first")
    again = merge_home(project, plan, "genesis/plan/run-1", fleet, planner, _cfg(project), resolve=None,
                       keep_tasks=True)
    assert again.outcome == "merged", again.detail
    assert [t.text for t in parse((project / "TASKS.md").read_text()).items][:2] == ["Add zeta", "Add alpha"]


@pytest.mark.fault(93)
def test_a_branch_conflicting_in_two_commits_goes_to_the_merger_once_as_one_change(project, fleet):
    alpha, alpha_wt = _child(project, fleet, "Add alpha", {"shared.txt": "one\nALPHA\nthree\n"})
    beta, beta_wt = _child(project, fleet, "Add beta", {"shared.txt": "one\nBETA\nthree\n"})
    commit_file(beta_wt, "shared.txt", "one\nBETA, again\nthree\n", "beta, again")  # the same line once more
    commit_file(beta_wt, "more.txt", "more\n", "beta, more")
    cfg = _cfg(project)
    assert merge_home(project, alpha_wt, alpha.branch, fleet, alpha, cfg, resolve=None).outcome == "merged"
    asked: list[list[str]] = []

    def resolves(worktree: Path, files: list[str]) -> bool:
        asked.append(files)
        seen = (worktree / "shared.txt").read_text()
        assert ">>>>>>>" in seen and "BETA, again" in seen  # the whole rest of the branch, at once
        (worktree / "shared.txt").write_text("one\nALPHA\nBETA, again\nthree\n")
        git(worktree, "add", "shared.txt")
        return True

    result = merge_home(project, beta_wt, beta.branch, fleet, beta, cfg, resolve=resolves)
    assert result.outcome == "merged" and asked == [["shared.txt"]], result.detail
    assert (project / "shared.txt").read_text() == "one\nALPHA\nBETA, again\nthree\n"
    assert (project / "more.txt").read_text() == "more\n"
    assert len(result.commits) == 1
    message = git(project, "log", "-1", "--format=%an|%B", result.commits[0])
    assert message.startswith("T|3 commits of the branch, replayed as one") and "- beta, again" in message


def test_work_the_child_left_uncommitted_is_never_discarded(project, fleet):
    alpha, wt = _child(project, fleet, "Add alpha", {"alpha.txt": "a\n"})
    (wt / "alpha.txt").write_text("a, and more nobody committed\n")
    before, branch = _tip(project, fleet), _tip(project, alpha.branch)
    result = merge_home(project, wt, alpha.branch, fleet, alpha, _cfg(project), resolve=None)
    assert result.outcome == "conflict" and "uncommitted changes" in result.detail and "alpha.txt" in result.detail
    assert (wt / "alpha.txt").read_text() == "a, and more nobody committed\n"
    assert _tip(project, fleet) == before and _tip(project, alpha.branch) == branch


def test_a_resolution_that_drops_the_other_task_s_line_is_not_landed_and_names_the_hunk(project, fleet):
    alpha, alpha_wt = _child(project, fleet, "Add alpha", {"shared.txt": "one\nALPHA\nthree\n"})
    beta, beta_wt = _child(project, fleet, "Add beta", {"shared.txt": "one\nBETA\nthree\n"})
    assert merge_home(project, alpha_wt, alpha.branch, fleet, alpha, _cfg(project), resolve=None).outcome == "merged"
    home, beta_old = _tip(project, fleet), _tip(project, beta.branch)

    def keeps_one_side(worktree: Path, files: list[str]) -> bool:
        (worktree / "shared.txt").write_text("one\nBETA\nthree\n")  # alpha's line is gone
        git(worktree, "add", "shared.txt")
        return True

    result = merge_home(project, beta_wt, beta.branch, fleet, beta, _cfg(project), resolve=keeps_one_side)
    assert result.outcome == "dropped", result.detail
    alpha_commit = git(project, "log", "-1", "--format=%H", "--grep=^Add alpha$", fleet).strip()
    assert result.lost == (f"shared.txt line 2 (added by the project branch's commit {alpha_commit[:10]} "
                           f"(Add alpha): 'ALPHA')",)
    assert "'ALPHA'" in result.detail and "Add alpha" in result.detail and "not landed" in result.detail
    assert _tip(project, fleet) == home and _tip(project, beta.branch) == beta_old  # nothing moved
    assert (project / "shared.txt").read_text() == "one\nALPHA\nthree\n"
    assert git(beta_wt, "status", "--porcelain") == ""


CHECKED = "# Tasks\n\n- [ ] Add alpha\n  check: grep -c ready alpha.txt\n- [ ] Add beta\n"


def test_a_merge_that_breaks_the_project_s_check_is_not_landed_and_gives_the_tail(project):
    commit_file(project, "TASKS.md", CHECKED)
    commit_file(project, "shared.txt", "one\n")
    target = git(project, "symbolic-ref", "--short", "HEAD").strip()
    ref = TaskRef(task_id("Add alpha"), "Add alpha", 3)
    wt = create(project, project.parent / "trees", ref.id, ref.branch, target)
    (wt / "alpha.txt").write_text("ready\n")
    git(wt, "add", "alpha.txt")
    git(wt, "commit", "-qm", "alpha")
    commit_file(project, "gate.txt", "the project branch moved on\n")  # with alpha, the project's check fails
    before, branch = _tip(project, target), _tip(project, ref.branch)
    red = _cfg(project, GENESIS_CHECK_CMD="if test -f gate.txt && test -f alpha.txt; then "
                                          "echo 'FAILED test_gate: API_KEY=sk-live-abcdefghijklmnop'; exit 4; fi")
    result = merge_home(project, wt, ref.branch, target, ref, red, resolve=None)
    assert result.outcome == "tests_failed", result.detail
    assert "the project's check `if test -f gate.txt" in result.detail and "exited 4" in result.detail
    assert any("FAILED test_gate" in line for line in result.tail) and "abcdefghijklmnop" not in "".join(result.tail)
    assert [(c["kind"], c["exit_code"]) for c in result.checks] == [("task", 0), ("project", 4)]
    assert _tip(project, target) == before and _tip(project, ref.branch) == branch  # nothing landed
    assert git(wt, "symbolic-ref", "--short", "HEAD").strip() == ref.branch and git(wt, "status", "--porcelain") == ""

    green = merge_home(project, wt, ref.branch, target, ref, _cfg(project, GENESIS_CHECK_CMD="test -f gate.txt"),
                       resolve=None)
    assert green.outcome == "merged", green.detail
    assert [(c["kind"], c["exit_code"]) for c in green.checks] == [("task", 0), ("project", 0)]
    assert "its checks passed (2)" in green.detail and _tip(project, target) == green.sha


def test_the_task_s_own_check_fails_then_passes_on_the_merged_tree(project):
    commit_file(project, "TASKS.md", CHECKED)
    target = git(project, "symbolic-ref", "--short", "HEAD").strip()
    ref = TaskRef(task_id("Add alpha"), "Add alpha", 3)
    wt = create(project, project.parent / "trees", ref.id, ref.branch, target)
    (wt / "alpha.txt").write_text("half done\n")
    tasks = (wt / "TASKS.md").read_text().replace("check: test", "check: true ||")  # the agent's edit: not counted
    (wt / "TASKS.md").write_text(tasks.replace("- [ ] Add alpha", "- [x] Add alpha"))
    git(wt, "add", "-A")
    git(wt, "commit", "-qm", "alpha, half")
    before = _tip(project, target)
    red = merge_home(project, wt, ref.branch, target, ref, _cfg(project), resolve=None)
    assert red.outcome == "tests_failed" and "the task's check `grep -c ready alpha.txt` exited 1" in red.detail
    assert red.tail == ("0",) and red.checks[0]["exit_code"] == 1 and _tip(project, target) == before

    (wt / "alpha.txt").write_text("ready\n")
    git(wt, "commit", "-qam", "alpha, ready")
    green = merge_home(project, wt, ref.branch, target, ref, _cfg(project), resolve=None)
    assert green.outcome == "merged", green.detail
    assert _states((project / "TASKS.md").read_text())["Add alpha"] == DONE
    assert (project / "alpha.txt").read_text() == "ready\n"

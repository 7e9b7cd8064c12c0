"""A keyed child (GENESIS_COMMIT_KEY and GENESIS_TASK_ID set, as the fleet on Temporal runs
one; loop/keyedtries.py). Its rules replayed in process on a real project, its branch and its
ledger: a phase whose key an earlier try committed is skipped, never one of another attempt's
key nor this loop's own retry; only a keyed child's task branch gets an upstream; a push
refused as non-fast-forward steps a keyed child aside with 35; an iteration whose phases an
earlier try committed is not counted against the breaker. End to end, in a real linked
worktree with a real bare remote: a try pushes its branch with its upstream after each phase,
each of Genesis's commits keyed and the agent's own pushed as they are; a loop started again
with the same key skips the phases already keyed on it and goes on; a refused push steps aside."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from helpers.agent import script
from helpers.git import git, new_repo
from helpers.loop import loop_env, run_loop

from genesis import exitcodes
from genesis.ledger.store import Ledger, LedgerError
from genesis.loop.iteration import iteration_finish, iteration_start
from genesis.loop.keyedtries import already_committed, gives_upstream, replayed, stepped_aside
from genesis.repo.autocommit import CommitResult, commit
from genesis.repo.phasekeys import TRAILER, keys_on, trailer_value

RUN = "20260101T000000Z-81"   # the replays' run (tests/loop/conftest.py's step)
TASK = "Serve it over HTTP"
TID = "serve-it-over-http-5d41e2"
BRANCH = f"genesis/task/{TID}"
CHILD = {"GENESIS_TASK": TASK, "GENESIS_TASK_ID": TID, "PORT": "20140", "GENESIS_PORT_BASE": "20140",
         "GENESIS_PORT_COUNT": "10"}
KEY = f"genesis-fleet-0a1b2c/{TID}#1"


# --- the rules, replayed --------------------------------------------------------------------

@pytest.fixture
def keyed(step, monkeypatch):
    """The replays' step as a keyed child's: its task's id in the environment, its attempt's key."""
    monkeypatch.setenv("GENESIS_TASK_ID", TID)
    return with_key(step, KEY)


def with_key(step, key: str):
    return replace(step, cfg=replace(step.cfg, commit_key=key))


def committed(project: Path, run: str, iteration: int, phase: str, key: str = KEY) -> str:
    """A phase's auto-commit under its key, as the loop of run `run` makes it; its sha."""
    (project / f"{run}-{iteration}-{phase}.txt").write_text("work\n")
    done = commit(project, f"genesis: {phase}, iteration {iteration} (finished) [run {run}]", [], push=False,
                  trailers=[(TRAILER, trailer_value(key, iteration, phase))])
    assert done.committed, done.error
    return git(project, "rev-parse", "HEAD").strip()


def keyed_skips(step) -> list[tuple[int, str, str]]:
    return [(e["iteration"], e["phase"], e["keyed"]) for e in step.events(kinds=("phase_skip",)) if e.get("keyed")]


def test_a_phase_an_earlier_try_committed_under_the_same_key_is_skipped(keyed, project, said):
    sha = committed(project, "20251231T230000Z-7", 1, "Builder")
    assert already_committed(keyed, "Builder", 1) == exitcodes.PHASE_SKIPPED
    assert keyed_skips(keyed) == [(1, "Builder", sha)]
    assert ("info", f"Builder: skipped: an earlier try of this attempt committed it ({sha[:12]}, "
                    f"Genesis-Phase: {KEY}/1-Builder)") in said
    # Only that phase of that iteration: the key names both.
    assert already_committed(keyed, "Criticizer", 1) is None
    assert already_committed(keyed, "Builder", 2) is None
    assert keyed_skips(keyed) == [(1, "Builder", sha)]


def test_another_attempts_key_runs_every_phase(keyed, project):
    """Each attempt of a task keys its commits its own way: attempt 1's phases are not attempt
    2's to skip, and attempt 12's (a key that begins with 1's) are not attempt 1's."""
    committed(project, "20251231T230000Z-7", 1, "Builder")
    committed(project, "20251231T230000Z-8", 1, "Criticizer", key=KEY.replace("#1", "#12"))
    second = with_key(keyed, KEY.replace("#1", "#2"))
    assert [already_committed(second, phase, 1) for phase in ("Builder", "Criticizer")] == [None, None]
    assert already_committed(keyed, "Criticizer", 1) is None
    assert keyed_skips(keyed) == []


def test_a_keyed_childs_own_retry_of_a_phase_is_never_skipped(keyed, project):
    """A stuck phase's partial work is committed under its key, and its retry commits under the
    same key again: a key names a phase of an iteration, not one run of it."""
    committed(project, "20251231T230000Z-7", 1, "Builder")
    keyed.event("phase_start", iteration=1, phase="Builder")   # this loop ran it already: its retry runs
    assert already_committed(keyed, "Builder", 1) is None
    committed(project, RUN, 1, "Criticizer")                   # this loop's own commit under the key
    assert already_committed(keyed, "Criticizer", 1) is None
    assert keyed_skips(keyed) == []
    assert [(k.iteration, k.phase) for k in keys_on(project, "HEAD", prefix=KEY)] == [(1, "Criticizer"),
                                                                                       (1, "Builder")]


def test_a_loop_that_is_no_keyed_child_skips_nothing(step, project, monkeypatch):
    committed(project, "20251231T230000Z-7", 1, "Builder")
    monkeypatch.delenv("GENESIS_TASK_ID", raising=False)
    assert already_committed(with_key(step, KEY), "Builder", 1) is None   # a key, but no task of a fleet's
    monkeypatch.setenv("GENESIS_TASK_ID", TID)
    assert already_committed(step, "Builder", 1) is None                  # a local fleet's child: no key
    assert keyed_skips(step) == []


def test_only_a_keyed_child_gives_its_task_branch_an_upstream(step, tmp_path):
    """The engine's child pushes its branch up with an upstream; a local fleet's child, as before
    the engine, pushes only to an upstream the user set: said, nothing pushed, none made."""
    project = step.cfg.project
    bare = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    git(project, "remote", "add", "origin", str(bare))
    git(project, "checkout", "-q", "-b", BRANCH)
    child = {"GENESIS_TASK_ID": TID}
    assert gives_upstream(with_key(step, KEY).cfg, child) is True
    assert gives_upstream(step.cfg, child) is False      # a local fleet's child: no key
    assert gives_upstream(with_key(step, KEY).cfg, {}) is False

    (project / "a.txt").write_text("a\n")
    local = commit(project, "genesis: Builder, iteration 1 (finished) [run r]", [], push=True,
                   set_upstream=gives_upstream(step.cfg, child))
    assert local.committed and not local.pushed
    assert f"not pushed: branch {BRANCH} has no upstream" in local.error, local.error
    assert not git(bare, "for-each-ref", f"refs/heads/{BRANCH}").strip()
    assert f"branch.{BRANCH}.remote" not in git(project, "config", "--list")

    (project / "b.txt").write_text("b\n")
    engine = commit(project, "genesis: Criticizer, iteration 1 (finished) [run r]", [], push=True,
                    set_upstream=gives_upstream(with_key(step, KEY).cfg, child))
    assert engine.committed and engine.pushed, engine.error
    assert git(project, "rev-parse", "--abbrev-ref", "@{upstream}").strip() == f"origin/{BRANCH}"
    assert git(bare, "rev-parse", f"refs/heads/{BRANCH}") == git(project, "rev-parse", "HEAD")


REFUSED = CommitResult(True, "0a1b2c3", False, "git push failed: ! [rejected] (fetch first). Genesis never forces "
                       "a push, so this work stays committed here, unpushed", rejected=True)


def test_a_push_refused_as_non_fast_forward_steps_a_keyed_child_aside(keyed, said):
    assert stepped_aside(keyed, "Builder", 1, REFUSED) == exitcodes.STEPPED_ASIDE == 35
    (aside,) = keyed.events(kinds=("stepped_aside",))
    assert (aside["phase"], aside["iteration"], aside["sha"]) == ("Builder", 1, "0a1b2c3")
    assert "[rejected]" in aside["error"]
    (why,) = keyed.events(kinds=("stop_reason",))
    assert why["code"] == 35 and "this loop steps aside" in why["reason"] and "0a1b2c3" in why["reason"]
    assert any(kind == "error" and "the newer loop owns the branch" in m for kind, m in said)


def test_any_other_push_failure_or_an_unkeyed_loop_does_not_step_aside(keyed, monkeypatch):
    assert stepped_aside(keyed, "Builder", 1, replace(REFUSED, rejected=False)) is None  # not the branch moving
    assert stepped_aside(keyed, "Builder", 1, CommitResult(True, "0a1b2c3", True)) is None
    assert stepped_aside(keyed, "Builder", 1, None) is None                              # auto-commit off
    monkeypatch.delenv("GENESIS_TASK_ID")
    assert stepped_aside(keyed, "Builder", 1, REFUSED) is None   # unkeyed: said, and the loop goes on
    assert keyed.events(kinds=("stepped_aside", "stop_reason")) == []


def skip(phase: str, sha: str = "") -> dict:
    return {"event": "phase_skip", "phase": phase, **({"keyed": sha} if sha else {})}


def test_an_iteration_is_replayed_when_its_phases_were_all_skipped_some_as_an_earlier_trys():
    assert replayed([skip("Builder", "0a1b"), skip("Criticizer", "0a1b")])
    assert replayed([skip("Builder", "0a1b"), skip("Criticizer")])        # the other's trigger said no
    assert not replayed([skip("Builder", "0a1b"), {"event": "phase_start", "phase": "Criticizer"}])
    assert not replayed([skip("Builder"), skip("Criticizer")])            # skipped by their triggers alone
    assert not replayed([])


def test_a_replayed_iteration_is_not_counted_against_the_breaker(keyed):
    ends = []
    for iteration, sha in ((1, "0a1b"), (2, "")):   # the earlier try's, then one its triggers skipped
        assert iteration_start(keyed, iteration) == exitcodes.OK
        keyed.event("phase_skip", iteration=iteration, phase="Builder", **({"keyed": sha} if sha else {}))
        assert iteration_finish(keyed, iteration) == exitcodes.OK
        ends.append(keyed.events(kinds=("iteration_end",))[-1])
    assert [(e["progress"], e["replayed"], e["no_progress"]) for e in ends] == [(False, True, 0), (False, False, 1)]


# --- end to end: a real keyed child in a linked worktree --------------------------------------

# Each phase adds a line to its own file (always something to commit) and never ticks the task;
# from iteration 2 on, the Criticizer commits its line itself: nothing is left for Genesis to commit.
ADDING = r"""#!/usr/bin/env bash
set -euo pipefail
echo "run" >>"$GENESIS_AGENT.txt"
if [[ $GENESIS_AGENT == Criticizer && $GENESIS_ITERATION -ge 2 ]]; then
  git add Criticizer.txt && git -c user.name=Agent -c user.email=agent@example.invalid commit -qm "Criticize it"
fi
"""


@pytest.fixture
def child(tmp_path: Path) -> dict[str, Path]:
    """A project with one open task, pushed to a bare remote (its ref updates logged), and a
    linked worktree of the task's branch made with no upstream, as a fleet makes it."""
    main = new_repo(tmp_path / "repo")
    (main / "TASKS.md").write_text(f"# Tasks\n\n- [ ] {TASK}\n")
    git(main, "add", "TASKS.md")
    git(main, "commit", "-qm", "tasks")
    bare = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    git(bare, "config", "core.logAllRefUpdates", "always")
    git(main, "remote", "add", "origin", str(bare))
    git(main, "push", "-q", "-u", "origin", "HEAD")
    tree = main / ".git" / "genesis-worktrees" / TID
    git(main, "worktree", "add", "-q", "-b", BRANCH, str(tree))
    git(tree, "config", "user.name", "Agent")
    git(tree, "config", "user.email", "agent@example.invalid")
    return {"main": main, "tree": tree, "bare": bare, "agent": script(tmp_path / "agent.sh", ADDING),
            "state": main / ".git" / "worktrees" / tree.name / "genesis"}


def events(state: Path, kind: str) -> list[dict]:
    try:
        with Ledger.open(state / "ledger.sqlite3", readonly=True) as led:
            return [e for e in led.events(None) if e["event"] == kind]
    except LedgerError:
        return []


def loop(child: dict[str, Path], iterations: int, **env: str):
    return run_loop(child["tree"], "--trust", "--agent-cmd", f"bash {child['agent']}", "--max-iterations",
                    str(iterations), "--set", "GENESIS_PHASES=Builder Criticizer", "--set", "AUTO_PUSH=true",
                    "--set", "PHASE_Criticizer_TRIGGER=always", env=loop_env(**CHILD, **env))


def pushes(child: dict[str, Path]) -> list[str]:
    """The subject of the commit each push of the task's branch left on the remote, newest first."""
    return git(child["bare"], "log", "-g", "--format=%s", f"refs/heads/{BRANCH}").splitlines()


@pytest.mark.whole
def test_a_keyed_child_pushes_after_each_phase_and_a_try_started_again_skips_what_its_key_committed(child):
    first = loop(child, 1, GENESIS_COMMIT_KEY=KEY)
    assert first.returncode == 0, first.stderr
    # The engine's child: its branch went up with its upstream, after each phase, each phase's
    # commit carrying its key.
    assert git(child["tree"], "rev-parse", "--abbrev-ref", "@{upstream}").strip() == f"origin/{BRANCH}"
    run = events(child["state"], "loop_end")[0]["run_id"]
    assert pushes(child) == [f"genesis: Criticizer, iteration 1 (finished) [run {run}]",
                             f"genesis: Builder, iteration 1 (finished) [run {run}]"]
    assert git(child["bare"], "log", "-1", "--format=%(trailers:key=Genesis-Phase,valueonly)",
               f"refs/heads/{BRANCH}").strip() == f"{KEY}/1-Criticizer"
    assert events(child["state"], "commit_failed") == []
    pushed = git(child["bare"], "rev-parse", f"refs/heads/{BRANCH}").strip()
    again = loop(child, 2, GENESIS_COMMIT_KEY=KEY)   # a retried try: a new loop, iteration 1 again
    assert again.returncode == 0, again.stderr
    # Iteration 1 is not run again: each phase ran twice in all (iterations 1 and 2), not three times.
    assert (child["tree"] / "Builder.txt").read_text() == "run\n" * 2
    assert (child["tree"] / "Criticizer.txt").read_text() == "run\n" * 2
    skips = [e for e in events(child["state"], "phase_skip") if e.get("keyed")]
    assert [(e["iteration"], e["phase"]) for e in skips] == [(1, "Builder"), (1, "Criticizer")]
    assert "Builder: skipped: an earlier try of this attempt committed it" in again.stderr
    # Iteration 2 went on from the first try's pushed work: the Builder's commit keyed and pushed,
    # then the Criticizer's own commit (nothing left for Genesis to commit) pushed as it was, unkeyed.
    retry = events(child["state"], "loop_end")[-1]["run_id"]
    assert pushes(child)[:3] == ["Criticize it", f"genesis: Builder, iteration 2 (finished) [run {retry}]",
                                 f"genesis: Criticizer, iteration 1 (finished) [run {run}]"]
    assert "Criticizer: nothing to commit; the agent's own commits pushed" in again.stderr
    assert git(child["bare"], "rev-parse", f"refs/heads/{BRANCH}") == git(child["tree"], "rev-parse", "HEAD")
    git(child["bare"], "merge-base", "--is-ancestor", pushed, f"refs/heads/{BRANCH}")
    # No key twice, and the skipped iteration not counted against the breaker.
    keys = [(k.iteration, k.phase) for k in keys_on(child["bare"], f"refs/heads/{BRANCH}", prefix=KEY)]
    assert sorted(keys) == [(1, "Builder"), (1, "Criticizer"), (2, "Builder")], keys
    ends = events(child["state"], "iteration_end")
    assert [(e["iteration"], e["replayed"]) for e in ends][-2:] == [(1, True), (2, False)]
    assert ends[-2]["no_progress"] == 0


def rival_push(child: dict[str, Path], tmp_path: Path) -> str:
    """Another machine's loop of the task pushed its branch: the remote has a commit this one lacks."""
    other = tmp_path / "machine-b"
    git(tmp_path, "clone", "-q", str(child["bare"]), str(other))
    git(other, "checkout", "-q", "-b", BRANCH)
    (other / "theirs.txt").write_text("theirs\n")
    git(other, "add", "theirs.txt")
    git(other, "-c", "user.name=B", "-c", "user.email=b@example.invalid", "commit", "-qm", "theirs")
    git(other, "push", "-q", "origin", BRANCH)
    return git(child["bare"], "rev-parse", f"refs/heads/{BRANCH}").strip()


@pytest.mark.whole
def test_a_keyed_child_whose_push_is_refused_steps_aside_with_35(child, tmp_path):
    theirs = rival_push(child, tmp_path)
    done = loop(child, 3, GENESIS_COMMIT_KEY=KEY)
    assert done.returncode == exitcodes.STEPPED_ASIDE == 35, done.stderr
    # At the Builder's refused push: no later phase ran, its work committed here, theirs kept there.
    assert [e["phase"] for e in events(child["state"], "phase_start")] == ["Builder"]
    (aside,) = events(child["state"], "stepped_aside")
    assert aside["phase"] == "Builder" and "[rejected]" in aside["error"], aside
    assert git(child["bare"], "rev-parse", f"refs/heads/{BRANCH}").strip() == theirs
    assert git(child["tree"], "status", "--porcelain") == ""
    assert git(child["tree"], "log", "-1", "--format=%s").startswith("genesis: Builder, iteration 1")
    (end,) = events(child["state"], "loop_end")
    assert end["exit_code"] == 35 and "this loop steps aside" in end["reason"], end

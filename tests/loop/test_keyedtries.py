"""A keyed child (GENESIS_COMMIT_KEY and GENESIS_TASK_ID set, as the fleet on Temporal runs
one) in a real linked worktree with a real bare remote: it gives its task branch an upstream
and pushes, where a local fleet's child (no key) says "no upstream" and pushes nothing; a
loop started again with the same key skips the phases already keyed on its branch; a push
refused as non-fast-forward makes it step aside with 34."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.agent import script
from helpers.git import git, new_repo
from helpers.loop import loop_env, run_loop

from genesis import exitcodes
from genesis.ledger.store import Ledger, LedgerError
from genesis.repo.phasekeys import keys_on

TASK = "Serve it over HTTP"
TID = "serve-it-over-http-5d41e2"
BRANCH = f"genesis/task/{TID}"
CHILD = {"GENESIS_TASK": TASK, "GENESIS_TASK_ID": TID, "PORT": "20140", "GENESIS_PORT_BASE": "20140",
         "GENESIS_PORT_COUNT": "10"}
KEY = f"genesis-fleet-0a1b2c/{TID}#1"

# Each phase adds a line to its own file (always something to commit) and never ticks the task.
ADDING = r"""#!/usr/bin/env bash
set -euo pipefail
echo "run" >>"$GENESIS_AGENT.txt"
"""


@pytest.fixture
def child(tmp_path: Path) -> dict[str, Path]:
    """A project with one open task, pushed to a bare remote, and a linked worktree of the task's
    branch made with no upstream, as a fleet makes it."""
    main = new_repo(tmp_path / "repo")
    (main / "TASKS.md").write_text(f"# Tasks\n\n- [ ] {TASK}\n")
    git(main, "add", "TASKS.md")
    git(main, "commit", "-qm", "tasks")
    bare = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
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


def on_remote(bare: Path) -> bool:
    return bool(git(bare, "for-each-ref", f"refs/heads/{BRANCH}").strip())


@pytest.mark.whole
@pytest.mark.parametrize("keyed", [False, True], ids=["local-fleet", "keyed"])
def test_only_a_keyed_child_gives_its_task_branch_an_upstream(child, keyed):
    done = loop(child, 1, **({"GENESIS_COMMIT_KEY": KEY} if keyed else {}))
    assert done.returncode == 0, done.stderr
    if keyed:   # the engine's child: the branch goes up with its upstream, each phase's work on it
        assert git(child["tree"], "rev-parse", "--abbrev-ref", "@{upstream}").strip() == f"origin/{BRANCH}"
        assert git(child["bare"], "rev-parse", f"refs/heads/{BRANCH}") == git(child["tree"], "rev-parse", "HEAD")
        assert events(child["state"], "commit_failed") == []
    else:   # a local fleet's child, as before the engine: said, nothing pushed, no upstream made
        assert not on_remote(child["bare"])
        assert f"not pushed: branch {BRANCH} has no upstream" in done.stderr, done.stderr
        assert f"branch.{BRANCH}.remote" not in git(child["tree"], "config", "--list")


@pytest.mark.whole
def test_a_keyed_child_started_again_skips_the_phases_its_key_committed(child):
    first = loop(child, 1, GENESIS_COMMIT_KEY=KEY)
    assert first.returncode == 0, first.stderr
    pushed = git(child["bare"], "rev-parse", f"refs/heads/{BRANCH}").strip()
    again = loop(child, 2, GENESIS_COMMIT_KEY=KEY)   # a retried try: a new loop, iteration 1 again
    assert again.returncode == 0, again.stderr
    # Iteration 1 is not run again: each phase ran twice in all (iterations 1 and 2), not three times.
    assert (child["tree"] / "Builder.txt").read_text() == "run\n" * 2
    assert (child["tree"] / "Criticizer.txt").read_text() == "run\n" * 2
    skips = [e for e in events(child["state"], "phase_skip") if e.get("keyed")]
    assert [(e["iteration"], e["phase"]) for e in skips] == [(1, "Builder"), (1, "Criticizer")]
    assert "Builder: skipped: an earlier try of this attempt committed it" in again.stderr
    # No key twice, the first try's pushed work under the second's, and the skipped iteration
    # not counted against the breaker.
    keys = [(k.iteration, k.phase) for k in keys_on(child["bare"], f"refs/heads/{BRANCH}", prefix=KEY)]
    assert sorted(keys) == [(1, "Builder"), (1, "Criticizer"), (2, "Builder"), (2, "Criticizer")], keys
    git(child["bare"], "merge-base", "--is-ancestor", pushed, f"refs/heads/{BRANCH}")
    ends = events(child["state"], "iteration_end")
    assert [(e["iteration"], e["replayed"]) for e in ends][-2:] == [(1, True), (2, False)]
    assert ends[-2]["no_progress"] == 0


@pytest.mark.whole
def test_another_attempts_key_runs_every_phase(child):
    assert loop(child, 1, GENESIS_COMMIT_KEY=KEY).returncode == 0
    done = loop(child, 1, GENESIS_COMMIT_KEY=KEY.replace("#1", "#2"))
    assert done.returncode == 0, done.stderr
    assert (child["tree"] / "Builder.txt").read_text() == "run\n" * 2
    assert [e for e in events(child["state"], "phase_skip") if e.get("keyed")] == []


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


# Builder: its first run writes part of its work and then hangs, silent (stuck); its retry
# finishes. Criticizer adds its line.
STALLING = r"""#!/usr/bin/env bash
set -euo pipefail
if [[ $GENESIS_AGENT == Builder && ! -e Builder.txt ]]; then
  echo "partial" >Builder.txt
  sleep 60
fi
echo "run" >>"$GENESIS_AGENT.txt"
"""


@pytest.mark.whole
def test_a_keyed_childs_own_retry_of_a_stuck_phase_runs_and_commits_under_the_same_key(child, tmp_path):
    agent = script(tmp_path / "stalling.sh", STALLING)
    done = run_loop(child["tree"], "--trust", "--agent-cmd", f"bash {agent}", "--max-iterations", "1",
                    "--set", "GENESIS_PHASES=Builder Criticizer", "--set", "AUTO_PUSH=true",
                    "--set", "PHASE_Criticizer_TRIGGER=always", "--set", "HEARTBEAT_STALE=2s",
                    "--set", "HEARTBEAT_CHECK_INTERVAL=0.2", "--set", "PHASE_RETRY_DELAY_SECONDS=0",
                    env=loop_env(**CHILD, GENESIS_COMMIT_KEY=KEY))
    assert done.returncode == 0, done.stderr
    # The stuck run's partial work was committed under 1-Builder; the loop's own retry still ran
    # (never skipped as "an earlier try's") and committed under the same key.
    assert [e["phase"] for e in events(child["state"], "phase_start")] == ["Builder", "Builder", "Criticizer"]
    assert [e for e in events(child["state"], "phase_skip") if e.get("keyed")] == []
    assert (child["tree"] / "Builder.txt").read_text() == "partial\nrun\n"
    keys = [(k.iteration, k.phase) for k in keys_on(child["bare"], f"refs/heads/{BRANCH}", prefix=KEY)]
    assert keys == [(1, "Criticizer"), (1, "Builder"), (1, "Builder")], keys

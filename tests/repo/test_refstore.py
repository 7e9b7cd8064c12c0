"""Genesis's store of the safety refs, in real repositories: a copy with its own objects (a gc
in the project cannot reach them), incremental, pruned with the runs, and out of the agent's
reach in the real bubblewrap box, where the refs in the project are not."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from helpers.git import commit_file, git

import genesis
from genesis.repo import refstore, safety
from genesis.sandbox.bwrap import bwrap_argv
from genesis.sandbox.detect import probe
from genesis.sandbox.places import places_for

MACHINE = probe()
PACKAGE = Path(genesis.__file__).resolve().parent


def stored(project: Path) -> dict[str, str]:
    return refstore.holds(project, "refs/genesis")


def test_the_store_keeps_the_refs_with_their_own_copy_of_the_commits(project):
    first = commit_file(project, "a.txt")
    tips = safety.read_tips(project)
    safety.keep_run(project, "R1", tips)
    assert safety.copy(project, safety.run_prefix("R1"), tips) == 2  # HEAD and the branch
    store = refstore.store_of(project)
    assert store == (project / ".git" / "genesis" / "refstore.git").resolve()
    assert not (store / "objects" / "info" / "alternates").exists()
    assert stored(project)["runs/R1/HEAD"] == first
    second = commit_file(project, "b.txt")
    later = safety.read_tips(project)
    safety.keep_phase(project, "R1", 1, "Builder", later)
    safety.copy(project, safety.phase_prefix("R1", 1, "Builder"), later, everything=False)
    assert stored(project)["phases/R1/0001-Builder/HEAD"] == second
    shown = subprocess.run(["git", "cat-file", "-t", second], cwd=store, capture_output=True, text=True)
    assert shown.stdout.strip() == "commit"


def test_pruned_runs_leave_the_store_too(project):
    for run in ("20260101T000000Z-1", "20260102T000000Z-1", "20260103T000000Z-1"):
        tips = safety.read_tips(project)
        safety.keep_run(project, run, tips)
        safety.copy(project, safety.run_prefix(run), tips)
    assert safety.prune(project, "20260103T000000Z-1", keep=2) == ["20260101T000000Z-1"]
    assert {name.split("/")[1] for name in stored(project)} == {"20260102T000000Z-1", "20260103T000000Z-1"}


def test_a_commit_the_store_holds_under_another_sha_is_not_fetched_back(project):
    commit_file(project, "a.txt")
    tips = safety.read_tips(project)
    safety.keep_run(project, "R1", tips)
    safety.copy(project, safety.run_prefix("R1"), tips)
    assert not refstore.fetch_back(project, "refs/genesis/runs/R1/HEAD", "0" * 40)


@pytest.mark.fault(200)
@pytest.mark.skipif(MACHINE.bwrap is None, reason=f"no bubblewrap here: {MACHINE.bwrap_why}")
def test_in_the_box_the_agent_deletes_the_refs_in_the_project_but_not_the_store(project):
    commit_file(project, "a.txt")
    tips = safety.read_tips(project)
    safety.keep_run(project, "R1", tips)
    safety.copy(project, safety.run_prefix("R1"), tips)
    state = project / ".git" / "genesis"
    (state / "heartbeats").mkdir(parents=True, exist_ok=True)
    store = refstore.store_of(project)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(project.parent / "home")}
    act = (f"git update-ref -d refs/genesis/runs/R1/HEAD; echo $?; "
           f"git --git-dir={store} update-ref -d refs/genesis/runs/R1/HEAD 2>/dev/null; echo $?; "
           f"rm -rf {store} 2>/dev/null; echo $?")
    places = places_for(project, state, state / "heartbeats", project / "orchestrator" / "logs",
                        project / "orchestrator" / "genesis.conf", PACKAGE, ("sh",), env)
    done = subprocess.run(bwrap_argv(MACHINE.bwrap, places, ("sh", "-c", act), root=MACHINE.root), cwd=project,
                          env=env, capture_output=True, text=True, timeout=60)
    codes = done.stdout.split()
    assert codes[0] == "0" and codes[1] != "0" and codes[2] != "0", done.stderr  # only the project's ref went
    assert not git(project, "for-each-ref", "refs/genesis/runs/R1/HEAD").strip()   # the agent's reach
    assert stored(project)["runs/R1/HEAD"] == tips.head                              # not this


@pytest.mark.fault(200)
def test_hooks_planted_in_the_store_never_run_when_genesis_copies_into_it(project, tmp_path):
    """Where the box does not keep the store from the agent (Landlock, none), a hook it plants
    there must not run in Genesis's copy, outside the box."""
    commit_file(project, "a.txt")
    tips = safety.read_tips(project)
    safety.keep_run(project, "R1", tips)
    safety.copy(project, safety.run_prefix("R1"), tips)
    store = refstore.store_of(project)
    ran = tmp_path / "ran"
    planted = tmp_path / "hooks"
    planted.mkdir()
    for hooks in (store / "hooks", planted):
        for name in ("pre-receive", "post-receive", "reference-transaction", "post-update", "update"):
            hook = hooks / name
            hook.write_text(f"#!/bin/sh\necho {name} >>{ran}\n")
            hook.chmod(0o755)
    git(store, "config", "core.hooksPath", str(planted))
    second = commit_file(project, "b.txt")
    later = safety.read_tips(project)
    safety.keep_phase(project, "R1", 1, "Builder", later)
    safety.copy(project, safety.phase_prefix("R1", 1, "Builder"), later, everything=False)
    safety.prune(project, "R2", keep=1)
    assert not ran.exists()
    assert stored(project).get("phases/R1/0001-Builder/HEAD") is None  # pruned with its run, still no hook
    assert subprocess.run(["git", "cat-file", "-e", second], cwd=store).returncode == 0

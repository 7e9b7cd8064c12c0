"""The state folder taken from under a running loop (GENESIS_SANDBOX=off): noticed by the lock's
inode, made again from the settings the loop holds open, locked anew, or the loop stopped.

Real files, real descriptors and real flocks; the whole loop is in
tests/scenarios/test_fail_closed.py."""

from __future__ import annotations

import fcntl
import os
import shutil
from dataclasses import replace

import pytest

from genesis import exitcodes
from genesis.config import snapshot
from genesis.loop.relock import LockKeeper, held_snapshot, restore, take
from genesis.loop.step import StepFailed
from genesis.store.atomicio import write_json
from genesis.store.looplock import hold, same_file

RUN = "run-relock"


@pytest.fixture
def held(step):
    """The loop as the script holds it: its lock (flocked) and its run's snapshot, both open."""
    lay = step.layout
    lay.prompts_dir.mkdir(mode=0o700)
    (lay.prompts_dir / "Builder.md").write_text("build it\n")
    settings = snapshot(step.cfg)
    settings["PHASE_Builder_PROMPT"] = [str(lay.prompts_dir / "Builder.md"), "default"]
    write_json(lay.config_snapshot, {"run_id": RUN, "settings": settings, "prompts": {"Builder.md": "build it\n"}})
    lock_fd = hold(lay.loop_lock, lay.loop_record, RUN)
    snap_fd = os.open(lay.config_snapshot, os.O_RDONLY)
    yield lock_fd, snap_fd
    os.close(lock_fd)
    os.close(snap_fd)


def locked_by_someone(path) -> bool:
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


@pytest.mark.fault(74)
def test_a_deleted_state_folder_is_seen_made_again_from_what_the_loop_holds_and_locked_anew(step, held, said):
    lock_fd, snap_fd = held
    lay = step.layout
    assert same_file(lock_fd, lay.loop_lock)
    shutil.rmtree(lay.state_dir)
    assert not same_file(lock_fd, lay.loop_lock)
    snap = held_snapshot(snap_fd, RUN)  # read through the descriptor: the file is gone
    found = restore(lay, snap, RUN)
    assert any("settings snapshot was missing" in f for f in found) and "the lock file was missing" in found
    assert (lay.state_dir.stat().st_mode & 0o777) == 0o700
    assert (lay.prompts_dir / "Builder.md").read_text() == "build it\n"
    assert held_snapshot(os.open(lay.config_snapshot, os.O_RDONLY), RUN)["settings"] == snap["settings"]
    assert not locked_by_someone(lay.loop_lock)  # before it is taken: a second loop would get in
    fd = os.open(lay.loop_lock, os.O_WRONLY | os.O_APPEND)
    take(step, fd, os.getpid())
    assert same_file(fd, lay.loop_lock) and locked_by_someone(lay.loop_lock)
    os.close(fd)


@pytest.mark.fault(74)
def test_a_new_lock_another_loop_took_first_stops_this_one(step, held):
    lay = step.layout
    shutil.rmtree(lay.state_dir)
    restore(lay, held_snapshot(held[1], RUN), RUN)
    other = hold(lay.loop_lock, lay.loop_record, "run-other")
    try:
        fd = os.open(lay.loop_lock, os.O_WRONLY | os.O_APPEND)
        with pytest.raises(StepFailed, match="two loops never work on the project at once") as failed:
            take(step, fd, os.getpid())
        assert failed.value.code == exitcodes.STATE_LOST
        os.close(fd)
    finally:
        os.close(other)


@pytest.mark.fault(76)
def test_settings_the_loop_holds_that_are_not_this_runs_stop_it(step, held):
    write_json(step.layout.config_snapshot, {"run_id": "run-planted", "settings": {}})
    planted = os.open(step.layout.config_snapshot, os.O_RDONLY)
    try:
        with pytest.raises(StepFailed, match="not this run's") as failed:
            held_snapshot(planted, RUN)
        assert failed.value.code == exitcodes.STATE_LOST
    finally:
        os.close(planted)


@pytest.mark.fault(74)
def test_the_watchers_keeper_relocks_at_its_check_and_records_the_loss(step, held, said):
    lock_fd, snap_fd = held
    step = replace(step, started=True)  # the run-phase step of a started run
    keeper = LockKeeper(step, os.getpid(), fd=lock_fd, snapshot_fd=snap_fd)
    assert keeper.armed
    keeper.check()
    assert keeper.held is None  # nothing happened: nothing done
    shutil.rmtree(step.layout.state_dir)
    keeper.check()
    assert keeper.held is not None and locked_by_someone(step.layout.loop_lock)
    assert any("state folder" in msg and "made again and locked anew" in msg for _kind, msg in said)
    (lost,) = step.events(kinds=("state_lost",))
    assert lost["by"] == "watcher" and lost["stopped"] is False
    assert step.events(kinds=("loop_start",))  # the run starts again in the new ledger
    os.close(keeper.held)


def test_a_keeper_whose_descriptor_is_not_the_lock_does_nothing(step, tmp_path):
    other = os.open(tmp_path / "elsewhere", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        keeper = LockKeeper(step, os.getpid(), fd=other)
        shutil.rmtree(step.layout.state_dir)
        keeper.check()
        assert not keeper.armed and not step.layout.state_dir.exists()
    finally:
        os.close(other)


@pytest.mark.fault(204)
def test_a_prompt_copy_taken_after_the_snapshot_was_put_back_is_put_back_by_the_next_step(step, held):
    """`rm -rf` of the state folder racing the watcher that made it again: the snapshot is back, a
    prompt copy is not. The next step reads the run's settings as ever, never 'no prompt file'."""
    from genesis.cli import Context

    (step.layout.prompts_dir / "Builder.md").unlink()
    cfg = Context(step.cfg.project, {}).run_config(RUN, started=True)
    assert (step.layout.prompts_dir / "Builder.md").read_text() == "build it\n"
    builder = [str(p.prompt_file) for p in cfg.phases if p.name == "Builder"]
    assert builder == [str(step.layout.prompts_dir / "Builder.md")]

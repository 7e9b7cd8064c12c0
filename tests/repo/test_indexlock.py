"""repo/indexlock.py: a stale index.lock is removed; a held one is waited for, then named."""

from __future__ import annotations

import subprocess

from genesis.repo.indexlock import clear_stale, holders


def test_no_lock_nothing_to_do(tmp_path):
    assert clear_stale(tmp_path / "index.lock", (str(tmp_path),)).removed == ""


def test_a_lock_nobody_holds_is_removed_and_said(tmp_path):
    lock = tmp_path / "index.lock"
    lock.write_text("")
    state = clear_stale(lock, (str(tmp_path),))
    assert not lock.exists() and "was removed" in state.removed and state.held == ""


def test_a_lock_a_live_process_holds_is_waited_for_then_named(tmp_path):
    lock = tmp_path / "index.lock"
    with lock.open("w") as fh:
        holder = subprocess.Popen(["sleep", "60"], stdout=fh)
    try:
        assert any(str(holder.pid) in who for who in holders(lock, (str(tmp_path / "elsewhere"),)))
        state = clear_stale(lock, (str(tmp_path / "elsewhere"),), wait=0.3)
        assert lock.exists() and state.removed == ""
        assert f"is held by {holder.pid} (sleep)" in state.held and "waited 0.3s" in state.held
    finally:
        holder.kill()
        holder.wait()


def test_a_git_at_work_in_the_repository_keeps_its_lock(tmp_path):
    lock = tmp_path / "index.lock"
    lock.write_text("")
    # A process named git working in the repository (it may not have the lock open yet).
    git_like = tmp_path / "git"
    git_like.symlink_to("/bin/sleep")
    worker = subprocess.Popen([str(git_like), "60"], cwd=tmp_path)
    try:
        state = clear_stale(lock, (str(tmp_path),), wait=0.2)
        assert lock.exists() and "(git in" in state.held
    finally:
        worker.kill()
        worker.wait()

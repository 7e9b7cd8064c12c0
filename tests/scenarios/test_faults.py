"""The fault suite: each fault of the reliability list injected for real (see -m fault).

Faults tested elsewhere carry the same marker: the breaker's (16, 17) in test_breaker.py,
reaping's (7, 10, 11, 13, 14, 15) in test_reaper.py, the clock's (4, 5) in
test_watchdog.py, and the hook's and the loop's (1, 2, 19-24) in tests/bats/faults.bats.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time

import psutil
import pytest
from click.testing import CliRunner
from helpers import paths
from helpers.agent import supervised
from helpers.git import git
from helpers.procs import alive, carries
from helpers.state import state_of
from helpers.waits import wait_for

from genesis.cli import cli
from genesis.config import ConfigError, resolve, snapshot
from genesis.health.heartbeat import read_heartbeat
from genesis.loop.breaker import BreakerStore
from genesis.procs.proctree import ProcId, descendants, identify, kill_all, marked
from genesis.procs.reaper import execute, markers_for, plan_reap
from genesis.store.atomicio import read_json, write_json
from genesis.store.layout import UnsafeDir, private_dir
from genesis.store.looplock import Locked, current_holder, hold

SPAWN = str(paths.SPAWN)
PATTERNS = r"pytest"


def run_agent(tmp_path, script, run_id="run-f", **kw):
    """Supervise a bash agent given one argument, its output no sign of life; returns (outcome, notes)."""
    out, notes, _ = supervised(tmp_path, script, run_id=run_id, args=("p",),
                               **{"check_interval": 0.1, "max_runtime": 60.0, "count_output": False, **kw})
    return out, notes


# --- heartbeat and watchdog -------------------------------------------------------------

@pytest.mark.fault(1)
def test_fault_1_a_symlinked_heartbeat_is_neither_followed_nor_trusted(tmp_path):
    victim = tmp_path / "victim.json"
    victim.write_text(json.dumps({"epoch": time.time() + 10}))
    script = 'ln -s "$VICTIM" "$HB"; while true; do bash "$HOOK" Bash </dev/null; sleep 0.1; done\n'
    out, _ = run_agent(tmp_path, script, env={"VICTIM": str(victim)}, max_runtime=3.0)
    # The hook never wrote through the link and the watcher never read it; the watcher, which
    # owns that folder, removed the link, and from then on the hook's beats land for real.
    assert out.status == "overtime"
    assert json.loads(victim.read_text())["epoch"] > time.time()  # untouched
    assert not (tmp_path / "hb" / "Builder.json").is_symlink()
    assert read_heartbeat(tmp_path / "hb" / "Builder.json")[0] is not None


@pytest.mark.fault(2)
def test_fault_2_a_heartbeat_directory_writable_by_others_or_not_ours_is_refused(project, tmp_path):
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    with pytest.raises(UnsafeDir, match=r"writable by others \(mode 777\); run: chmod go-w"):
        private_dir(open_dir)
    link = tmp_path / "link"
    link.symlink_to(tmp_path)
    with pytest.raises(UnsafeDir, match="not a plain directory"):
        private_dir(link)
    # An agent loosened the loop's own heartbeat folder mid-run: the next phase puts it
    # back to 0700 and says so, and the night goes on (never a refusal).
    hb_dir = state_of(project) / "heartbeats"
    hb_dir.mkdir(parents=True)
    hb_dir.chmod(0o777)
    # A step of a started run reads the settings snapshot its preflight left (none: it stops).
    write_json(state_of(project) / "config.json",
               {"run_id": "run-faults", "settings": snapshot(resolve(project, env={"GENESIS_AGENT_CMD": "true"}))})
    result = CliRunner().invoke(cli, ["--project", str(project), "--set", "GENESIS_AGENT_CMD=true",
                                      "run-phase", "--iteration", "1", "--phase", "Builder", "--run-id", "run-faults"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert f"repaired: {hb_dir} had mode 777; reset to 700" in result.output
    assert stat.S_IMODE(os.stat(hb_dir).st_mode) == 0o700
    if os.geteuid() == 0:
        theirs = tmp_path / "theirs"
        theirs.mkdir(mode=0o700)
        os.chown(theirs, 65534, 65534)
        with pytest.raises(UnsafeDir, match="belongs to uid 65534, not to you"):
            private_dir(theirs)


@pytest.mark.fault(3)
@pytest.mark.parametrize("content", [b"", b'{"epoch": 17', b"not json", b'{"epoch": NaN}', b'{"epoch": "soon"}',
                                     b'[1]', b'{"epoch": 1e999}', b'{"pad": "' + b"x" * (2 << 20) + b'"}'])
def test_fault_3_an_unusable_heartbeat_is_unknown_and_never_fresh(tmp_path, content):
    path = tmp_path / "hb.json"
    path.write_bytes(content)
    beat, why = read_heartbeat(path)
    assert beat is None and why
    script = 'printf "%s" "$CONTENT" > "$HB"; exec "$PY" -c "import time; time.sleep(600)"\n'
    out, _ = run_agent(tmp_path, script, env={"CONTENT": content[:4096].decode()})
    assert out.status == "stuck" and out.kill.survivors == ()


@pytest.mark.fault(4)
def test_fault_4_a_future_timestamp_is_clamped_warned_and_goes_stale(tmp_path):
    script = ('printf \'{"epoch": %s}\' "$(( $(date +%s) + 86400 ))" > "$HB"\n'
              'exec "$PY" -c "import time; time.sleep(600)"\n')
    out, notes = run_agent(tmp_path, script)
    assert out.status == "stuck"
    assert any("in the future; counted as now" in n for n in notes)


class JumpClock:
    """Real monotonic time; a wall clock that jumps by `by` seconds `at` seconds in."""

    def __init__(self, at: float, by: float):
        self.start, self.at, self.by = time.monotonic(), at, by

    def mono(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time() + (self.by if time.monotonic() - self.start >= self.at else 0.0)


@pytest.mark.fault(5)
@pytest.mark.parametrize("jump", [5 * 3600.0, -3600.0], ids=["suspend-or-jump-ahead", "clock-set-back"])
def test_fault_5_a_clock_jump_restarts_the_window_instead_of_killing(tmp_path, jump):
    out, notes = run_agent(tmp_path, 'exec "$PY" -c "import time; time.sleep(600)"\n', clock=JumpClock(0.6, jump))
    assert any("staleness window restarted" in n for n in notes)
    assert out.status == "stuck"
    assert out.duration >= 0.6 + 1.0  # one fresh window from the jump, not a kill at the jump


@pytest.mark.fault(6)
def test_fault_6_a_sigstopped_agent_is_detected_within_the_window_plus_a_poll(tmp_path):
    script = 'while true; do bash "$HOOK" Bash </dev/null; sleep 0.05; done\n'
    hb = tmp_path / "hb" / "Builder.json"

    def freeze():
        wait_for(lambda: read_heartbeat(hb)[0] is not None, what="a first heartbeat")
        os.killpg(read_heartbeat(hb)[0].pid, signal.SIGSTOP)  # the agent's whole group

    threading.Thread(target=freeze, daemon=True).start()
    out, _ = run_agent(tmp_path, script, stale_after=1.0, check_interval=0.2)
    assert out.status == "stuck" and out.kill.survivors == ()
    assert 1.0 < out.idle <= 1.0 + 0.2 + 1.5  # window + one poll, with room for a loaded machine


@pytest.mark.fault(8)
def test_fault_8_a_hook_writing_on_after_the_agent_died_does_not_hide_its_death(project, tmp_path):
    # The agent exits once the detached writer's first beat has landed.
    script = ('"$PY" "$SPAWN" detach "$PWD/writer.pid" bash -c \'while true; do bash "$HOOK" Bash </dev/null; '
              'sleep 0.05; done\'\nuntil [ -s "$HB" ]; do sleep 0.05; done\nexit 0\n')
    out, _ = run_agent(tmp_path, script, run_id="run-8")
    assert out.status == "exited" and out.returncode == 0
    writer = int((tmp_path / "writer.pid").read_text())
    # The agent's exit was seen at once, though the writer kept beating; the writer, re-parented
    # to the watcher and carrying the run's marker, was ended by the end-of-phase sweep.
    assert out.duration < 10 and out.swept >= 1
    assert not alive(writer)
    assert plan_reap(project, "run-8", "all", PATTERNS, ()).leftovers == ()


# --- reaping ------------------------------------------------------------------------------

@pytest.mark.fault(9)
def test_fault_9_an_orphaned_grandchild_is_reaped(project, tmp_path, procs):
    out, notes = run_agent(tmp_path, "sh -c 'echo $$ >sh.pid; sleep 999 & echo $! >orphan.pid; exit'\n",
                           run_id="run-9")
    assert out.status == "exited"
    orphan = int((tmp_path / "orphan.pid").read_text())
    # Ended when the phase ended, by the watcher's sweep; nothing left for the reaper.
    assert out.swept >= 1 and not alive(orphan)
    assert any("sleep 999" in note for note in notes), notes
    assert plan_reap(project, "run-9", "all", PATTERNS, ()).leftovers == ()
    # An orphan the sweep did not see (started outside the watcher) is still the reaper's.
    procs(["sleep", "998"], env=markers_for(project, "run-9"), start_new_session=True)
    found = plan_reap(project, "run-9", "all", PATTERNS, ()).leftovers
    assert [(lo.cmdline, lo.why) for lo in found] == [("sleep 998", "left behind by an agent of this loop")]
    assert execute(plan_reap(project, "run-9", "all", PATTERNS, ()), grace=1.0).survivors == ()


@pytest.mark.fault(11)
def test_fault_11_a_lock_record_whose_pid_was_recycled_does_not_block(project, procs):
    stranger = procs([sys.executable, SPAWN, "sleep"])
    lock, record = state_of(project) / "loop.lock", state_of(project) / "loop.json"
    record.parent.mkdir(parents=True)
    real = identify(stranger.pid)
    write_json(record, {"pid": stranger.pid, "create_time": real.create_time - 500, "run_id": "old",
                        "started_at": "x", "host": __import__("socket").gethostname()})
    fd = hold(lock, record, "new")  # the kernel's lock is free: the stale record means nothing
    try:
        assert read_json(record)["run_id"] == "new" and alive(stranger.pid)
    finally:
        os.close(fd)


@pytest.mark.fault(12)
def test_fault_12_a_zombie_that_is_not_our_child_does_not_stall_the_reaper(project, procs):
    code = ("import os, subprocess, sys, time\n"
            "child = subprocess.Popen(['true'])\n"
            "print(child.pid, flush=True)\n"
            "time.sleep(600)\n")  # never waits: the child stays a zombie of this parent
    parent = procs([sys.executable, "-c", code, "pytest"], env=markers_for(project, "run-faults"),
                   stdout=subprocess.PIPE)
    zombie_pid = int(parent.stdout.readline())
    wait_for(lambda: psutil.Process(zombie_pid).status() == psutil.STATUS_ZOMBIE, what="the zombie")
    zombie = identify(zombie_pid) or ProcId(zombie_pid, psutil.Process(zombie_pid).create_time())
    result: dict = {}
    worker = threading.Thread(target=lambda: result.update(
        report=kill_all(lambda: [zombie] + marked(markers_for(project, "run-faults")), grace=1.0)), daemon=True)
    worker.start()
    worker.join(timeout=30)
    assert not worker.is_alive(), "the reaper waited on a zombie that can never be reaped by it"
    assert result["report"].survivors == ()
    assert not alive(parent.pid)


@pytest.mark.fault(13)
def test_fault_13_pid_1_other_users_and_another_worktree_are_never_signalled(project, tmp_path, procs):
    assert kill_all(lambda: [identify(1)], grace=0.1).targets == 0
    worktree = tmp_path / "worktree"
    git(project, "worktree", "add", "-q", str(worktree))
    theirs = markers_for(worktree, "run-of-worktree")
    survivors = [(procs([sys.executable, SPAWN, "sleep", "pytest"], env=theirs), theirs)]
    if os.geteuid() == 0:  # another user's process, even one carrying our marker
        ours = markers_for(project, "run-faults")
        survivors.append((procs(["sleep", "600"], env=ours, user=65534, group=65534, cwd="/"), ours))
    for proc, markers in survivors:  # running, their markers where a reaper looks
        wait_for(lambda proc=proc, markers=markers: alive(proc.pid) and carries(proc.pid, markers))
    found = plan_reap(project, "run-faults", "all", PATTERNS, ())
    assert found.leftovers == ()
    execute(found, grace=0.5)
    assert all(alive(p.pid) for p, _ in survivors)


@pytest.mark.fault(14)
def test_fault_14_a_process_that_exits_between_listing_and_killing_is_no_error(procs):
    gone = procs([sys.executable, SPAWN, "sleep"])
    ident = identify(gone.pid)
    gone.kill()
    gone.wait()
    report = kill_all(lambda: [ident], grace=0.5)
    assert report.targets == 0 and report.survivors == ()


@pytest.mark.fault(14)
def test_fault_14_a_tree_that_keeps_forking_converges(project, procs):
    code = ("import subprocess, time\n"
            "while True:\n"
            "    subprocess.Popen(['sleep', '600'], start_new_session=True)\n"
            "    time.sleep(0.01)\n")
    forker = procs([sys.executable, "-c", code], env=markers_for(project, "run-faults"))
    wait_for(lambda: len(marked(markers_for(project, "run-faults"))) > 20, what="the tree to grow")
    root = identify(forker.pid)
    report = kill_all(lambda: descendants(root) + marked(markers_for(project, "run-faults")), grace=0.5)
    assert report.survivors == ()
    time.sleep(0.2)  # a fork in flight at the kill would show by now
    assert marked(markers_for(project, "run-faults")) == []


# --- breaker and persistence -------------------------------------------------------------

@pytest.mark.fault(17)
def test_fault_17_a_corrupt_config_file_is_kept_aside_and_the_user_told_where(project):
    conf = project / "orchestrator" / "genesis.conf"
    conf.parent.mkdir()
    conf.write_bytes(b"CB_STOP_THRESHOLD=5\n\x00\xff\xfe garbage")
    with pytest.raises(ConfigError, match=r"is corrupt \(not UTF-8 text\); it was moved aside to .*genesis\.conf"
                                          r"\.corrupt-\d{8}T\d{6}Z"):
        resolve(project, env={})
    kept = list(conf.parent.glob("genesis.conf.corrupt-*"))
    assert len(kept) == 1 and kept[0].read_bytes().startswith(b"CB_STOP_THRESHOLD=5\n\x00")
    assert not conf.exists()


@pytest.mark.fault(18)
def test_fault_18_a_crash_between_the_temp_file_and_the_rename_loses_nothing(tmp_path):
    path = tmp_path / ".circuit_breaker.json"
    write_json(path, {"state": "HALF_OPEN", "no_progress_count": 3})
    crash = ("import os, sys\n"
             "from genesis.store import atomicio\n"
             "os.replace = lambda *a: os.kill(os.getpid(), 9)  # die after fsync, before the rename\n"
             "atomicio.write_json(__import__('pathlib').Path(sys.argv[1]), {'state': 'OPEN'})\n")
    done = subprocess.run([sys.executable, "-c", crash, str(path)])
    assert done.returncode == -9
    assert read_json(path) == {"state": "HALF_OPEN", "no_progress_count": 3}
    litter = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert len(litter) == 1  # what the crash left
    state, warning = BreakerStore(path).load()
    assert state.state == "HALF_OPEN" and warning is None
    write_json(path, {"state": "CLOSED"})  # the next write sweeps it away
    assert [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
    assert read_json(path) == {"state": "CLOSED"}


@pytest.mark.fault(19)
def test_fault_19_a_lock_whose_holder_was_sigkilled_is_released_and_deleting_files_lets_no_one_in(project,
                                                                                                  procs):
    lock, record = state_of(project) / "loop.lock", state_of(project) / "loop.json"
    lock.parent.mkdir(parents=True)
    code = ("import sys, time\nfrom pathlib import Path\nfrom genesis.store.looplock import hold\n"
            "hold(Path(sys.argv[1]), Path(sys.argv[2]), 'first-run')\nprint('held', flush=True)\ntime.sleep(600)\n")
    holder = procs([sys.executable, "-c", code, str(lock), str(record)], stdout=subprocess.PIPE)
    assert holder.stdout.readline() == b"held\n"
    with pytest.raises(Locked, match=f"pid {holder.pid} \\(run first-run"):
        hold(lock, record, "second-run")
    record.unlink()  # an agent deletes what it can see: the kernel still says no
    with pytest.raises(Locked, match="whose record is gone"):
        hold(lock, record, "second-run")
    assert current_holder(lock, record) is not None
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert current_holder(lock, record) is None
    fd = hold(lock, record, "new-run")
    try:
        assert read_json(record)["pid"] == os.getpid()
    finally:
        os.close(fd)
"""Supervision the agent cannot break: a watcher of its own (a separate process, as
`genesis run-phase` is) against an agent that signals it, sheds its ownership, fills the
disk, or outlasts a pause of the watcher itself."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import paths
from helpers.agent import watcher_spec
from helpers.procs import alive, free_port, listening
from helpers.waits import wait_for

from genesis.health.heartbeat import read_heartbeat
from genesis.procs.proctree import marked
from genesis.watch import heartdir
from genesis.watch.heartdir import disk_full

SPAWN = str(paths.SPAWN)
LINUX_ONLY = pytest.mark.skipif(not hasattr(signal, "sigtimedwait"),
                                reason="only Linux tells a signal's sender (sigtimedwait)")


def spec(tmp_path: Path, script: str, run_id: str = "run-o", **kw) -> Path:
    """An agent script and the watcher's spec; returns the spec file."""
    return watcher_spec(tmp_path, script, run_id=run_id, max_runtime=60.0, **kw)


def watcher(procs, spec_file: Path, prefix: tuple[str, ...] = ()) -> subprocess.Popen:
    """The watcher in a session of its own, so that the test can stop its whole group."""
    return procs([*prefix, sys.executable, SPAWN, "supervise", str(spec_file)], start_new_session=True)


def outcome(proc: subprocess.Popen, spec_file: Path, timeout: float = 60.0) -> dict:
    assert proc.wait(timeout) == 0, f"the watcher failed (status {proc.returncode})"
    return json.loads((spec_file.parent / "outcome.json").read_text())


def first_beat(hb: Path) -> None:
    wait_for(lambda: read_heartbeat(hb)[0] is not None, what="a first heartbeat")


# --- the agent cannot end the night by signalling its watcher ---------------------------------

@LINUX_ONLY
@pytest.mark.fault(29)
def test_stop_signals_from_the_agents_own_tree_are_ignored_and_named(tmp_path, procs):
    script = ('kill -TERM "$PPID"; sleep 0.3\n'                                  # the agent itself
              'env -i /bin/sh -c \'kill -HUP "$1"; sleep 0.3\' _ "$PPID"\n'     # no marker, still its child
              '"$PY" "$SPAWN" detach "$PWD/d.pid" /bin/sh -c "kill -INT $PPID; sleep 5"; sleep 0.3\n'
              'pkill -TERM -f "spawn.py supervise $SPEC"; sleep 0.3\n'           # a short-lived pkill
              '"$HOOK" Bash </dev/null; echo "still here"\n')
    spec_file = spec(tmp_path, script, env={"SPEC": str(tmp_path / "spec.json")}, stale_after=10.0)
    out = outcome(watcher(procs, spec_file), spec_file)
    assert (out["status"], out["returncode"]) == ("exited", 0)
    assert "still here" in (tmp_path / "agent.log").read_text()
    ignored = [n for n in out["notes"] if n.startswith("signal ") and ": ignored (" in n]
    assert f"signal SIGTERM from pid {out['pid']} (bash {tmp_path}/agent.sh): ignored (a process of the " \
           f"agent's own tree may not stop its watcher)" in ignored
    assert any(n.startswith("signal SIGHUP from pid ") and "(/bin/sh -c kill -HUP" in n for n in ignored)
    assert any(n.startswith("signal SIGINT from pid ") for n in ignored)  # a detached, setsid'd one
    assert sum(n.startswith("signal SIGTERM from pid ") for n in ignored) == 2  # and pkill's
    assert marked({"GENESIS_RUN_ID": "run-o"}) == []


@pytest.mark.whole
@LINUX_ONLY
@pytest.mark.fault(29)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_stop_signal_from_outside_the_agents_tree_interrupts_and_names_its_sender(tmp_path, procs, sig):
    spec_file = spec(tmp_path, 'while true; do "$HOOK" Bash </dev/null; sleep 0.1; done\n')
    proc = watcher(procs, spec_file)
    first_beat(tmp_path / "hb" / "Builder.json")
    os.kill(proc.pid, sig)  # from this test: not the agent's
    out = outcome(proc, spec_file)
    assert out["status"] == "interrupted" and out["signum"] == sig and out["sender"] == os.getpid()
    assert out["detail"] == f"interrupted by {sig.name}"
    assert out["kill"]["targets"] >= 1 and out["kill"]["survivors"] == []
    assert not alive(out["pid"]) and marked({"GENESIS_RUN_ID": "run-o"}) == []


# --- ownership that cannot be shed ------------------------------------------------------------

@pytest.mark.fault(31)
def test_a_daemon_with_a_cleared_environment_is_ended_with_the_phase_and_a_bystander_survives(tmp_path, procs):
    ours, theirs = free_port(), free_port()
    bystander = procs([sys.executable, SPAWN, "listen", str(theirs)])  # no marker, not the watcher's
    wait_for(lambda: listening(theirs), what="the bystander to listen")
    setsid, nohup = shutil.which("setsid"), shutil.which("nohup")
    if setsid is None or nohup is None:
        pytest.skip("needs setsid and nohup")
    script = (f'env -i {setsid} {nohup} "$PY" "$SPAWN" detach "$PWD/daemon.pid" "$PY" "$SPAWN" listen {ours} '
              f'>/dev/null 2>&1 &\n'
              f'for _ in $(seq 1 200); do\n'
              f'  "$PY" -c "import socket; socket.create_connection((\'127.0.0.1\', {ours}), 1)" 2>/dev/null && break\n'
              f'  sleep 0.05\n'
              f'done\n'
              f'echo "daemon $(cat "$PWD/daemon.pid") listening"\n'
              f'if [ -r /proc/$(cat "$PWD/daemon.pid")/environ ]; then\n'
              f'  echo "markers: $(tr "\\0" "\\n" < /proc/$(cat "$PWD/daemon.pid")/environ | grep -c ^GENESIS_)"\n'
              f'fi\n'
              f'"$HOOK" Bash </dev/null\n'
              f'exit 0\n')
    spec_file = spec(tmp_path, script, run_id="run-31")
    out = outcome(watcher(procs, spec_file), spec_file)
    assert (out["status"], out["returncode"]) == ("exited", 0)  # a clean exit, and still:
    daemon = int((tmp_path / "daemon.pid").read_text())
    log = (tmp_path / "agent.log").read_text()
    assert f"daemon {daemon} listening" in log
    assert "markers: 0" in log or not Path("/proc").is_dir()  # it shed the run's marker
    assert out["swept"] >= 1
    assert not alive(daemon) and not listening(ours)
    assert any(n.startswith("ended ") and f"pid {daemon} " in n for n in out["notes"])
    assert alive(bystander.pid) and listening(theirs)


# --- a pause of the watcher is not charged to the agent ---------------------------------------

@pytest.mark.whole
@pytest.mark.fault(35)
def test_a_watcher_stopped_longer_than_the_window_does_not_kill_a_healthy_agent_on_resume(tmp_path, procs):
    # The agent beats and prints 200 kB every 0.1 s: while its watcher is stopped nobody reads
    # its pipe, so it blocks and cannot beat. Its silence is the watcher's doing.
    script = ('end=$((SECONDS + 6))\n'
              'while ((SECONDS < end)); do "$HOOK" Bash </dev/null; head -c 200000 /dev/zero | tr "\\0" x; '
              'echo; sleep 0.1; done\n'
              'echo "finished"\n')
    spec_file = spec(tmp_path, script, stale_after=1.0, check_interval=0.2)
    proc = watcher(procs, spec_file)
    first_beat(tmp_path / "hb" / "Builder.json")
    os.killpg(proc.pid, signal.SIGSTOP)  # the watcher's group; the agent is in a session of its own
    try:
        time.sleep(3.0)  # the pause under test: three staleness windows of real time
    finally:
        os.killpg(proc.pid, signal.SIGCONT)
    out = outcome(proc, spec_file)
    assert (out["status"], out["returncode"]) == ("exited", 0)
    assert any(n.startswith("the watcher itself was paused for ") and n.endswith("s; staleness window restarted")
               for n in out["notes"])
    assert (tmp_path / "agent.log").read_text().endswith("finished\n")


# --- a full disk is not the agent's fault ------------------------------------------------------

def test_disk_full_reads_free_space_and_errors(tmp_path, monkeypatch):
    assert disk_full(tmp_path) is False  # this test machine has room
    assert disk_full(tmp_path / "missing") is False

    def no_room(_path):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(heartdir.os, "statvfs", no_room)
    assert disk_full(tmp_path) is True


def _unshare() -> list[str] | None:
    tool = shutil.which("unshare")
    if tool is None:
        return None
    probe = subprocess.run([tool, "--user", "--map-root-user", "--mount", "true"], capture_output=True)
    return [tool, "--user", "--map-root-user", "--mount"] if probe.returncode == 0 else None


@pytest.mark.whole
@pytest.mark.fault(32)
def test_a_full_disk_under_the_heartbeat_is_not_taken_for_a_stuck_agent(tmp_path, procs):
    prefix = _unshare()
    if prefix is None:
        pytest.skip("cannot make a private mount namespace here (unshare --user --mount is not permitted)")
    fs = tmp_path / "full"
    fs.mkdir()
    # The agent beats, fills the heartbeat's filesystem, then goes on working for 3 windows;
    # every heartbeat it tries now fails.
    script = ('"$HOOK" Bash </dev/null\n'
              'dd if=/dev/zero of="$(dirname "$HB")/filler" bs=1k count=1000 2>/dev/null\n'
              'end=$((SECONDS + 4))\n'
              'while ((SECONDS < end)); do "$HOOK" Bash </dev/null; sleep 0.1; done\n'
              'echo "finished"\n')
    spec_file = spec(tmp_path, script, hb_dir=fs, count_output=False, stale_after=1.0, check_interval=0.2)
    mount = 'mount -t tmpfs -o size=256k,mode=700 tmpfs "$1" || exit 77; shift; exec "$@"'
    proc = procs([*prefix, "sh", "-c", mount, "_", str(fs), sys.executable, SPAWN, "supervise", str(spec_file)],
                 start_new_session=True)
    if proc.wait(60) == 77:
        pytest.skip("cannot mount a tmpfs here")
    out = outcome(proc, spec_file)
    assert (out["status"], out["returncode"]) == ("exited", 0)
    assert out["disk_full"] is True
    assert [n for n in out["notes"] if n.startswith("disk full")] == [
        f"disk full: heartbeats cannot be written ({fs}); silence is not counted while it lasts (the runtime cap "
        f"still applies)"]


@LINUX_ONLY
@pytest.mark.fault(53)
def test_a_hangup_from_the_session_leader_gone_since_still_stops_the_phase(tmp_path, procs):
    # A closed terminal: its shell passes SIGHUP on to the loop's job and exits at once. A
    # sender gone before it is looked at is taken as the agent's; the shell that leads the
    # watcher's session cannot be (the agent runs in a session of its own).
    spec_file = spec(tmp_path, 'while true; do "$HOOK" Bash </dev/null; sleep 0.1; done\n')
    go = tmp_path / "go"
    os.mkfifo(go)
    shell = procs(["/bin/sh", "-c", '"$0" "$1" supervise "$2" & echo $! > "$3"; read -r _ < "$4"; kill -HUP $!',
                   sys.executable, SPAWN, str(spec_file), str(tmp_path / "w.pid"), str(go)],
                  start_new_session=True)
    first_beat(tmp_path / "hb" / "Builder.json")
    pid = int((tmp_path / "w.pid").read_text())
    os.kill(pid, signal.SIGSTOP)  # so that the shell is gone before the watcher looks at it
    go.write_text("go\n")
    assert shell.wait(30) == 0
    os.kill(pid, signal.SIGCONT)
    wait_for(lambda: (tmp_path / "outcome.json").exists(), timeout=60, what="the watcher's outcome")
    out = json.loads((tmp_path / "outcome.json").read_text())
    assert (out["status"], out["signum"], out["sender"]) == ("interrupted", signal.SIGHUP, shell.pid)
    assert out["detail"] == "interrupted by SIGHUP"
    assert not alive(out["pid"]) and marked({"GENESIS_RUN_ID": "run-o"}) == []


@LINUX_ONLY
def test_in_a_box_that_scopes_signals_a_sender_gone_since_is_not_the_agents(tmp_path):
    from types import SimpleNamespace

    from genesis.clock import SystemClock
    from genesis.sandbox import landlock
    from genesis.sandbox.box import BUBBLEWRAP, LANDLOCK, OFF, Box
    from genesis.watch.supervisor import AgentRun, Limits, _Watcher

    gone = subprocess.Popen(["true"])
    gone.wait()
    info = SimpleNamespace(si_pid=gone.pid, si_code=0, si_signo=signal.SIGTERM)

    def ours(box: Box | None) -> bool:
        run = AgentRun(("true",), tmp_path, {}, tmp_path / "log", tmp_path / "hb.json", "run-g", box=box)
        limits = Limits(check_interval=1.0, stale_after=10.0, max_runtime=10.0, kill_grace=1.0)
        return _Watcher(run, limits, SystemClock(), lambda _: None, lambda _: None)._sender(info)[0]

    assert ours(None) and ours(Box(OFF))  # unboxed, a quick `pkill` of the agent's is gone too
    assert ours(Box(LANDLOCK, rules=landlock.Ruleset(5, b"", 0, ())))
    assert not ours(Box(BUBBLEWRAP)) and not ours(Box(LANDLOCK, rules=landlock.Ruleset(landlock.SIGNAL_SCOPING_ABI, b"", 0, ())))

"""Supervising real agent processes: normal exit, stuck, over time, stubborn trees."""

import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from helpers import paths
from helpers.agent import supervised
from helpers.procs import alive
from helpers.waits import wait_for

from genesis import exitcodes
from genesis.health.heartbeat import read_heartbeat
from genesis.procs import cgroups
from genesis.procs.proctree import marked
from genesis.watch.agentlog import tail
from genesis.watch.cmdline import prompt_problem
from genesis.watch.heartdir import clear_planted
from genesis.watch.supervisor import AgentRun, Limits, supervise

SPAWN = str(paths.SPAWN)


def agent(tmp_path, script: str, **kw):
    """The script as the Builder of run-1, given a prompt: (outcome, notes, run)."""
    return supervised(tmp_path, script, run_id="run-1", prompt="the prompt", **kw)


def test_an_agent_that_finishes_keeps_its_status_and_its_output_goes_to_the_log(tmp_path):
    out, _, run = agent(tmp_path, 'echo "working on: $1"; "$HOOK" Edit; exit 0\n')
    assert (out.status, out.returncode, out.exit_code) == ("exited", 0, exitcodes.OK)
    assert "working on: the prompt" in run.log.read_text()
    beat, _ = read_heartbeat(run.heartbeat)
    assert beat.tool == "Edit" and beat.agent == "Builder" and beat.run_id == "run-1"
    out, _, _ = agent(tmp_path, "exit 7\n")
    assert (out.status, out.returncode, out.exit_code) == ("exited", 7, exitcodes.AGENT_FAILED)


@pytest.mark.fault(10)
def test_a_silent_hang_is_stuck_and_the_whole_tree_dies_including_a_setsid_child(tmp_path):
    script = ('"$PY" "$SPAWN" detach "$PWD/daemon.pid" "$PY" "$SPAWN" sleep\n'
              '"$HOOK" Bash </dev/null\n'
              'exec "$PY" -c "import time; time.sleep(600)"\n')
    out, _, _ = agent(tmp_path, script, count_output=False)
    assert out.status == "stuck" and out.exit_code == exitcodes.AGENT_STALE
    assert 1.0 < out.idle <= 1.0 + 0.2 + 1.5  # window + one poll, with room for a loaded machine
    assert "no heartbeat" in out.detail
    daemon = int((tmp_path / "daemon.pid").read_text())
    assert out.kill.targets >= 2 and out.kill.survivors == ()
    assert not alive(daemon)
    assert marked({"GENESIS_RUN_ID": "run-1"}) == []


def test_heartbeats_keep_an_agent_alive_until_the_runtime_cap(tmp_path):
    script = 'while true; do "$HOOK" Bash </dev/null; sleep 0.1; done\n'
    out, _, _ = agent(tmp_path, script, max_runtime=2.0)
    assert out.status == "overtime" and out.exit_code == exitcodes.AGENT_OVERTIME
    assert out.duration >= 2.0
    assert marked({"GENESIS_RUN_ID": "run-1"}) == []


@pytest.mark.whole
def test_output_counts_as_life_for_agents_without_hooks(tmp_path):
    script = 'for i in $(seq 1 15); do echo "step $i"; sleep 0.2; done\n'
    out, _, _ = agent(tmp_path, script, stale_after=2.0)
    assert out.status == "exited" and out.returncode == 0


@pytest.mark.fault(7)
def test_an_agent_ignoring_sigterm_is_killed_after_the_grace_period(tmp_path):
    script = 'trap "" TERM\n"$PY" "$SPAWN" stubborn &\nwhile true; do sleep 0.1; done\n'
    out, _, _ = agent(tmp_path, script, count_output=False, kill_grace=0.5)
    assert out.status == "stuck"
    assert out.kill.killed >= 2 and out.kill.survivors == ()
    assert marked({"GENESIS_RUN_ID": "run-1"}) == []


def test_a_heartbeat_of_another_run_does_not_count(tmp_path):
    script = 'while true; do GENESIS_RUN_ID=other "$HOOK" Bash </dev/null; sleep 0.1; done\n'
    out, _, _ = agent(tmp_path, script, count_output=False)
    assert out.status == "stuck"


def test_a_missing_agent_command_is_reported_not_raised(tmp_path):
    run = AgentRun(("no-such-agent-cmd",), tmp_path, dict(os.environ), tmp_path / "a.log",
                   tmp_path / "hb.json", "r", prompt="p")
    out = supervise(run, Limits(0.2, 1.0, 5.0, 0.5))
    assert out.status == "not_started" and out.exit_code == exitcodes.AGENT_FAILED
    assert out.detail == ("cannot start 'no-such-agent-cmd': No such file or directory; install it or fix the "
                          "agent command (GENESIS_AGENT_CMD)")


# --- the prompt: an argument when it fits, else stdin, else refused with the reason -------

# The agent command is `bash agent.sh --flag`: one argument more is the prompt.
RECORDER = ('printf "%s\\n" "$#" > "$PWD/argc"\n'
            'if [ $# -gt 1 ]; then printf "%s" "${!#}" > "$PWD/got"; else cat > "$PWD/got"; fi\n'
            'ls -A "$TMPDIR" > "$PWD/tmpdir"\n')


def run_prompt(tmp_path, monkeypatch, prompt: str, prompt_stdin: bool, env_extra=None):
    """Run RECORDER with this prompt: what it got, as an argument or on stdin, lands in files."""
    temp = tmp_path / "tmp"
    temp.mkdir(exist_ok=True)
    monkeypatch.setattr(tempfile, "tempdir", str(temp))  # where the stdin copy of a prompt is made
    out, _, run = supervised(tmp_path, RECORDER, run_id="run-p", args=("--flag",),
                             env={"TMPDIR": str(temp), **(env_extra or {})}, prompt=prompt, prompt_stdin=prompt_stdin,
                             stale_after=30.0, max_runtime=60.0, kill_grace=0.5)
    return out, run


def test_a_prompt_that_fits_is_the_last_argument(tmp_path, monkeypatch):
    out, run = run_prompt(tmp_path, monkeypatch, "do 'the' $next task\n", prompt_stdin=True)
    assert out.status == "exited" and out.returncode == 0
    assert (tmp_path / "argc").read_text() == "2\n"
    assert (tmp_path / "got").read_text() == "do 'the' $next task\n"
    assert run.argv == ("bash", str(tmp_path / "agent.sh"), "--flag")  # the command itself is unchanged
    assert "agent.sh --flag <prompt, 20 bytes>" in run.log.read_text()


def test_an_empty_prompt_appends_nothing(tmp_path, monkeypatch):
    out, _ = run_prompt(tmp_path, monkeypatch, "", prompt_stdin=False)
    assert out.status == "exited" and (tmp_path / "argc").read_text() == "1\n"  # just --flag
    assert (tmp_path / "got").read_text() == ""  # and nothing on stdin either


BIG = 1 << 20  # beyond one argument on Linux (128 KiB) and all of them on macOS (1 MiB)


def test_a_prompt_too_large_for_an_argument_goes_on_stdin_to_an_agent_that_reads_it(tmp_path, monkeypatch):
    prompt = "\u00e9" + "x" * BIG + "\n-- end of prompt"
    out, run = run_prompt(tmp_path, monkeypatch, prompt, prompt_stdin=True)
    assert out.status == "exited" and out.returncode == 0
    assert (tmp_path / "argc").read_text() == "1\n"  # the command only: no prompt argument
    assert (tmp_path / "got").read_text(encoding="utf-8") == prompt
    assert (tmp_path / "tmpdir").read_text() == ""  # its temp file had no name by the time the agent ran
    assert f"<prompt, {len(prompt.encode())} bytes on stdin>" in run.log.read_text()


def test_a_prompt_too_large_for_an_argument_is_refused_with_the_real_reason(tmp_path, monkeypatch):
    out, run = run_prompt(tmp_path, monkeypatch, "x" * BIG, prompt_stdin=False)
    assert out.status == "not_started" and out.exit_code == exitcodes.AGENT_FAILED
    assert f"the prompt is {BIG} bytes" in out.detail and "install" not in out.detail
    assert "shorten the prompt file, or use an agent that reads its prompt from stdin" in out.detail
    assert not (tmp_path / "argc").exists()  # the agent never ran
    assert "not started: the prompt is" in run.log.read_text()
    assert out.detail.endswith(prompt_problem(run.argv, run.prompt, run.env, False))


def test_prompt_problem_says_whether_a_prompt_can_be_given(tmp_path):
    env = dict(os.environ)
    argv = ("agent", "-p")
    assert prompt_problem(argv, "", env, False) is None
    assert prompt_problem(argv, "a normal prompt", env, False) is None
    assert prompt_problem(argv, "x" * BIG, env, True) is None
    assert "the prompt is 1048576 bytes" in prompt_problem(argv, "x" * BIG, env, False)
    assert "NUL byte" in prompt_problem(argv, "a\0b", env, False)
    assert prompt_problem(argv, "a\0b", env, True) is None
    # Room is what the command and environment leave: a prompt that fits alone may not fit with them.
    crowded = {**env, **{f"FILL{i}": "f" * 60_000 for i in range(2 * (os.sysconf("SC_ARG_MAX") // 60_000))}}
    assert prompt_problem(argv, "small", crowded, False) is not None


def test_an_environment_too_large_to_start_a_program_is_reported_with_the_real_reason(tmp_path, monkeypatch):
    out, _ = run_prompt(tmp_path, monkeypatch, "p", prompt_stdin=True, env_extra={"HUGE_VALUE": "h" * (BIG + 1)})
    assert out.status == "not_started"
    assert "too many for the OS" in out.detail and "environment variable HUGE_VALUE" in out.detail
    assert "install" not in out.detail


# --- the log's tail at a kill: text only, never terminal control sequences ------------------

def test_the_log_tail_is_sanitised_for_the_terminal(tmp_path):
    log = tmp_path / "agent.log"
    log.write_bytes(b"".join([
        b"\x1b[1;31mred error\x1b[0m and \x1b[38;5;208mmore\x1b[m\n",
        b"\x1b]0;evil title\x07after the title\n",
        b"\x1b]8;;https://example.invalid\x1b\\a link\x1b]8;;\x1b\\ end\n",
        b"download 10%\rdownload 100%\r\n",
        b"col\tumn\x00\x07\x08\x7f end\n",
        "safe \u202eexe.txt\u202c \u2066iso\u2069 \x9b31mc1\x9bm \u00e9\u4e2d \U0001F600\n".encode(),
        b"\x1bPq#0;2;0;0;0\x1b\\sixel gone\x1b(B\x1b7\x1bc\n",
        b"L" * 5000 + b"\n",
    ]))
    lines = tail(log, width=200)
    assert lines[:7] == [
        "red error and more",
        "after the title",
        "a link end",
        "download 100%",
        "col     umn end",
        "safe exe.txt iso c1 \u00e9\u4e2d \U0001F600",
        "sixel gone",
    ]
    assert lines[7] == "L" * 199 + "\u2026"
    bidi = set("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
    assert not [c for line in lines for c in line if ord(c) < 0x20 or 0x7f <= ord(c) <= 0x9f or c in bidi]


def test_the_tail_of_a_large_log_drops_the_cut_line_and_keeps_the_last_lines(tmp_path):
    log = tmp_path / "agent.log"
    log.write_bytes(b"\x1b[31m" + b"z" * 20000 + b"\n" + b"".join(b"line %d\n" % i for i in range(40)))
    assert tail(log, lines=3, max_bytes=4096) == ["line 37", "line 38", "line 39"]
    assert tail(log, lines=100, max_bytes=4096)[0].startswith("line ")
    assert tail(tmp_path / "missing.log") == []


CLAUDE = paths.TOOLS / "claude" / "node_modules" / ".bin" / "claude"


@pytest.mark.claude
def test_claude_p_reads_a_prompt_too_large_for_an_argument_from_stdin(tmp_path):
    if not CLAUDE.exists():
        pytest.skip("real Claude Code is not installed (./run-tests.sh installs it)")
    from e2e.stub_api import StubAPI

    api = StubAPI().start()
    try:
        env = {**os.environ, "ANTHROPIC_BASE_URL": api.url, "ANTHROPIC_API_KEY": "sk-ant-stub",
               "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
               "DISABLE_AUTOUPDATER": "1", "DISABLE_ERROR_REPORTING": "1"}
        if os.geteuid() == 0:
            env["IS_SANDBOX"] = "1"  # Claude Code refuses to skip permissions as root otherwise
        prompt = "Reply with OK.\n" + "context line\n" * (BIG // 13) + "LAST LINE OF THE PROMPT"
        run = AgentRun((str(CLAUDE), "-p", "--dangerously-skip-permissions"), tmp_path, env,
                       tmp_path / "claude.log", tmp_path / "hb.json", "run-c", prompt=prompt, prompt_stdin=True)
        out = supervise(run, Limits(0.5, 60.0, 90.0, 2.0))
    finally:
        api.shutdown()
    assert out.status == "exited" and out.returncode == 0, run.log.read_text()[-2000:]
    assert "on stdin>" in run.log.read_text()
    user = [m["content"] for r in api.requests if r["path"].startswith("/v1/messages")
            for m in r["body"].get("messages", []) if m.get("role") == "user"]
    texts = [b.get("text") for c in user for b in ([{"text": c}] if isinstance(c, str) else c)
             if isinstance(b, dict)]
    assert prompt in texts  # the whole prompt, read from stdin, went to the model


# --- the agent's output goes through the watcher, with a cap ---------------------------------

CHUNK = 1 << 16
CHUNKS = 3200  # 200 MiB


def stream(start: int, length: int) -> bytes:
    """Bytes [start, start+length) of what BURST writes: chunk i is its number, repeated."""
    data = bytearray()
    first = start // CHUNK
    for i in range(first, (start + length - 1) // CHUNK + 1):
        data += b"%08d" % i * (CHUNK // 8) if i < CHUNKS else b""
    end = b"\nTHE END\n"
    data += end
    return bytes(data[start - first * CHUNK:start - first * CHUNK + length])


BURST = ('"$PY" -c \'import sys; w = sys.stdout.buffer.write\n'
         f'for i in range({CHUNKS}): w(b"%08d" % i * {CHUNK // 8})\n'
         'w(b"\\nTHE END\\n")\'\n')
MARKER = re.compile(rb"\n=== genesis: (\d+) bytes of output dropped here \(log cap 50 MiB\) ===\n")


@pytest.mark.fault(33)
def test_a_200_mb_burst_leaves_a_log_within_the_cap_with_the_real_head_and_tail(tmp_path):
    out, _, run = agent(tmp_path, BURST, stale_after=30.0)
    assert out.status == "exited" and out.returncode == 0
    cap, total = 50 << 20, CHUNKS * CHUNK + len(b"\nTHE END\n")
    log = run.log.read_bytes()
    assert len(log) <= cap
    header_end = log.index(b"\n") + 1
    assert log[:header_end].startswith(b"=== genesis: ") and b"starting: bash" in log[:header_end]
    found = MARKER.search(log)
    assert found, "the log says what was dropped"
    head, tail_bytes = log[header_end:found.start()], log[found.end():]
    assert header_end + len(head) == cap // 2  # the first half of the cap
    assert cap // 4 <= len(tail_bytes) <= cap // 2
    assert head == stream(0, len(head))  # the real first bytes...
    assert tail_bytes == stream(total - len(tail_bytes), len(tail_bytes))  # ...and the real last ones
    assert len(head) + int(found.group(1)) + len(tail_bytes) == total  # and exactly what is missing
    assert tail(run.log)[-1] == "THE END"


@pytest.mark.fault(33)
def test_the_log_folder_deleted_mid_phase_comes_back_whole(tmp_path):
    script = ('echo "before the wipe"\n'
              'rm -rf "$LOGDIR"\n'
              'echo "after the wipe"\n'
              'for _ in $(seq 1 100); do [ -f "$LOGDIR/agent.log" ] && break; sleep 0.05; done\n'
              '[ -f "$LOGDIR/agent.log" ] && echo "the log is back mid-phase"\n')
    logdir = tmp_path / "logs" / "run-1"
    out, notes, run = supervised(tmp_path, script, run_id="run-1", log=logdir / "agent.log",
                                 env={"LOGDIR": str(logdir)}, check_interval=0.1, stale_after=30.0)
    assert out.status == "exited" and out.returncode == 0
    text = run.log.read_text()
    assert text.startswith("=== genesis: ") and "starting: bash" in text.splitlines()[0]
    assert text.splitlines()[1:] == ["before the wipe", "after the wipe", "the log is back mid-phase"]
    assert any("was deleted or replaced mid-phase; put back with the" in n for n in notes)


def test_a_log_cap_too_small_to_hold_a_head_and_a_tail_is_refused_with_the_minimum():
    with pytest.raises(ValueError, match="the log cap must be at least 65536 bytes, not 1000"):
        Limits(0.2, 1.0, 5.0, 0.5, log_max_bytes=1000)
    assert Limits(0.2, 1.0, 5.0, 0.5).log_max_bytes == 50 << 20


def test_a_small_cap_keeps_head_and_newest_tail_across_many_compactions(tmp_path):
    script = '"$PY" -c \'import sys\nfor i in range(200000): sys.stdout.write("line %06d\\n" % i)\'\n'
    out, _, run = agent(tmp_path, script, log_max_bytes=64 << 10)
    assert out.status == "exited" and out.returncode == 0
    log = run.log.read_bytes()
    assert len(log) <= 64 << 10
    lines = log.decode().splitlines()
    assert lines[1:3] == ["line 000000", "line 000001"] and lines[-1] == "line 199999"
    found = re.search(r"=== genesis: (\d+) bytes of output dropped here \(log cap 0.0625 MiB\) ===", log.decode())
    assert found and int(found.group(1)) > 200000 * 12 - (64 << 10)


def test_output_written_to_a_log_path_holding_a_symlink_replaces_the_link_not_its_target(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched\n")
    (tmp_path / "agent.log").symlink_to(victim)
    out, _, run = agent(tmp_path, 'echo "to the log"\n')
    assert out.status == "exited"
    assert victim.read_text() == "untouched\n"
    assert not run.log.is_symlink() and "to the log" in run.log.read_text()


# --- output alone is a sign of life only up to a bound ---------------------------------------

@pytest.mark.fault(34)
def test_a_hung_agent_with_a_chatty_child_is_stuck_once_output_alone_no_longer_counts(tmp_path):
    script = ('"$HOOK" Bash </dev/null\n'
              '(while true; do echo "tick"; sleep 0.3; done) &\n'
              'exec "$PY" -c "import time; time.sleep(600)"\n')
    out, _, _ = agent(tmp_path, script, stale_after=1.0, check_interval=0.2)
    assert out.status == "stuck"
    assert "its output alone no longer counts" in out.detail
    assert out.duration < 2 * 1.0 + 0.2 + 3.0  # two windows and a check, room for a loaded machine
    assert out.kill.survivors == () and marked({"GENESIS_RUN_ID": "run-1"}) == []


# --- tampering with the heartbeat path -------------------------------------------------------

PLANT = {
    "symlink": 'ln -s "$VICTIM" "$HB"',
    "directory": 'mkdir "$HB" && ln -s "$VICTIM" "$HB/inside" && echo x > "$HB/file"',
    "FIFO": 'mkfifo "$HB"',
}


@pytest.mark.whole
@pytest.mark.fault(30)
@pytest.mark.parametrize("kind", PLANT)
def test_something_planted_at_the_heartbeat_path_is_removed_and_named_at_the_kill(tmp_path, kind):
    victim = tmp_path / "victim.json"
    victim.write_text('{"epoch": 1}')
    script = PLANT[kind] + '\nexec "$PY" -c "import time; time.sleep(600)"\n'
    out, notes, run = agent(tmp_path, script, env={"VICTIM": str(victim)}, count_output=False)
    article = "a FIFO" if kind == "FIFO" else f"a {kind}"
    assert out.status == "stuck"
    assert out.detail.endswith(f"; {article} was planted at the heartbeat path and removed")
    assert f"{article} was planted at the heartbeat path and removed" in notes
    assert not os.path.lexists(run.heartbeat)
    assert victim.read_text() == '{"epoch": 1}'  # never followed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["agent.log", "agent.sh", "hb", "home", "victim.json"]


def test_a_regular_heartbeat_file_is_left_alone(tmp_path):
    hb = tmp_path / "hb.json"
    assert clear_planted(hb) is None
    hb.write_text("{}")
    assert clear_planted(hb) is None and hb.read_text() == "{}"
    assert clear_planted(tmp_path / "no-such-dir" / "hb.json") is None


# --- the agent's own cgroup ------------------------------------------------------------------

def test_where_cgroup_v2_is_writable_the_agent_runs_in_a_cgroup_of_its_own_removed_after(tmp_path):
    probe, why = cgroups.create("probe")
    if probe is None:
        pytest.skip(f"no writable cgroup v2 here: {why}")
    probe.remove()
    out, _, _ = agent(tmp_path, 'cat /proc/self/cgroup > "$PWD/cgroup.txt"\n')
    assert out.status == "exited" and out.returncode == 0
    line = next(l for l in (tmp_path / "cgroup.txt").read_text().splitlines() if l.startswith("0::"))
    mine = cgroups.own_cgroup()
    assert line[3:].startswith(mine[1].rstrip("/") + "/genesis-")  # a child of the watcher's
    assert not (mine[0] / line[3:].rsplit("/", 1)[1]).exists()  # removed at the end


def test_a_cgroup_kill_ends_a_forking_tree_and_the_group_is_removed(tmp_path, procs):
    group, why = cgroups.create("kill-test")
    if group is None:
        pytest.skip(f"no writable cgroup v2 here: {why}")
    try:
        top = subprocess.Popen([sys.executable, SPAWN, "tree", "2", "3"], preexec_fn=group.join,
                               stdin=subprocess.DEVNULL, start_new_session=True)
        wait_for(lambda: len(group.pids()) == 13, what="the tree to grow in its cgroup")
        assert group.holds(top.pid)
        assert group.kill() == 13
        top.wait(5)
        assert group.pids() == []
    finally:
        assert group.remove()
    assert not group.path.exists()


def test_without_cgroup_kill_every_pid_in_the_group_is_killed(tmp_path, monkeypatch):
    group, why = cgroups.create("no-kill-file")
    if group is None:
        pytest.skip(f"no writable cgroup v2 here: {why}")
    real_exists = Path.exists
    monkeypatch.setattr(Path, "exists", lambda p: False if p.name == "cgroup.kill" else real_exists(p))
    try:
        top = subprocess.Popen([sys.executable, SPAWN, "tree", "1", "3"], preexec_fn=group.join,
                               stdin=subprocess.DEVNULL)
        wait_for(lambda: len(group.pids()) == 4, what="the tree to grow in its cgroup")
        assert group.kill() == 4 and group.pids() == []
        top.wait(5)
    finally:
        assert group.remove()


def test_no_cgroup_v2_is_no_error_just_a_debug_note(tmp_path, monkeypatch):
    monkeypatch.setattr(cgroups, "own_cgroup", lambda: (None, "", "no cgroup v2 hierarchy (cgroup v1 only)"))
    debug: list[str] = []
    out, _, _ = supervised(tmp_path, "echo fine\n", run_id="run-d", debug=debug.append, stale_after=5.0,
                           max_runtime=10.0, kill_grace=0.5)
    assert out.status == "exited" and out.returncode == 0
    assert debug == ["the agent runs without a cgroup of its own: no cgroup v2 hierarchy (cgroup v1 only)"]


# --- where the platform cannot name a signal's sender (macOS): as before ----------------------

def test_without_sigtimedwait_the_watcher_sleeps_on_the_agents_exit_as_before(tmp_path, monkeypatch):
    monkeypatch.delattr(signal, "sigtimedwait", raising=False)
    out, _, _ = agent(tmp_path, '"$HOOK" Edit </dev/null; echo done\n')
    assert out.status == "exited" and out.returncode == 0
    out, _, _ = agent(tmp_path, 'exec "$PY" -c "import time; time.sleep(600)"\n', count_output=False)
    assert out.status == "stuck" and out.kill.survivors == ()


def test_groups_the_agent_made_below_its_own_are_killed_and_removed_too(tmp_path):
    group, why = cgroups.create("nested")
    if group is None:
        pytest.skip(f"no writable cgroup v2 here: {why}")
    try:
        below = group.path / "made-by-the-agent" / "deeper"
        below.mkdir(parents=True)
        top = subprocess.Popen([sys.executable, SPAWN, "sleep"], preexec_fn=group.join, stdin=subprocess.DEVNULL)
        wait_for(lambda: group.holds(top.pid), what="the sleeper in its group")
        (below / "cgroup.procs").write_text(str(top.pid))  # it moves itself down, out of the group's own list
        assert (group.path / "cgroup.procs").read_text() == "" and group.holds(top.pid)
        assert group.pids() == [top.pid]
        assert group.kill() == 1
        top.wait(5)
    finally:
        assert group.remove()
    assert not group.path.exists()

"""Supervising real agent processes: normal exit, stuck, over time, stubborn trees."""

import os
import sys
import tempfile
from pathlib import Path

import pytest

from genesis import exitcodes
from genesis.heartbeat import hook_script, read_heartbeat
from genesis.proctree import marked
from genesis.supervisor import AgentRun, Limits, prompt_problem, supervise, tail

from conftest import alive

SPAWN = str(Path(__file__).parent / "helpers" / "spawn.py")


def agent(tmp_path, script: str, run_id="run-1", **limits) -> tuple:
    (tmp_path / "agent.sh").write_text(script)
    hb = tmp_path / "hb" / "Builder.json"
    hb.parent.mkdir(mode=0o700, exist_ok=True)
    env = {**os.environ, "GENESIS_RUN_ID": run_id, "GENESIS_HEARTBEAT_FILE": str(hb),
           "GENESIS_AGENT": "Builder", "HOOK": str(hook_script()), "SPAWN": SPAWN, "PY": sys.executable}
    run = AgentRun(("bash", str(tmp_path / "agent.sh")), tmp_path, env, tmp_path / "agent.log", hb, run_id,
                   prompt="the prompt")
    lim = Limits(**{"check_interval": 0.2, "stale_after": 1.0, "max_runtime": 30.0, "kill_grace": 1.0,
                    "count_output": True, **limits})
    notes: list[str] = []
    return supervise(run, lim, note=notes.append), notes, run


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
    assert out.status == "stale" and out.exit_code == exitcodes.AGENT_STALE
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


def test_output_counts_as_life_for_agents_without_hooks(tmp_path):
    script = 'for i in $(seq 1 15); do echo "step $i"; sleep 0.2; done\n'
    out, _, _ = agent(tmp_path, script, stale_after=2.0)
    assert out.status == "exited" and out.returncode == 0


@pytest.mark.fault(7)
def test_an_agent_ignoring_sigterm_is_killed_after_the_grace_period(tmp_path):
    script = 'trap "" TERM\n"$PY" "$SPAWN" stubborn &\nwhile true; do sleep 0.1; done\n'
    out, _, _ = agent(tmp_path, script, count_output=False, kill_grace=0.5)
    assert out.status == "stale"
    assert out.kill.killed >= 2 and out.kill.survivors == ()
    assert marked({"GENESIS_RUN_ID": "run-1"}) == []


def test_a_heartbeat_of_another_run_does_not_count(tmp_path):
    script = 'while true; do GENESIS_RUN_ID=other "$HOOK" Bash </dev/null; sleep 0.1; done\n'
    out, _, _ = agent(tmp_path, script, count_output=False)
    assert out.status == "stale"


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
    (tmp_path / "agent.sh").write_text(RECORDER)
    env = {**os.environ, "TMPDIR": str(temp), **(env_extra or {})}
    run = AgentRun(("bash", str(tmp_path / "agent.sh"), "--flag"), tmp_path, env, tmp_path / "agent.log",
                   tmp_path / "hb.json", "run-p", prompt=prompt, prompt_stdin=prompt_stdin)
    return supervise(run, Limits(0.2, 30.0, 60.0, 0.5)), run


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


CLAUDE = Path(__file__).resolve().parents[1] / ".tools" / "claude" / "node_modules" / ".bin" / "claude"


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

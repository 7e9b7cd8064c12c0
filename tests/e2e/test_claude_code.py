"""The real Claude Code CLI through the real loop, offline against a stub Messages API.

The test command installs the pinned `@anthropic-ai/claude-code` into .tools/; where it
could not (no Node, no npm registry), every test here is skipped with that reason.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from e2e.harness import LOOP_ENV, TOOL_SHELL, Loop, as_agent, genesis, gone
from e2e.stub_api import StubAPI
from helpers.git import git
from helpers.procs import alive, free_port, listening
from helpers.state import events_of
from helpers.waits import wait_for

from genesis.config import default_layout
from genesis.sandbox.detect import probe
from genesis.web.metrics import ProjectSource, metrics

pytestmark = pytest.mark.claude


@pytest.fixture
def stub():
    api = StubAPI().start()
    yield api
    api.shutdown()


@pytest.fixture
def e2e(claude, stub, project, hermetic, tmp_path):
    """A project with the hook installed the user's way, and the loop's environment."""
    as_agent(project)
    done = genesis("--project", str(project), "hook", "install")
    assert str(hermetic / ".claude" / "settings.json") in done.stdout
    env = {**os.environ, **LOOP_ENV,
           "ANTHROPIC_BASE_URL": stub.url, "ANTHROPIC_API_KEY": "sk-ant-stub",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
           "DISABLE_AUTOUPDATER": "1", "DISABLE_ERROR_REPORTING": "1",
           "GENESIS_AGENT_CMD": f"{claude} -p --output-format stream-json --verbose --dangerously-skip-permissions"}
    if os.geteuid() == 0:
        env["IS_SANDBOX"] = "1"  # Claude Code refuses to skip permissions as root otherwise
    # The Builder's scenario is each test's point: the other phases run only where a test says
    # (a night of the shipped phases is test_night.py's and test_acceptance.py's).
    env["GENESIS_PHASES"] = "Builder"
    return Loop(project, env, tmp_path)


def with_planner(loop: Loop, scenario: str = "quick", **params) -> None:
    """The Planner runs after the Builder, as it does by default in a project without TASKS.md."""
    loop.env["GENESIS_PHASES"] = "Builder Planner"
    loop.phase("Planner", scenario, **params)


def session_of(log: Path) -> str:
    """The session id in the raw stream-json kept beside a phase's transcript (.log -> .jsonl)."""
    raw = log.with_suffix(".jsonl")
    for line in raw.read_text().splitlines():
        if line.startswith("{"):
            event = json.loads(line)
            if event.get("type") == "system" and event.get("subtype") == "init":
                return event["session_id"]
    raise AssertionError(f"no init event in {raw}")


def test_progress_every_tool_call_beats_and_the_breaker_stays_closed(e2e):
    e2e.phase("Builder", "progress")
    done, beats = e2e.run("--max-iterations", "1", watch="Builder", trace=True)
    assert done.returncode == 0, done.stdout
    assert "Builder: finished" in done.stdout
    project = e2e.project
    assert (project / "hello.txt").read_text() == "hello from claude\n"
    assert (project / "notes.md").read_text() == "# Notes\n\nWritten by the agent.\n"
    assert "agent: hello and notes" in git(project, "log", "--format=%s")
    run_id = events_of(project)[0]["run_id"]
    log = project / "orchestrator" / "logs" / run_id / "iter-0001-Builder.log"
    session = session_of(log)
    # The transcript beside the raw stream is readable: the session and the final text, no JSON.
    transcript = log.read_text()
    assert f"session {session}" in transcript and "Done: wrote hello.txt and notes.md" in transcript
    assert not [line for line in transcript.splitlines() if line.startswith("{")]
    post = {(c.event, c.tool) for c in e2e.tool_calls("Builder")}   # every call the hook saw, not a sample
    assert {("PostToolUse", "Bash"), ("PostToolUse", "Write"), ("PostToolUseFailure", "Bash")} <= post
    assert all(b["session_id"] == session and b["agent"] == "Builder" for b in beats)
    assert {b["run_id"] for b in beats} == {run_id}
    ended = [e for e in events_of(project) if e["event"] == "phase_end"]
    # CLAUDE_PID: the agent the loop started, as its box numbers it; the phase's pid is its host's.
    assert {b["pid"] for b in beats} == {ended[0]["box_pid"]} and e2e.agent(ended[0]).pid == ended[0]["pid"]
    breaker = e2e.breaker()
    assert breaker["state"] == "CLOSED" and breaker["last_progress_iteration"] == 1
    assert e2e.leftovers() == []
    # The command names no model; Claude Code's own records name the one it used, and the
    # dashboard's metrics count the runs by it, never by `default`.
    used = {e.get("model_used") for e in ended}
    assert len(used) == 1 and str(next(iter(used))).startswith("claude-"), ended
    layout = default_layout(project)
    by_model = metrics([ProjectSource(project, project.name, layout, None)], time.time())["by"]["model"]
    assert [r["key"] for r in by_model] == list(used)


@pytest.mark.fault(46)
def test_a_hung_bash_call_is_stuck_at_the_tool_silent_window_and_claude_and_the_tool_session_are_killed(e2e):
    # The tool-silent window (3 s) ends it long before the general one (120 s); the stale
    # window's own stuck is tests/e2e/test_morning.py's (an API gone silent).
    e2e.phase("Builder", "hang")
    with_planner(e2e)
    e2e.env.update(HEARTBEAT_STALE="120s", TOOL_SILENT="3s")
    done, beats = e2e.run("--max-iterations", "1", watch="Builder", trace=True)
    assert done.returncode == 0, done.stdout
    assert "Builder: stuck: inside Bash" in done.stdout and "tool-silent window 3s" in done.stdout
    assert "Planner: finished" in done.stdout
    assert beats[-1]["event"] == "PreToolUse" and beats[-1]["tool"] == "Bash"
    tool_shell = int((e2e.project / "tool-shell.pid").read_text())
    ended = [e for e in events_of(e2e.project) if e["event"] == "phase_end"]
    # Stuck, retried once (the default), stuck again: failed for the iteration; the loop went on.
    assert [(e["phase"], e["status"], e["window"], e["attempt"]) for e in ended] == [
        ("Builder", "stuck", "tool_silent", 0), ("Builder", "stuck", "tool_silent", 1), ("Planner", "exited", None, 0)]
    claude, shells = e2e.agent(ended[1]), e2e.told(tool_shell, *TOOL_SHELL)  # pids in the box: the host's
    assert beats[-1]["pid"] == ended[1]["box_pid"] and tool_shell != ended[1]["box_pid"]
    assert shells and all(gone(s) for s in shells) and gone(claude)
    assert e2e.leftovers() == []


@pytest.mark.fault(45)
def test_a_busy_build_step_silent_for_three_windows_is_not_killed(e2e):
    e2e.phase("Builder", "build", seconds=10)
    e2e.env.update(HEARTBEAT_STALE="3s", TOOL_SILENT="2s")
    done, _ = e2e.run("--max-iterations", "1")
    assert done.returncode == 0, done.stdout
    assert "Builder: finished" in done.stdout and "Builder: stuck" not in done.stdout
    assert "inside Bash" in done.stdout and "silent but busy" in done.stdout
    ended = [e for e in events_of(e2e.project) if e["event"] == "phase_end"]
    assert (ended[0]["phase"], ended[0]["status"], ended[0]["duration"] > 9) == ("Builder", "exited", True)
    assert (e2e.project / "build.txt").read_text() == "built\n"


def test_a_server_left_on_a_port_is_reaped_and_an_unrelated_one_survives(e2e, procs):
    port, theirs = free_port(), free_port()
    bystander = procs([sys.executable, "-m", "http.server", str(theirs), "--bind", "127.0.0.1"],
                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: listening(theirs), what="the unrelated server")
    e2e.phase("Builder", "server", port=port)
    e2e.env["REAP_PORTS"] = f"{port} {theirs}"
    # The sweep's own work: in a box the server dies with the box before the sweep (tests/scenarios/test_box_faults.py).
    e2e.env["GENESIS_SANDBOX"] = "off"
    done, _ = e2e.run("--max-iterations", "1")
    assert done.returncode == 0, done.stdout
    server = int((e2e.project / "server.pid").read_text())
    # Ended with the phase by the watcher: it carries the run's marker.
    assert re.search(rf"ended 1 process\(es\) the agent left behind: pid {server} '\S*python3 -m http\.server "
                     rf"{port} --bind 127\.0\.0\.1' \(carries this run's marker\)", done.stdout), done.stdout
    assert f"port {theirs} is held by pid {bystander.pid}" in done.stdout
    assert not alive(server) and not listening(port)
    assert alive(bystander.pid) and listening(theirs)
    assert e2e.leftovers() == []


@pytest.mark.skipif(probe().bwrap is None, reason="no bubblewrap here: the private HOME and the allow-listed "
                                                   "network are bubblewrap's")
def test_in_the_box_claude_has_a_private_home_none_of_the_users_secrets_and_only_its_api_through_the_proxy(
        e2e, hermetic, procs):
    """One night in the default box, a phase for each side of it. The Builder looks for the
    user's secrets: the user's ssh key and a running ssh-agent holding it, a cloud secret and a
    token in the environment; the real Claude Code still runs (its own folder and key kept), its
    tools see none. The Planner looks outside: the stub API on the host's loopback is allowed by
    being the configured base URL; a host not allowed and another service on the host's loopback
    are refused and recorded; a dev server on the box's own loopback answers."""
    (hermetic / ".claude.json").write_text('{"numStartups": 41}\n')  # a user's: the CLI keeps updating it
    ssh = hermetic / ".ssh"
    ssh.mkdir()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(ssh / "id_rsa")], check=True)
    hostport, devport = free_port(), free_port()
    host = procs([sys.executable, "-m", "http.server", str(hostport), "--bind", "127.0.0.1"], cwd=str(e2e.tmp))
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(ssh / "agent.sock")], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: (ssh / "agent.sock").exists(), timeout=10)
        wait_for(lambda: listening(hostport), what="the host's service")
        e2e.env.update({"SSH_AUTH_SOCK": str(ssh / "agent.sock"), "AWS_SECRET_ACCESS_KEY": "aws-secret-value",
                        "GH_TOKEN": "ghp_abcdefgh12345678"})
        subprocess.run(["ssh-add", str(ssh / "id_rsa")], env=e2e.env, check=True, capture_output=True)
        e2e.phase("Builder", "probe")
        with_planner(e2e, "network", hostport=hostport, devport=devport)
        done, _ = e2e.run("--max-iterations", "1")
    finally:
        agent.terminate()
        agent.wait(10)
    assert done.returncode == 0, done.stdout
    assert "Builder: finished" in done.stdout and "Planner: finished" in done.stdout
    assert "HOME is private" in done.stdout and "out only through Genesis's proxy" in done.stdout
    started = [e for e in events_of(e2e.project) if e["event"] == "sandbox"]
    assert started[0]["box"] == "bubblewrap" and started[0]["private_home"] == str(hermetic.resolve())
    # The user's secrets: none seen.
    seen = (e2e.project / "probe.txt").read_text()
    listed = seen.split("aws=")[0].split()
    assert ".claude" in listed and ".ssh" not in listed, seen
    assert "aws= gh=\n" in seen and "ssh-add=2" in seen and "PRIVATE KEY" not in seen, seen
    state = json.loads((hermetic / ".claude.json").read_text())  # its state file, written through the bind
    assert state["numStartups"] == 41 and "firstStartTime" in state, state
    # The network: only the API, through the proxy.
    seen = (e2e.project / "network.txt").read_text().split()
    assert seen == ["named=403", "host=000", "via_proxy=403", "dev=200"], seen
    refused = [e for e in events_of(e2e.project) if e["event"] == "network_refused"]
    assert [(e["phase"], e["refused"]) for e in refused] == [
        ("Planner", [["127.0.0.1", hostport, 1], ["not-allowed.example", 80, 1]])]
    assert "network: 2 connections refused" in done.stdout
    assert started[0]["network"] == "allowlist" and f"127.0.0.1:{e2e.env['ANTHROPIC_BASE_URL'].rsplit(':', 1)[1]}" \
        in started[0]["allowed"]
    status = genesis("--project", str(e2e.project), "status", env=e2e.env, check=False)  # not running: exit 5
    assert "2 connections refused (127.0.0.1:" in status.stdout, status.stdout
    assert host.poll() is None

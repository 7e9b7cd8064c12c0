"""The loop as a user runs it, for the end-to-end suites of every real agent CLI.

A suite builds an environment (its CLI's command and the stub API it talks to), names a
stub scenario in each phase's prompt, runs `start-multi-agent-loop.sh` to its end, and
reads what the loop left: its output, the heartbeats it saw, the ledger and leftovers.
The Claude Code suites' nights (acceptance, night, morning) share the helpers at the end.
Their fixtures are in conftest.py.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from e2e.stub_api import StubAPI
from helpers import paths
from helpers.git import git
from helpers.hermetic import isolated_env
from helpers.procs import alive
from helpers.state import events_of, state_of

from genesis.health.toollog import ToolCall, read_tail, tool_log_path
from genesis.procs.nspid import ns_pids
from genesis.procs.proctree import ProcId, command_line, marked

ROOT = paths.ROOT
TOOLS = paths.TOOLS
LOOP = paths.LOOP
GENESIS = [sys.executable, "-m", "genesis"]
CLAUDE = TOOLS / "claude" / "node_modules" / ".bin" / "claude"

TOOL_SHELL = ("tool-shell.pid", "time.sleep(600)")  # the hang scenario's command (stub_api.py, stubs/base.py)
# What every e2e loop shares: quick checks and windows so that a hang shows in seconds.
LOOP_ENV = {"GENESIS_BIN": str(Path(sys.executable).parent / "genesis"),
            "HEARTBEAT_CHECK_INTERVAL": "0.5", "HEARTBEAT_STALE": "6s", "AGENT_MAX_RUNTIME": "120s",
            "KILL_GRACE_SECONDS": "3", "ITERATION_PAUSE_SECONDS": "0", "PHASE_RETRY_DELAY_SECONDS": "0",
            "REAP_PORTS": "", "NO_COLOR": "1"}


def installed(binary: Path, log: Path, what: str, version_args: tuple[str, ...] = ("--version",),
              env: dict[str, str] | None = None) -> Path:
    """The CLI the test command installed into .tools/, or skip the suite with the reason.

    Its version check runs in a throwaway HOME, with none of the caller's CLI settings and
    `env` added: a module's fixture runs before the autouse `hermetic` of its first test, and
    a CLI writes into its config folder even for --version."""
    if not binary.exists():
        why = log.read_text().strip()[-300:] if log.exists() else "run ./run-tests.sh to install it"
        pytest.skip(f"real {what} is not installed, e2e suite skipped: {why}")
    with tempfile.TemporaryDirectory(prefix="genesis-e2e-home-", ignore_cleanup_errors=True) as home:
        done = subprocess.run([str(binary), *version_args], capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL, env=isolated_env(Path(home), **(env or {})))
    if done.returncode != 0:
        pytest.skip(f"real {what} does not run here, e2e suite skipped: {(done.stderr or done.stdout).strip()[-300:]}")
    return binary


def as_agent(project: Path) -> None:
    """Commits the agent makes in the project carry the agent's name."""
    git(project, "config", "user.name", "Agent")
    git(project, "config", "user.email", "agent@example.invalid")


def genesis(*args: str, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(GENESIS + list(args), capture_output=True, text=True, check=check, env=env,
                          stdin=subprocess.DEVNULL, timeout=120)


class Loop:
    """One project's loop: its environment, its phases' scenarios, and what it left."""

    def __init__(self, project: Path, env: dict, tmp: Path):
        self.project, self.env, self.tmp = project, env, tmp
        self.traced: dict[ProcId, tuple[int, set[str]]] = {}  # run(trace=True): (pid it tells, its command lines)

    def phase(self, name: str, scenario: str, **params) -> None:
        """The phase's prompt names a stub scenario; phases and triggers stay the defaults (in
        a project without TASKS.md: Builder and Planner run, the Criticizer is skipped)."""
        prompt = self.tmp / f"{name}.md"
        extra = " ".join(f"{k}={v}" for k, v in params.items())
        prompt.write_text(f"SCENARIO: {scenario}\nCWD={self.project}\nPARAMS: {extra}\n")
        self.env[f"PHASE_{name}_PROMPT"] = str(prompt)

    def run(self, *args: str, watch: str | tuple[str, ...] | None = None,
            trace: bool = False) -> tuple[subprocess.CompletedProcess, list[dict]]:
        """Run the loop to its end; with watch=PHASE (or several), collect every heartbeat they
        write (each names its phase as "agent"); with trace, every process carrying the
        project's marker (see told)."""
        seen: list[dict] = []
        stop = threading.Event()
        phases = (watch,) if isinstance(watch, str) else watch or ()
        hbs = [self.heartbeat_file(phase) for phase in phases]

        def poll():
            while not stop.is_set():
                for hb in hbs:
                    try:
                        beat = json.loads(hb.read_text())
                        # The hook self-test before each phase beats here too, then removes its beat.
                        if beat not in seen and not beat.get("session_id", "").startswith("genesis-self-test"):
                            seen.append(beat)
                    except (OSError, ValueError):
                        pass
                time.sleep(0.01)

        def follow():
            markers = {"GENESIS_PROJECT_DIR": str(self.project.resolve())}
            while not stop.is_set():
                for ident in marked(markers):
                    ns, line = ns_pids(ident.pid), command_line(ident.pid, 10_000)
                    if ns and ident.process() is not None:
                        self.traced.setdefault(ident, (ns[-1], set()))[1].add(line)
                # A scan reads every process's environment: 10% of a core at 50 a second. What
                # the tests look for (the agents, their tool shells) lives for seconds.
                time.sleep(0.1)

        poller = threading.Thread(target=poll, daemon=True)
        tracer = threading.Thread(target=follow, daemon=True)
        if watch:
            poller.start()
        if trace:
            tracer.start()
        try:
            done = subprocess.run(["bash", str(LOOP), "--project", str(self.project), *args], env=self.env,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=240,
                                  stdin=subprocess.DEVNULL)
        finally:
            stop.set()
            if trace:
                tracer.join()
        print(done.stdout)  # status lines and errors, as the terminal shows them
        return done, seen

    def breaker(self) -> dict:
        return json.loads((self.project / "orchestrator" / ".circuit_breaker.json").read_text())

    def leftovers(self) -> list:
        """Processes carrying the project's marker or the last run's id: none may be left."""
        run_id = [e["run_id"] for e in events_of(self.project) if e["event"] == "loop_start"][-1]
        return marked({"GENESIS_PROJECT_DIR": str(self.project.resolve()), "GENESIS_RUN_ID": run_id})

    def told(self, pid: int, *commands: str) -> list[ProcId]:
        """The traced processes that tell this pid (in a box: its own numbering), their command
        line holding one of `commands` (any, without): how a pid an agent reports is found."""
        return [ident for ident, (inner, lines) in self.traced.items()
                if inner == pid and (not commands or any(c in line for c in commands for line in lines))]

    def agent(self, ended: dict) -> ProcId:
        """The traced process a phase_end names: the CLI, which tells its box_pid in the box."""
        found = [ident for ident in self.told(ended["box_pid"] or ended["pid"]) if ident.pid == ended["pid"]]
        assert len(found) == 1, (ended, self.traced)
        return found[0]

    def heartbeat_file(self, phase: str) -> Path:
        return state_of(self.project) / "heartbeats" / f"{phase}.json"

    def tool_calls(self, phase: str = "Builder") -> list[ToolCall]:
        """Every tool event the hook logged in the phase's last run. The hook appends one line a
        call to the tool log, so this counts them all; the heartbeat file holds only the newest
        beat, and run(watch=...) samples it (two beats a few ms apart show as one)."""
        return read_tail(tool_log_path(self.heartbeat_file(phase)), most=10_000)

    def ended(self) -> list[dict]:
        return [e for e in events_of(self.project) if e["event"] == "phase_end"]

    def log(self, phase: str = "Builder") -> Path:
        """The readable transcript of the phase's last start in iteration 1 (after a wait or a
        retry the phase starts again, with a log of its own)."""
        starts = [e for e in events_of(self.project)
                  if e["event"] == "phase_start" and (e["iteration"], e["phase"]) == (1, phase)]
        return Path(starts[-1]["log"])

    def progressed(self, done: subprocess.CompletedProcess) -> tuple[str, str]:
        """What the "progress" scenario must leave: the Builder finished, its file and its own
        commit landed, a readable transcript (no raw JSON), breaker CLOSED, nothing running.
        Returns the run id and the Builder's transcript (of its last start)."""
        assert done.returncode == 0, done.stdout
        assert "Builder: finished" in done.stdout
        assert (self.project / "hello.txt").read_text() == "hello from the agent\n"
        assert "agent: hello" in git(self.project, "log", "--format=%s")
        run_id = events_of(self.project)[0]["run_id"]
        transcript = self.log("Builder").read_text()
        assert "Done: wrote hello.txt and committed it." in transcript
        assert not [line for line in transcript.splitlines() if line.startswith("{")]
        breaker = self.breaker()
        assert breaker["state"] == "CLOSED" and breaker["last_progress_iteration"] == 1
        assert self.leftovers() == []
        return run_id, transcript

    def hung(self, done: subprocess.CompletedProcess, phase: str = "Builder") -> tuple[int, list[dict]]:
        """What the "hang" scenario must leave: the phase stuck; the tool's shell (in a session
        of its own for most CLIs) and every agent the phase ran dead; nothing carrying the
        run's marker left. Returns the tool shell's pid and the phases' ends."""
        assert f"{phase}: stuck:" in done.stdout, done.stdout
        tool_shell = int((self.project / "tool-shell.pid").read_text())
        shells = self.told(tool_shell, *TOOL_SHELL)  # the $$ it wrote is its box's: the host's process
        ended = self.ended()
        hung = [e for e in ended if e["phase"] == phase]
        assert hung and all(e["status"] == "stuck" for e in hung), ended
        assert shells and not {s.pid for s in shells} & {e["pid"] for e in hung}, (shells, self.traced)
        assert all(gone(s) for s in shells) and all(gone(self.agent(e)) for e in hung)
        assert self.leftovers() == []
        return tool_shell, ended


def gone(ident: ProcId) -> bool:
    """Ended: no process is this one any more, or it is a zombie."""
    return ident.process() is None or not alive(ident.pid)


def calls(logged: list[ToolCall], event: str, tool: str) -> int:
    """How many of the hook's tool events (Loop.tool_calls) name this event and tool."""
    return sum(1 for c in logged if (c.event, c.tool) == (event, tool))


# --- the Claude Code nights (acceptance, night, morning) ------------------------------------

# Only time is compressed; every other setting is the shipped default.
TIME_KNOBS = {"HEARTBEAT_CHECK_INTERVAL": "0.5", "HEARTBEAT_STALE": "30s",
              "AGENT_MAX_RUNTIME": "120s", "KILL_GRACE_SECONDS": "3", "ITERATION_PAUSE_SECONDS": "0"}
# The new knobs' time values, compressed like the rest; the ceilings keep their defaults.
NIGHT_KNOBS = {"GENESIS_LIMIT_MARGIN_SECONDS": "1", "GENESIS_BACKOFF_FIRST_SECONDS": "1",
               "GENESIS_BACKOFF_MAX_SECONDS": "4"}


def user_env(stub: StubAPI) -> dict[str, str]:
    """A user's shell: the real `claude` first on PATH, the stub as its API, time compressed."""
    env = {**os.environ, "PATH": f"{CLAUDE.parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "ANTHROPIC_BASE_URL": stub.url, "ANTHROPIC_API_KEY": "sk-ant-stub",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
           "DISABLE_AUTOUPDATER": "1", "DISABLE_ERROR_REPORTING": "1", **TIME_KNOBS}
    if os.geteuid() == 0:
        env["IS_SANDBOX"] = "1"  # Claude Code refuses to skip permissions as root otherwise
    return env


def run_to_end(argv: list[str], timeout: float = 240, **kw) -> subprocess.CompletedProcess:
    """Run with stdout and stderr combined in order; past the timeout, SIGTERM (the loop cleans
    up after itself) and fail with what was printed so far."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            text=True, start_new_session=True, **kw)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        raise AssertionError(f"{argv} did not end within {timeout:.0f}s:\n{out}") from None
    print(out)
    return subprocess.CompletedProcess(argv, proc.returncode, out, "")


def run_events(project: Path) -> list[dict]:
    """The events of the project's latest run, in order."""
    evs = events_of(project)
    run_id = [e["run_id"] for e in evs if e["event"] == "loop_start"][-1]
    return [e for e in evs if e["run_id"] == run_id]


def of(evs: list[dict], kind: str) -> list[dict]:
    return [e for e in evs if e["event"] == kind]


def agent_log(evs: list[dict], iteration: int, phase: str) -> str:
    start = [e for e in of(evs, "phase_start") if (e["iteration"], e["phase"]) == (iteration, phase)]
    assert len(start) == 1, f"{phase} started {len(start)} times in iteration {iteration}"
    return Path(start[0]["log"]).read_text()


def checklist(project: Path, rev: str) -> dict[str, str]:
    """TASKS.md at a commit: task title -> its mark (' ', '?' or 'x')."""
    text = git(project, "show", f"{rev}:TASKS.md")
    return {title: mark for mark, title in re.findall(r"^- \[([ ?x])\] (.+?)\s*$", text, re.M)}


def commits(project: Path) -> list[tuple[str, str]]:
    """(sha, subject) of every commit, oldest first."""
    log = git(project, "log", "--reverse", "--format=%H %s")
    return [tuple(line.split(" ", 1)) for line in log.splitlines()]


def leftovers(project: Path) -> list:
    return marked({"GENESIS_PROJECT_DIR": str(project.resolve())})


def night_env(stub: StubAPI, subscriber: bool = False, **extra: str) -> dict[str, str]:
    env = {**user_env(stub), "GENESIS_BIN": str(Path(sys.executable).parent / "genesis"), **NIGHT_KNOBS, **extra}
    if subscriber:  # a subscriber's login instead of an API key
        del env["ANTHROPIC_API_KEY"]
        env["CLAUDE_CODE_OAUTH_TOKEN"] = "tok-stub"
    return env


def plan_night(project: Path, tasks: list[str]) -> str:
    """A user's project for the night: an identity, a committed task list, the hook installed
    the user's way; returns what `genesis hook install` printed."""
    git(project, "config", "user.name", "Night Owl")
    git(project, "config", "user.email", "owl@example.invalid")
    (project / "TASKS.md").write_text("# Tasks\n" + "".join(f"- [ ] {t}\n" for t in tasks))
    git(project, "add", "TASKS.md")
    git(project, "commit", "-qm", "Plan the night")
    installed = subprocess.run(GENESIS + ["--project", str(project), "hook", "install"], capture_output=True,
                               text=True)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return installed.stdout

"""The loop as a user runs it, for the end-to-end suites of every real agent CLI.

A suite builds an environment (its CLI's command and the stub API it talks to), names a
stub scenario in each phase's prompt, runs `start-multi-agent-loop.sh` to its end, and
reads what the loop left: its output, the heartbeats it saw, the ledger and leftovers.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import alive, events_of, git, state_of
from helpers import paths

from genesis.procs.proctree import marked

ROOT = paths.ROOT
TOOLS = ROOT / ".tools"
LOOP = ROOT / "start-multi-agent-loop.sh"
GENESIS = [sys.executable, "-m", "genesis"]

# What every e2e loop shares: quick checks and windows so that a hang shows in seconds.
LOOP_ENV = {"GENESIS_BIN": str(Path(sys.executable).parent / "genesis"),
            "HEARTBEAT_CHECK_INTERVAL": "0.5", "HEARTBEAT_STALE_SECONDS": "6", "AGENT_MAX_RUNTIME_SECONDS": "120",
            "KILL_GRACE_SECONDS": "3", "ITERATION_PAUSE_SECONDS": "0", "PHASE_RETRY_DELAY_SECONDS": "0",
            "REAP_PORTS": "", "NO_COLOR": "1"}


def installed(binary: Path, log: Path, what: str, version_args: tuple[str, ...] = ("--version",)) -> Path:
    """The CLI the test command installed into .tools/, or skip the suite with the reason."""
    if not binary.exists():
        why = log.read_text().strip()[-300:] if log.exists() else "run ./run-tests.sh to install it"
        pytest.skip(f"real {what} is not installed, e2e suite skipped: {why}")
    done = subprocess.run([str(binary), *version_args], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
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

    def phase(self, name: str, scenario: str, **params) -> None:
        """The phase's prompt names a stub scenario; phases and triggers stay the defaults (in
        a project without TASKS.md: Builder and Planner run, the Criticizer is skipped)."""
        prompt = self.tmp / f"{name}.md"
        extra = " ".join(f"{k}={v}" for k, v in params.items())
        prompt.write_text(f"SCENARIO: {scenario}\nCWD={self.project}\nPARAMS: {extra}\n")
        self.env[f"PHASE_{name}_PROMPT"] = str(prompt)

    def run(self, *args: str, watch: str | None = None) -> tuple[subprocess.CompletedProcess, list[dict]]:
        """Run the loop to its end; with watch=PHASE, collect every heartbeat it writes."""
        seen: list[dict] = []
        stop = threading.Event()
        hb = state_of(self.project) / "heartbeats" / f"{watch}.json"

        def poll():
            while not stop.is_set():
                try:
                    beat = json.loads(hb.read_text())
                    # The hook self-test before each phase beats here too, then removes its beat.
                    if beat not in seen and not beat.get("session_id", "").startswith("genesis-self-test"):
                        seen.append(beat)
                except (OSError, ValueError):
                    pass
                time.sleep(0.01)

        poller = threading.Thread(target=poll, daemon=True)
        if watch:
            poller.start()
        try:
            done = subprocess.run(["bash", str(LOOP), "--project", str(self.project), *args], env=self.env,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=240,
                                  stdin=subprocess.DEVNULL)
        finally:
            stop.set()
        print(done.stdout)  # status lines and errors, as the terminal shows them
        return done, seen

    def breaker(self) -> dict:
        return json.loads((self.project / "orchestrator" / ".circuit_breaker.json").read_text())

    def leftovers(self) -> list:
        """Processes carrying the project's marker or the last run's id: none may be left."""
        run_id = [e["run_id"] for e in events_of(self.project) if e["event"] == "loop_start"][-1]
        return marked({"GENESIS_PROJECT_DIR": str(self.project.resolve()), "GENESIS_RUN_ID": run_id})

    def ended(self) -> list[dict]:
        return [e for e in events_of(self.project) if e["event"] == "phase_end"]

    def progressed(self, done: subprocess.CompletedProcess) -> tuple[str, str]:
        """What the "progress" scenario must leave: the Builder finished, its file and its own
        commit landed, a readable transcript (no raw JSON), breaker CLOSED, nothing running.
        Returns the run id and the Builder's transcript."""
        assert done.returncode == 0, done.stdout
        assert "Builder: finished" in done.stdout
        assert (self.project / "hello.txt").read_text() == "hello from the agent\n"
        assert "agent: hello" in git(self.project, "log", "--format=%s")
        run_id = events_of(self.project)[0]["run_id"]
        transcript = (self.project / "orchestrator" / "logs" / run_id / "iter-0001-Builder.log").read_text()
        assert "Done: wrote hello.txt and committed it." in transcript
        assert not [line for line in transcript.splitlines() if line.startswith("{")]
        breaker = self.breaker()
        assert breaker["state"] == "CLOSED" and breaker["last_progress_iteration"] == 1
        assert self.leftovers() == []
        return run_id, transcript

    def hung(self, done: subprocess.CompletedProcess) -> tuple[int, list[dict]]:
        """What the "hang" scenario must leave: the Builder stuck; the tool's shell (in a session
        of its own for most CLIs) and every agent the Builder ran dead; nothing carrying the
        run's marker left. Returns the tool shell's pid and the phases' ends."""
        assert "Builder: stuck:" in done.stdout, done.stdout
        tool_shell = int((self.project / "tool-shell.pid").read_text())
        ended = self.ended()
        builders = [e for e in ended if e["phase"] == "Builder"]
        assert builders and all(e["status"] == "stale" for e in builders), ended
        assert tool_shell not in [e["pid"] for e in builders]
        assert not alive(tool_shell) and not any(alive(e["pid"]) for e in builders)
        assert self.leftovers() == []
        return tool_shell, ended


def calls(beats: list[dict], event: str, tool: str) -> int:
    """How many heartbeats name this event and tool."""
    return sum(1 for b in beats if (b["event"], b["tool"]) == (event, tool))

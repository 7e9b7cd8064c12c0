"""The loop and the terminal it runs in: a terminal closed (a tmux pane killed), Ctrl-C with the
output piped through `tee` and `kill -HUP` to the loop alone, each with the phase's partial
work committed as the agent's; `nohup` and a closed terminal, whose `| tee` dies mid-phase;
and a phase whose step died. Real bash, real pipes, real terminals (tmux), real processes;
the agent is a small script. The wait's countdown line is in test_night_waits.py; the
console's own survival of a lost output in tests/test_console.py."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from helpers.agent import script
from helpers.git import git
from helpers.loop import LOOP, loop_env
from helpers.procs import loop_leftovers
from helpers.receiver import Receiver
from helpers.state import events_of
from helpers.waits import wait_for

from genesis.ledger.store import LedgerError

# A phase's agent: edits a tracked file, deletes one, adds one, says it started, then works a
# while (AGENT_SECONDS) and leaves a file.
AGENT = """#!/usr/bin/env bash
echo "the agent's edit" >>README.md
rm -f old.txt
echo "$GENESIS_AGENT began iteration $GENESIS_ITERATION" >"work-$GENESIS_AGENT-$GENESIS_ITERATION.txt"
echo "agent: $GENESIS_AGENT in iteration $GENESIS_ITERATION"
sleep "${AGENT_SECONDS:-2}"
echo "$GENESIS_AGENT did iteration $GENESIS_ITERATION" >"done-$GENESIS_AGENT-$GENESIS_ITERATION.txt"
"""

# Runs the loop (its output through `tee` when TEE_TO is set), then records its exit status
# in CODE_FILE. It traps the terminal's signals only to outlive them: the loop under it gets
# them as it would from the user's shell.
RUN = """#!/usr/bin/env bash
trap : INT HUP
if [[ -n ${TEE_TO:-} ]]; then
  bash "$LOOP" "$@" 2>&1 | tee "$TEE_TO"
  code=${PIPESTATUS[0]}
else
  bash "$LOOP" "$@"
  code=$?
fi
echo "$code" >"$CODE_FILE"
"""

needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


@pytest.fixture
def night(project: Path, tmp_path: Path):
    """The project (with a file the agent deletes and a note of the user's), the agent, the
    wrapper and where it records the loop's exit status."""
    git(project, "config", "user.name", "Agent")
    git(project, "config", "user.email", "agent@example.invalid")
    (project / "old.txt").write_text("old\n")
    git(project, "add", "old.txt")
    git(project, "commit", "-qm", "a file the agent deletes")
    (project / "notes.txt").write_text("the user's own notes, never committed\n")
    agent = script(tmp_path / "agent.sh", AGENT)
    run = script(tmp_path / "run.sh", RUN)
    return project, agent, run, tmp_path / "code"


def of(project: Path, kind: str) -> list[dict]:
    try:
        return [e for e in events_of(project) if e["event"] == kind]
    except LedgerError:  # the loop is creating it
        return []


def running(project: Path, phase: str) -> bool:
    """The phase's agent is at work: its first line is in the phase's log."""
    starts = [e for e in of(project, "phase_start") if e["phase"] == phase]
    log = Path(starts[-1]["log"]) if starts else None
    return log is not None and log.exists() and f"agent: {phase}" in log.read_text(errors="replace")


def ran(project: Path) -> list[tuple[int, str, str]]:
    """(iteration, phase, how it ended) for every phase that ran, in order."""
    return [(e["iteration"], e["phase"], e["detail"]) for e in of(project, "phase_end")]


def console_of(project: Path) -> str:
    (run_dir,) = (project / "orchestrator" / "logs").iterdir()
    return (run_dir / "console.log").read_text()


def assert_partial_work_committed(project: Path, run_id: str) -> None:
    """The interrupted Builder's edit, deletion and new file, committed as the agent's; the
    user's notes left out."""
    assert git(project, "log", "-1", "--format=%s").strip() == \
        f"genesis: Builder, iteration 1 (ended: interrupted, killed; partial work) [run {run_id}]"
    assert sorted(git(project, "show", "--format=", "--name-only", "HEAD").split()) == \
        ["README.md", "old.txt", "work-Builder-1.txt"]
    assert git(project, "status", "--porcelain", "--untracked-files=all").strip() == "?? notes.txt"


def code_of(path: Path) -> int:
    wait_for(lambda: path.exists() and path.read_text().strip() != "", timeout=60, what="the loop's exit status")
    return int(path.read_text())


def loop_line(run: Path, code: Path, project: Path, agent: Path, *args: str, tee: Path | None = None,
              nohup: bool = False) -> str:
    """The command line a user types, through the wrapper that records the exit status."""
    env = {"LOOP": str(LOOP), "CODE_FILE": str(code), **({"TEE_TO": str(tee)} if tee else {})}
    return " ".join([*(f"{k}={shlex.quote(v)}" for k, v in env.items()), *(["nohup"] if nohup else []), "bash",
                     shlex.quote(str(run)), "--project", shlex.quote(str(project)), "--agent-cmd",
                     shlex.quote(str(agent)), *args])


@pytest.mark.fault(52, 56)
@needs_tmux
def test_ctrl_c_with_the_output_through_tee_ends_130_with_the_end_recorded_and_the_work_the_agents(
        night, terminal, tmp_path):
    """Ctrl-C reaches the tee as well as the loop: the loop used to die of SIGPIPE (141) at
    its "received SIGINT" line, the phase left `running` and no end recorded."""
    project, agent, run, code = night
    term = terminal(loop_env(AGENT_SECONDS="60", HEARTBEAT_STALE="120s"))
    term.type(loop_line(run, code, project, agent, "--max-iterations", "1", tee=tmp_path / "night.log"))
    wait_for(lambda: running(project, "Builder"), timeout=60, what="the first phase's agent at work")
    term("send-keys", "-t", "w", "C-c")
    assert code_of(code) == 130
    (phase,) = of(project, "phase_end")
    assert (phase["phase"], phase["status"], phase["detail"]) == ("Builder", "interrupted", "interrupted by SIGINT")
    (end,) = of(project, "loop_end")
    assert (end["exit_code"], end["reason"]) == (130, "interrupted by SIGINT")
    assert "received SIGINT" in console_of(project)
    assert_partial_work_committed(project, end["run_id"])
    wait_for(lambda: not loop_leftovers(project, end["run_id"]), timeout=30, what="nothing of the loop left running")


@pytest.mark.fault(53, 56)
@needs_tmux
def test_closing_the_terminal_ends_the_loop_with_129_and_everything_recorded(night, terminal):
    """The tmux pane killed mid-phase (a terminal window closed, an SSH session dropped): SIGHUP.
    The loop used to die of EIO/SIGPIPE (141) at its next line; now it ends 129, with the
    phase's end, the run's end and the end-of-loop alert recorded, and nothing left running."""
    project, agent, run, code = night
    with Receiver() as rx:
        term = terminal(loop_env(AGENT_SECONDS="60", HEARTBEAT_STALE="120s",
                                 GENESIS_NOTIFY_WEBHOOK=f"{rx.url}/hook"))
        term.type(loop_line(run, code, project, agent, "--max-iterations", "1"))
        wait_for(lambda: running(project, "Builder"), timeout=60, what="the first phase's agent at work")
        term("kill-pane", "-t", "w")
        assert code_of(code) == 129
        (phase,) = of(project, "phase_end")
        assert (phase["phase"], phase["status"], phase["detail"]) == ("Builder", "interrupted",
                                                                      "interrupted by SIGHUP")
        (end,) = of(project, "loop_end")
        assert (end["exit_code"], end["reason"]) == (129, "interrupted by SIGHUP")
        sent = [r.json["genesis"] for r in rx.wait_for(1)]
        assert [(t["kind"], t["final"]) for t in sent] == [("loop_end", True)]
        assert "exit 129: interrupted by SIGHUP" in sent[0]["evidence"]
        wait_for(lambda: not loop_leftovers(project, end["run_id"]), timeout=30,
                 what="nothing of the loop left running")
    console = console_of(project)
    assert "received SIGHUP" in console and f"Genesis run {end['run_id']}" in console
    assert_partial_work_committed(project, end["run_id"])


@pytest.mark.fault(52)
@needs_tmux
def test_under_nohup_a_closed_terminal_costs_only_the_output(night, terminal, tmp_path):
    """`nohup ./start-multi-agent-loop.sh ... 2>&1 | tee night.log &`, then the terminal closed:
    the tee dies with it mid-phase, and the loop (which ignores the hangup) used to die of
    SIGPIPE at its next line, with no end recorded; now the night goes on to its normal end,
    every line in its console log."""
    project, agent, run, code = night
    term = terminal(loop_env(AGENT_SECONDS="3", HEARTBEAT_STALE="120s"))
    line = loop_line(run, code, project, agent, "--max-iterations", "1", nohup=True)
    term.type(f"{line} 2>&1 | tee {shlex.quote(str(tmp_path / 'night.log'))} &")
    wait_for(lambda: running(project, "Builder"), timeout=60, what="the first phase's agent at work")
    term("kill-pane", "-t", "w")
    assert code_of(code) == 0
    (end,) = of(project, "loop_end")
    assert (end["exit_code"], end["reason"]) == (0, "reached GENESIS_MAX_ITERATIONS=1")
    assert ran(project) == [(1, "Builder", "finished"), (1, "Planner", "finished")]
    console, teed = console_of(project), (tmp_path / "night.log").read_text()
    assert f"Genesis run {end['run_id']}" in console and f"Genesis run {end['run_id']}" not in teed
    assert "Planner: finished" in console and "Planner: finished" not in teed and "Traceback" not in console


def slow_loop(project: Path, agent: Path, out: Path) -> subprocess.Popen:
    """One iteration of the loop in the background, its own process group, its agent working
    for a minute, its output into out."""
    with open(out, "w") as sink:
        return subprocess.Popen(["bash", str(LOOP), "--project", str(project), "--agent-cmd", str(agent),
                                 "--max-iterations", "1"],
                                env=loop_env(AGENT_SECONDS="60", HEARTBEAT_STALE="120s"), stdout=sink,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)


@pytest.mark.fault(54, 56)
def test_the_interrupted_phase_names_the_signal_the_loop_got_and_its_work_is_the_agents(night, tmp_path):
    """`kill -HUP <the loop's pid>` (the loop alone; `kill` and systemd's SIGTERM take the same
    way): the phase used to say "interrupted by SIGTERM", the signal the loop sent its watcher,
    not the one it got (Ctrl-C's SIGINT is named in the test above)."""
    project, agent, _run, _code = night
    sig = signal.SIGHUP
    loop = slow_loop(project, agent, tmp_path / "out.txt")
    try:
        wait_for(lambda: running(project, "Builder"), timeout=60, what="the first phase's agent at work")
        os.kill(loop.pid, sig)
        assert loop.wait(timeout=60) == 128 + sig
    finally:
        if loop.poll() is None:
            os.killpg(loop.pid, signal.SIGKILL)
            loop.wait()
    (phase,) = of(project, "phase_end")
    assert (phase["status"], phase["detail"]) == ("interrupted", f"interrupted by {sig.name}")
    (end,) = of(project, "loop_end")
    assert end["reason"] == f"interrupted by {sig.name}"
    assert f"Builder: interrupted: interrupted by {sig.name}" in (tmp_path / "out.txt").read_text()
    assert_partial_work_committed(project, end["run_id"])


@pytest.mark.fault(53)
def test_a_phase_whose_step_died_before_recording_its_end_ends_with_the_loop(night, tmp_path):
    """The phase's step ended before it could record the phase's end (here stopped, then
    killed, while the loop stops on SIGTERM): the loop's end records it, with the loop's reason,
    instead of leaving the phase `running` in the ledger."""
    project, agent, _run, _code = night
    loop = slow_loop(project, agent, tmp_path / "out.txt")
    try:
        wait_for(lambda: running(project, "Builder"), timeout=60, what="the first phase's agent at work")
        (step,) = [p for p in psutil.Process(loop.pid).children() if "run-phase" in p.cmdline()]
        step.suspend()
        os.kill(loop.pid, signal.SIGTERM)
        time.sleep(1)  # the loop has forwarded the signal, which the stopped step cannot act on
        step.kill()
        assert loop.wait(timeout=60) == 143
    finally:
        if loop.poll() is None:
            os.killpg(loop.pid, signal.SIGKILL)
            loop.wait()
    (phase,) = of(project, "phase_end")
    assert (phase["phase"], phase["status"], phase["detail"]) == \
        ("Builder", "interrupted", "ended with the loop: interrupted by SIGTERM")
    (end,) = of(project, "loop_end")
    assert (end["exit_code"], end["reason"]) == (143, "interrupted by SIGTERM")
    wait_for(lambda: not loop_leftovers(project, end["run_id"]), timeout=30, what="nothing of the loop left running")

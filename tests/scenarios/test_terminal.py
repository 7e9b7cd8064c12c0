"""The loop and the terminal it runs in: a `| tee` that dies mid-phase, a terminal closed (a
tmux pane killed), Ctrl-C with the output piped, `nohup` and a closed terminal, `kill -HUP`
to the loop alone, and the wait's countdown line. Real bash, real pipes, real terminals
(tmux), real processes; the agent is a small script, or a stand-in `claude` replaying what
the real Claude Code printed when it met a usage limit."""

from __future__ import annotations

import os
import re
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
from helpers.loop import GENESIS, LOOP, loop_env
from helpers.receiver import Receiver
from helpers.state import events_of
from helpers.fakeclaude import replay
from helpers.waits import wait_for

from genesis.ledger.store import LedgerError

# A phase's agent: says it started, works a while (AGENT_SECONDS), leaves a file.
AGENT = """#!/usr/bin/env bash
echo "agent: $GENESIS_AGENT in iteration $GENESIS_ITERATION"
sleep "${AGENT_SECONDS:-2}"
echo "$GENESIS_AGENT did iteration $GENESIS_ITERATION" >"work-$GENESIS_AGENT-$GENESIS_ITERATION.txt"
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
    """The project, the agent, the wrapper and where it records the loop's exit status."""
    git(project, "config", "user.name", "Agent")
    git(project, "config", "user.email", "agent@example.invalid")
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


def leftovers(project: Path, run_id: str) -> list[str]:
    """Processes of this loop still running: its script and steps (they name the project) and
    anything carrying the run's marker (the agent's tree)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            line = " ".join(proc.info["cmdline"] or [])
            if str(project) in line or proc.environ().get("GENESIS_RUN_ID") == run_id:
                found.append(f"pid {proc.pid}: {line}")
        except psutil.Error:
            continue
    return found


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


@pytest.mark.fault(52)
def test_a_tee_that_dies_mid_phase_costs_the_output_not_the_night(night, tmp_path):
    """`./start-multi-agent-loop.sh ... 2>&1 | tee night.log`, and the tee killed mid-phase: the
    loop used to die of SIGPIPE (141) at its next line, with no end recorded."""
    project, agent, _run, _code = night
    loop = subprocess.Popen(["bash", str(LOOP), "--project", str(project), "--agent-cmd", str(agent),
                             "--max-iterations", "2"], env=loop_env(AGENT_SECONDS="2"), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    tee = subprocess.Popen(["tee", str(tmp_path / "night.log")], stdin=loop.stdout, stdout=subprocess.DEVNULL)
    loop.stdout.close()  # the tee is the pipe's only reader
    try:
        wait_for(lambda: running(project, "Builder"), timeout=60, what="the first phase's agent at work")
        tee.kill()
        tee.wait(timeout=10)
        assert loop.wait(timeout=120) == 0
    finally:
        if loop.poll() is None:
            os.killpg(loop.pid, signal.SIGKILL)
            loop.wait()
    (end,) = of(project, "loop_end")
    assert (end["exit_code"], end["reason"]) == (0, "reached GENESIS_MAX_ITERATIONS=2")
    assert ran(project) == [(1, "Builder", "finished"), (1, "Planner", "finished"),
                            (2, "Builder", "finished"), (2, "Planner", "finished")]
    run_id = end["run_id"]
    console, teed = console_of(project), (tmp_path / "night.log").read_text()
    # The console log has every line, those said after the tee died too; the tee's copy stops.
    assert f"Genesis run {run_id}" in console and f"Genesis run {run_id}" not in teed
    assert "--- iteration 2 ---" in console and "Traceback" not in console


@pytest.mark.fault(52)
@needs_tmux
def test_ctrl_c_with_the_output_through_tee_ends_130_with_the_end_recorded(night, terminal, tmp_path):
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
    wait_for(lambda: not leftovers(project, end["run_id"]), timeout=30, what="nothing of the loop left running")


@pytest.mark.fault(53)
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
        wait_for(lambda: not leftovers(project, end["run_id"]), timeout=30, what="nothing of the loop left running")
    console = console_of(project)
    assert "received SIGHUP" in console and f"Genesis run {end['run_id']}" in console


@pytest.mark.fault(52)
@needs_tmux
def test_under_nohup_a_closed_terminal_costs_only_the_output(night, terminal, tmp_path):
    """`nohup ./start-multi-agent-loop.sh ... 2>&1 | tee night.log &`, then the terminal closed:
    the tee dies with it, the loop (which ignores the hangup) used to die of SIGPIPE; now
    the night goes on to its normal end."""
    project, agent, run, code = night
    term = terminal(loop_env(AGENT_SECONDS="3", HEARTBEAT_STALE="120s"))
    line = loop_line(run, code, project, agent, "--max-iterations", "2", nohup=True)
    term.type(f"{line} 2>&1 | tee {shlex.quote(str(tmp_path / 'night.log'))} &")
    wait_for(lambda: running(project, "Builder"), timeout=60, what="the first phase's agent at work")
    term("kill-pane", "-t", "w")
    assert code_of(code) == 0
    (end,) = of(project, "loop_end")
    assert (end["exit_code"], end["reason"]) == (0, "reached GENESIS_MAX_ITERATIONS=2")
    assert ran(project) == [(1, "Builder", "finished"), (1, "Planner", "finished"),
                            (2, "Builder", "finished"), (2, "Planner", "finished")]
    assert f"Genesis run {end['run_id']}" in console_of(project)
    assert f"Genesis run {end['run_id']}" not in (tmp_path / "night.log").read_text()


def slow_loop(project: Path, agent: Path, out: Path) -> subprocess.Popen:
    """One iteration of the loop in the background, its own process group, its agent working
    for a minute, its output into out."""
    with open(out, "w") as sink:
        return subprocess.Popen(["bash", str(LOOP), "--project", str(project), "--agent-cmd", str(agent),
                                 "--max-iterations", "1"],
                                env=loop_env(AGENT_SECONDS="60", HEARTBEAT_STALE="120s"), stdout=sink,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)


@pytest.mark.fault(54)
@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGINT], ids=["SIGHUP", "SIGINT"])
def test_the_interrupted_phase_names_the_signal_the_loop_got(night, tmp_path, sig):
    """`kill -HUP <the loop's pid>` (the loop alone): the phase used to say "interrupted by
    SIGTERM", the signal the loop sent its watcher, not the one it got."""
    project, agent, _run, _code = night
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
    wait_for(lambda: not leftovers(project, end["run_id"]), timeout=30, what="nothing of the loop left running")


COUNTDOWN = re.compile(r"usage limit: (?:\d+[hms] ?)+ left \(until \d\d:\d\d:\d\d\)")


@pytest.mark.fault(55)
@needs_tmux
@pytest.mark.parametrize("how", ["genesis stop", "Ctrl-C"])
def test_the_countdown_line_is_ended_before_the_next_message(project, tmp_path, terminal, how):
    """The wait's countdown rewrites one terminal line in place; the next message, the wait's
    own (the stop flag) or the loop's (Ctrl-C), used to be printed on the end of that line,
    or the countdown erased under it. Now the line keeps its last state and is ended first."""
    env = replay(project, tmp_path).env("limit_five_hour.jsonl", FAKE_RESET_IN="600")
    term = terminal(env)
    term.type(f"bash {shlex.quote(str(LOOP))} --project {shlex.quote(str(project))} --max-iterations 1; "
              f"echo \"loop exit $?\"")
    term.until(lambda s: len(COUNTDOWN.findall(s)) >= 1, "the wait's countdown", timeout=60)
    if how == "genesis stop":
        subprocess.run(GENESIS + ["--project", str(project), "stop"], check=True, capture_output=True)
        after, code = "usage limit: the stop flag says false: the wait ends and the loop stops", 0
    else:
        term("send-keys", "-t", "w", "C-c")
        after, code = "received SIGINT: stopping the agent and cleaning up", 130
    screen = term.until(lambda s: re.search(r"^loop exit \d+$", s, re.M), "the loop's end")
    assert f"loop exit {code}" in screen
    lines = screen.splitlines()
    last = max(n for n, line in enumerate(lines) if COUNTDOWN.search(line))
    # The countdown's last state stays on a line of its own (^C: the terminal's echo of the
    # key), and the next message starts the next line.
    assert re.fullmatch(r"\[genesis \d\d:\d\d:\d\d\] " + COUNTDOWN.pattern + r"(\^C)?", lines[last]), lines[last]
    assert re.fullmatch(r"\[genesis \d\d:\d\d:\d\d\] " + re.escape(after), lines[last + 1]), screen
    assert all(line.count("[genesis ") <= 1 for line in lines), screen
    assert [e["how"] for e in of(project, "wait_end")] == ["stopped" if how == "genesis stop" else "interrupted"]

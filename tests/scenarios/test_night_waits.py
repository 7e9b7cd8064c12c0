"""The real loop meeting what ends a night early: a usage limit's wait in a real terminal (tmux)
with its countdown (ended by `genesis stop` or Ctrl-C, and remembered across a restart), an
error retrying cannot fix, and the breaker's opt-in cooldown. The rules are replayed: the
runtime and cost ceilings, checked before each phase, in tests/loop/test_ceilings.py; the
cooldown that doubles at each failed trial in tests/loop/test_breaker.py; the waits in
tests/loop/test_waiting.py.

The agent is a stand-in named `claude` that replays what the real Claude Code printed
(tests/fixtures/claude/, recorded from the real binary), with the reset time moved to
now; the real CLI against a stub API runs the same nights in tests/e2e/test_night.py.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers.fakeclaude import replay
from helpers.loop import GENESIS, LOOP
from helpers.state import events_of, state_of
from helpers.tmux import Terminal

needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


@pytest.fixture
def night(project: Path, tmp_path: Path):
    """A project replaying recorded runs through a stand-in `claude`: (project, env, calls file)."""
    replaying = replay(project, tmp_path)
    return project, replaying.env, replaying.calls


def events(project: Path) -> list[dict]:
    return events_of(project)


def of(project: Path, kind: str) -> list[dict]:
    return [e for e in events(project) if e["event"] == kind]


def waiting(project: Path) -> bool:
    return (state_of(project) / "wait.json").exists() and bool(of(project, "wait_start"))


COUNTDOWN = re.compile(r"usage limit: (?:\d+[hms] ?)+ left \(until \d\d:\d\d:\d\d\)")


def ended_line(screen: str, after: str) -> None:
    """The wait's countdown rewrites one terminal line in place; its last state stays on a line
    of its own (^C: the terminal's echo of the key) and `after`, the next message, starts the
    next line (it used to be printed on the end of the countdown's, or the countdown erased
    under it)."""
    lines = screen.splitlines()
    last = max(n for n, line in enumerate(lines) if COUNTDOWN.search(line))
    assert re.fullmatch(r"\[genesis \d\d:\d\d:\d\d\] " + COUNTDOWN.pattern + r"(\^C)?", lines[last]), lines[last]
    assert re.fullmatch(r"\[genesis \d\d:\d\d:\d\d\] " + re.escape(after), lines[last + 1]), screen
    assert all(line.count("[genesis ") <= 1 for line in lines), screen


def in_terminal(terminal, env: dict, project: Path) -> Terminal:
    """The loop started in a real terminal, as a user types it, once its wait's countdown shows."""
    term = terminal(env)
    term.type(f"bash {shlex.quote(str(LOOP))} --project {shlex.quote(str(project))}; echo \"loop exit $?\"")
    term.until(lambda s: len(COUNTDOWN.findall(s)) >= 1, "the wait's countdown", timeout=60)
    return term


def loop_exit(term: Terminal) -> str:
    """The screen once the loop has ended."""
    return term.until(lambda s: re.search(r"^loop exit \d+$", s, re.M), "the loop's end")


@pytest.mark.fault(38, 44, 55)
@needs_tmux
def test_a_limit_is_waited_for_genesis_stop_or_ctrl_c_ends_the_wait_and_a_restart_remembers_it(night, terminal):
    project, env, calls = night
    term = in_terminal(terminal, env("limit_five_hour.jsonl", FAKE_RESET_IN="3600"), project)
    assert waiting(project)
    stop = subprocess.run(GENESIS + ["--project", str(project), "stop"], capture_output=True, text=True)
    assert stop.returncode == 0, stop.stderr
    screen = loop_exit(term)
    assert "loop exit 0" in screen
    ended_line(screen, "usage limit: the stop flag says false: the wait ends and the loop stops")
    assert calls.read_text().splitlines() == ["Builder"]  # one call met the limit; none after it
    ended = of(project, "phase_end")[0]
    assert (ended["ending"], ended["limit"]["kind"]) == ("limit", "five_hour")
    assert "usage limit (five_hour)" in screen and f"--project {project.resolve()} stop` ends the wait" in screen
    wait = of(project, "wait_start")[0]
    assert (wait["kind"], wait["phase"]) == ("limit", "Builder")
    assert wait["until"] == pytest.approx(ended["limit"]["resets_at"] + 60)
    assert of(project, "wait_end")[0]["how"] == "stopped"
    assert "stop flag" in of(project, "loop_end")[0]["reason"]

    # A restart before the reset waits without calling the agent again; Ctrl-C ends it.
    term = in_terminal(terminal, env("limit_five_hour.jsonl", FAKE_RESET_IN="3600"), project)
    term("send-keys", "-t", "w", "C-c")
    screen = loop_exit(term)
    assert "loop exit 130" in screen
    ended_line(screen, "received SIGINT: stopping the agent and cleaning up")
    assert calls.read_text().splitlines() == ["Builder"]
    assert "already known, so the agent is not called" in screen
    assert [e["how"] for e in of(project, "wait_end")] == ["stopped", "interrupted"]


@pytest.mark.fault(42)
def test_an_error_retrying_cannot_fix_stops_the_loop_at_once(night):
    project, env, calls = night
    done = subprocess.run(["bash", str(LOOP), "--project", str(project)], env=env("auth_401.jsonl"),
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 22, done.stderr
    assert calls.read_text().splitlines() == ["Builder"]
    assert "Invalid API key · Fix external API key" in done.stderr
    ended = of(project, "phase_end")[0]
    assert ended["ending"] == "fatal" and ended["api_error"]["code"] == "authentication_failed"


def test_an_open_breaker_cools_down_tries_again_and_stops_when_the_trial_makes_no_progress(night):
    project, env, calls = night
    done = subprocess.run(["bash", str(LOOP), "--project", str(project)],
                          env=env("success.jsonl", CB_COOLDOWN_MINUTES="0.05", CB_MAX_TRIALS="1",
                                  CB_WARNING_THRESHOLD="1", CB_STOP_THRESHOLD="1"),
                          capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL)
    assert done.returncode == 3, done.stderr
    cooldowns = [e for e in of(project, "wait_start") if e["kind"] == "cooldown"]
    assert [c["attempt"] for c in cooldowns] == [1]
    ends = [(e["iteration"], e["breaker"]) for e in of(project, "iteration_end")]
    assert ends == [(1, "OPEN"), (2, "OPEN")]
    history = json.loads((project / "orchestrator" / ".circuit_breaker.json").read_text())["history"]
    assert any("trial 1 of 1" in h["reason"] for h in history)
    assert "and 1 trial iteration(s): stopping the loop" in done.stderr

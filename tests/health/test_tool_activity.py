"""Busy or stuck: a tool in flight is judged by what its processes do, not by silence alone.

Real agent processes fire the real hook (PreToolUse before the tool, PostToolUse after) and
run tools that burn CPU, write steadily, or wait on nothing; the watcher samples their tree.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.agent import PRE_TOOL_USE, launcher_cli, supervised

from genesis.health.activity import Sample, Usage, compare
from genesis.health.heartbeat import Heartbeat
from genesis.health.toolwatch import ToolWatch
from genesis.procs.proctree import ProcId

PRE = PRE_TOOL_USE
POST = '{"hook_event_name":"PostToolUse","tool_name":"Bash","session_id":"s-1"}'
BUSY_CPU = "import time\nend = time.time() + float(__import__('sys').argv[1])\nwhile time.time() < end: pass\n"
BUSY_IO = ("import os, sys, time\nend = time.time() + float(sys.argv[1])\n"
           "with open('out.bin', 'wb') as fh:\n"
           "    while time.time() < end:\n"
           "        fh.write(b'x' * 65536); fh.flush(); time.sleep(0.05)\n")


def run_tool(tmp_path: Path, tool: str, *, before: str = PRE, stale: float = 1.0, silent: float = 1.0,
             busy_max: float = 60.0, hookless: bool = False):
    """An agent that fires `before`, runs `tool` in a child shell (as Claude Code runs a Bash call),
    fires PostToolUse and exits 0."""
    (tmp_path / "busy_cpu.py").write_text(BUSY_CPU)
    (tmp_path / "busy_io.py").write_text(BUSY_IO)
    script = f"printf '%s' '{before}' | \"$HOOK\"\nbash -c {tool!r}\nprintf '%s' '{POST}' | \"$HOOK\"\n"
    out, notes, _ = supervised(tmp_path, script, run_id="run-tool", stale_after=stale, max_runtime=60.0,
                               count_output=False, tool_silent=silent, tool_busy_max=busy_max, hookless=hookless)
    return out, notes


@pytest.mark.whole
@pytest.mark.fault(45)
def test_a_cpu_busy_silent_tool_for_three_windows_is_not_killed(tmp_path):
    # Three stale windows of busy silence; only a rest of 2.5 s would end the work (a loaded
    # machine can starve the tool for a check or two).
    out, notes = run_tool(tmp_path, '"$PY" busy_cpu.py 3.5', silent=2.5)
    assert (out.status, out.returncode) == ("exited", 0), out
    assert any("silent but busy" in n and "CPU" in n and "busy_cpu.py" in n for n in notes), notes


@pytest.mark.whole
@pytest.mark.fault(45)
def test_an_io_busy_tool_writing_steadily_is_not_killed(tmp_path):
    out, notes = run_tool(tmp_path, '"$PY" busy_io.py 3.5', silent=2.5)
    assert (out.status, out.returncode) == ("exited", 0), out
    assert any("silent but busy" in n and "I/O" in n for n in notes), notes


@pytest.mark.fault(46)
def test_an_idle_tool_is_stuck_after_the_tool_silent_window_not_the_general_one(tmp_path):
    out, _ = run_tool(tmp_path, '"$PY" -c "import time; time.sleep(120)"', stale=30.0, silent=1.0)
    assert out.status == "stuck" and out.window == "tool_silent", out
    assert "inside Bash" in out.detail and "tool-silent window 1s" in out.detail
    assert out.kill is not None and out.kill.survivors == ()


def test_busy_silence_is_allowed_only_up_to_its_ceiling(tmp_path):
    out, _ = run_tool(tmp_path, '"$PY" busy_cpu.py 30', stale=1.0, silent=1.0, busy_max=1.0)
    assert out.status == "stuck" and "no heartbeat" in out.detail, out
    # What ran out is named: the busy tool's allowance, then the general window.
    assert out.window == "tool_busy" and "inside Bash" in out.detail and "tool-busy maximum (1s)" in out.detail


def test_outside_a_tool_a_busy_tree_does_not_keep_the_agent_alive(tmp_path):
    # The last event is PostToolUse: the agent is not inside a tool, so the general window rules.
    out, _ = run_tool(tmp_path, '"$PY" busy_cpu.py 30', before=POST, stale=1.0, silent=1.0)
    assert out.status == "stuck" and "no heartbeat" in out.detail and out.window == "stale", out


@pytest.mark.whole
@pytest.mark.fault(45)
def test_without_hooks_a_busy_tree_keeps_the_agent_alive_and_an_idle_one_gets_stuck(tmp_path):
    # aider's way: no hook ever says a tool is in flight; its test command works silently.
    quiet = "true"  # one beat outside any tool call: no hook ever says a tool is in flight
    # Two and a half windows of 2.5 s: the agent's own exit after the tool may take a second on a
    # loaded machine, and the tool may miss a check's CPU.
    out, notes = run_tool(tmp_path, '"$PY" busy_cpu.py 6', before=quiet, stale=2.5, silent=2.5, hookless=True)
    assert (out.status, out.returncode) == ("exited", 0), out
    assert any("its processes work" in n and "busy_cpu.py" in n for n in notes), notes
    out, _ = run_tool(tmp_path, '"$PY" -c "import time; time.sleep(120)"', before=quiet, stale=1.0, silent=1.0,
                      hookless=True)
    assert out.status == "stuck" and "no heartbeat" in out.detail, out
    out, _ = run_tool(tmp_path, '"$PY" busy_cpu.py 30', before=quiet, stale=1.0, silent=1.0, busy_max=1.0,
                      hookless=True)
    assert out.status == "stuck", out


@pytest.mark.fault(46)
def test_behind_a_launcher_the_clis_own_work_is_not_its_tools(tmp_path):
    # npm starts Codex's binary (and Gemini CLI itself) under a node launcher: the process
    # that runs the hooks and the tools is a child of the one the loop started. That CLI
    # busy on its own CPU must not make its silent, hung tool look busy.
    launcher_cli(tmp_path)
    out, _, _ = supervised(tmp_path, '"$PY" cli.py\n', run_id="run-tool", name="launcher.sh", stale_after=30.0,
                           max_runtime=60.0, count_output=False, tool_silent=1.0)
    assert out.status == "stuck" and "inside Bash" in out.detail and "tool-silent window 1s" in out.detail, out
    assert out.kill is not None and out.kill.survivors == ()


# --- the judgement on its own, with samples made up ----------------------------------------

def usage(cpu: float, io: int = 0) -> Usage:
    return Usage(cpu, io, "make -j2")


A, B, C = ProcId(10, 1.0), ProcId(11, 1.0), ProcId(12, 1.0)


@pytest.mark.parametrize("before, after, busy", [
    ({A: usage(1.0)}, {A: usage(1.0)}, False),                    # idle
    ({A: usage(1.0)}, {A: usage(1.5)}, True),                     # CPU
    ({A: usage(1.0, 0)}, {A: usage(1.0, 1 << 20)}, True),         # I/O
    ({A: usage(1.0)}, {A: usage(1.0), B: usage(0.0)}, True),      # a process started
    ({A: usage(1.0), B: usage(5.0)}, {A: usage(1.0)}, False),     # one ended: its CPU is not negative work
    ({}, {A: usage(0.0)}, False),                                 # the tool's first process: no "before"
    ({A: usage(1.0)}, {ProcId(10, 2.0): usage(0.0)}, True),       # pid reused: a new process
])
def test_what_counts_as_work(before, after, busy):
    assert compare(Sample(before), Sample(after)).busy is busy


def beat(event: str, epoch: float, tool: str = "Bash") -> Heartbeat:
    return Heartbeat(epoch, "", "Builder", tool, event, "s-1", 1, "run-tool")


def test_the_tool_watch_follows_the_tool_calls():
    watch = ToolWatch(silent_after=300.0, busy_max=3600.0)

    def at(cpu: float) -> Sample:
        return Sample({A: usage(cpu)})

    assert watch.observe(beat("PreToolUse", 100.0), 0.0, False, at(1.0)).tool == "Bash"
    assert watch.observe(None, 200.0, False, at(1.0)).stuck == ""
    busy = watch.observe(None, 250.0, False, at(2.0))
    assert busy.busy_until == 250.0 and "silent but busy" in busy.note
    assert watch.observe(None, 300.0, False, at(3.0)).note == ""  # said once per tool call
    assert watch.observe(None, 599.0, False, at(3.0)).stuck == ""  # idle for 299 s since its last work
    assert "tool-silent window 300s" in watch.observe(None, 600.0, False, at(3.0)).stuck
    after = watch.observe(beat("PostToolUse", 900.0), 900.0, False, at(4.0))
    assert after.tool == "" and after.busy_until is None and after.stuck == ""
    # Output counts as the tool's work too (a chatty test runner).
    watch.observe(beat("PreToolUse", 1000.0), 1000.0, False, at(4.0))
    assert watch.observe(None, 1299.0, True, at(4.0)).stuck == ""
    assert watch.observe(None, 1598.0, False, at(4.0)).stuck == ""
    assert watch.observe(None, 1600.0, False, at(4.0)).stuck != ""

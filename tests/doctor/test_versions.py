"""Asking a program its version: its first line, or why it said none, always within the bound."""

from __future__ import annotations

import os

from helpers.procs import alive
from helpers.waits import wait_for

from genesis.doctor.versions import parse_version, version_of


def test_the_first_line_a_program_prints_is_its_version(fake_cli, tmp_path):
    cli = fake_cli("agent", 'printf "\\n  agent 1.2.3 (build 7)\\nmore\\n"')
    said = version_of(str(cli), tmp_path, os.environ)
    assert said.line == "agent 1.2.3 (build 7)" and said.problem == ""


def test_a_version_on_stderr_counts_and_a_failure_is_said_with_its_words(fake_cli, tmp_path):
    assert version_of(str(fake_cli("old", 'echo "old 0.9" >&2')), tmp_path, os.environ).line == "old 0.9"
    said = version_of(str(fake_cli("broken", 'echo "no such option" >&2; exit 3')), tmp_path, os.environ)
    assert said.problem == "`broken --version` failed (exit 3): no such option"
    said = version_of(str(fake_cli("mute", "exit 0")), tmp_path, os.environ)
    assert said.problem == "`mute --version` printed nothing"


def test_a_program_that_hangs_is_killed_with_what_it_started(fake_cli, tmp_path):
    pid_file = tmp_path / "child.pid"
    cli = fake_cli("hangs", f"sleep 300 & echo $! > {pid_file}; wait")
    said = version_of(str(cli), tmp_path, os.environ, timeout=0.5)
    assert said.problem == "`hangs --version` did not answer within 0.5s"
    child = int(pid_file.read_text())
    # SIGKILL is sent, not yet acted on: a child not scheduled since still shows as running.
    wait_for(lambda: not alive(child), timeout=10, what=f"the hung program's child {child} killed")


def test_a_program_that_cannot_run_is_said(tmp_path):
    text = tmp_path / "text"
    text.write_text("not a program")
    assert version_of(str(text), tmp_path, os.environ).problem == "cannot run it (Permission denied)"


def test_parse_version():
    assert parse_version("git version 2.39.5") == (2, 39, 5)
    assert parse_version("git version 2.31.0.windows.1") == (2, 31, 0)
    assert parse_version("2.1.329 (Claude Code)") == (2, 1, 329)
    assert parse_version("tool 3.4") == (3, 4, 0)
    assert parse_version("no number") is None

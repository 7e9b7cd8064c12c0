"""The suite never touches the developer's own files: with every folder an agent CLI or Genesis
reads its settings from pointed somewhere, the tests that install hooks leave it empty."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from e2e.harness import installed
from helpers import paths
from helpers.hermetic import CLEARED_NAMES, CLEARED_PREFIXES, cleared

# Where each CLI (and Genesis) would write for a user who set these: a folder each.
FOLDERS = ("HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME", "XDG_RUNTIME_DIR",
           "CLAUDE_CONFIG_DIR", "ANTHROPIC_CONFIG_DIR", "CODEX_HOME", "GEMINI_CLI_HOME", "QWEN_HOME",
           "OPENCODE_CONFIG_DIR", "COPILOT_HOME", "COPILOT_CACHE_HOME", "GH_CONFIG_DIR", "CLOUDSDK_CONFIG",
           "GENESIS_STATE_DIR")
# Settings files named by path: the file's folder must stay empty.
FILES = ("OPENCODE_CONFIG", "GEMINI_CLI_SYSTEM_SETTINGS_PATH", "QWEN_CODE_SYSTEM_SETTINGS_PATH", "GIT_CONFIG_GLOBAL")
# The tests that install, repair and remove every CLI's hook (a user's scope included).
HOOK_TESTS = ["tests/agents/test_claude_settings.py", "tests/agents/test_codex.py", "tests/agents/test_copilot.py",
              "tests/agents/test_gemini.py", "tests/agents/test_opencode.py", "tests/agents/test_qwen.py",
              "tests/agents/test_aider.py"]


def trap(root: Path) -> dict[str, str]:
    """Every variable of FOLDERS and FILES pointed at an empty folder of its own under `root`."""
    env = {}
    for name in FOLDERS + FILES:
        (root / name).mkdir(parents=True)
        env[name] = str(root / name) if name in FOLDERS else str(root / name / "settings")
    return env


def written(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.parent != root)


@pytest.mark.whole
def test_the_hook_tests_write_nothing_where_the_callers_cli_settings_point(tmp_path):
    caught = tmp_path / "trap"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}, **trap(caught)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", *HOOK_TESTS],
                          cwd=paths.ROOT, env=env, capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL)
    assert written(caught) == []
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert re.search(r"\d+ passed", done.stdout), done.stdout[-2000:]


def test_an_e2e_version_check_runs_in_a_throwaway_home_whatever_the_caller_set(tmp_path, monkeypatch):
    # A module's fixture checks its CLI before the autouse fixture of its first test has run.
    caught = tmp_path / "trap"
    for name, value in trap(caught).items():
        monkeypatch.setenv(name, value)
    cli = tmp_path / "cli"
    cli.write_text('#!/bin/sh\nfor d in "$HOME" "${XDG_CONFIG_HOME:-$HOME/.config}" "${CODEX_HOME:-$HOME/.codex}" '
                   '"${COPILOT_HOME:-$HOME/.copilot}" "${OPENCODE_CONFIG_DIR:-$HOME/.config/opencode}"; do\n'
                   '  mkdir -p "$d" && echo seen >"$d/state"\ndone\n'
                   'echo "$HOME $EXTRA" >"$REPORT"\necho "cli 1.0"\n')
    cli.chmod(0o755)
    report = tmp_path / "report"
    assert installed(cli, tmp_path / "cli-install.log", "a CLI", env={"EXTRA": "given", "REPORT": str(report)}) == cli
    home, extra = report.read_text().split()
    assert extra == "given" and not Path(home).exists()  # a home of its own, gone after the check
    assert written(caught) == []


def bash_function(name: str) -> str:
    text = (paths.TESTS / "bats" / "test_helper.bash").read_text()
    found = re.search(rf"^{name}\(\) {{\n.*?^}}\n", text, re.S | re.M)
    assert found, f"no {name}() in test_helper.bash"
    return found.group(0)


@pytest.mark.parametrize("near_miss", [False, True], ids=["cleared", "kept"])
def test_the_bats_helper_clears_what_the_fixture_clears(near_miss):
    names = [p + "PROBE" for p in CLEARED_PREFIXES] + list(CLEARED_NAMES)
    if near_miss:  # an exact name with more after it, or before a prefix: not one of them
        names = [n + "_PROBE" for n in CLEARED_NAMES] + ["PROBE_" + p for p in CLEARED_PREFIXES]
    assert {cleared(n) for n in names} == {not near_miss}
    env = {"PATH": os.environ["PATH"], **{n: "x" for n in names}}
    done = subprocess.run(["bash", "-c", bash_function("hermetic_env") + "hermetic_env\ncompgen -e\n"], env=env,
                          capture_output=True, text=True, check=True)
    left = set(done.stdout.split()) & set(names)
    assert left == {n for n in names if not cleared(n)}

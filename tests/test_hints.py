"""Every `genesis` command Genesis tells people to run is runnable as printed: the genesis in
use and an absolute --project, so that pasted in another repository (the Genesis checkout,
where the README has users stand) it acts on the loop's project, not on that one."""

from __future__ import annotations

import ast
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import paths
from helpers.agent import script
from helpers.git import git
from helpers.loop import loop_env, run_loop
from helpers.state import state_of

import genesis
from genesis.hints import hint

# A genesis command line in a message: `genesis SUBCOMMAND` or `genesis --project`.
COMMANDS = ("stop", "status", "report", "reap", "breaker", "hook", "incidents", "config", "heartbeat", "limit")
SUGGESTS = re.compile(r"\bgenesis\s+(?:--project\b|(?:" + "|".join(COMMANDS) + r")\b)")
# Texts that name a command without asking anyone to run it.
NOT_HINTS = {
    ("genesis/agents/opencode/plugin.py", "written by `genesis hook install"),    # what wrote the plugin file
    ("genesis/agents/opencode/plugin.py", "`genesis hook uninstall --agent opencode` removes it"),
    ("genesis/status/screen.py", "genesis status · "),                           # the screen's title
}
QUOTED = re.compile(r"`([^`]*--project [^`]*)`")


def docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and \
                isinstance(body[0].value, ast.Constant):
            found.add(id(body[0].value))
    return found


def literal_hints() -> list[str]:
    """Every string literal of the package (docstrings aside) that spells a genesis command itself."""
    found = []
    for path in sorted((paths.ROOT / "genesis").rglob("*.py")):
        if path.name == "hints.py" or path == paths.ROOT / "genesis" / "reference.py":
            continue  # the hint itself; the manual's generated pages (written for a reader, not printed)
        tree = ast.parse(path.read_text())
        skip = docstrings(tree)
        rel = path.relative_to(paths.ROOT).as_posix()
        for node in ast.walk(tree):
            if isinstance(node, ast.keyword) and node.arg == "help":
                skip.update(id(n) for n in ast.walk(node.value))  # click's help texts describe, never ask
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip \
                    and SUGGESTS.search(node.value):
                if not any(rel == where and text in node.value for where, text in NOT_HINTS):
                    found.append(f"{rel}:{node.lineno}: {node.value.strip()[:100]!r}")
    return found


@pytest.mark.fault(65)
def test_no_message_spells_a_genesis_command_itself():
    # Each one goes through genesis.hints.hint, which names the genesis in use and the project.
    assert literal_hints() == []


def test_a_hint_names_the_project_by_its_absolute_path_and_quotes_what_the_shell_needs(tmp_path, monkeypatch):
    odd = tmp_path / "my app's dir"
    odd.mkdir()
    monkeypatch.chdir(tmp_path)
    text = hint(Path("my app's dir"), "incidents", "show", "ID")
    words = shlex.split(text)
    assert words[-5:] == ["--project", str(odd), "incidents", "show", "ID"]


def run_in(cwd: Path, command: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """A printed command line, pasted into a shell standing in cwd."""
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.whole
@pytest.mark.parametrize("how", ["console script", "python -m", "PYTHONPATH"])
def test_the_program_in_a_hint_is_the_genesis_that_runs(tmp_path, project, how):
    """The console script's path; `python -m genesis` where this Python finds the package from
    anywhere; with PYTHONPATH where it was borrowed. Pasted elsewhere, the hint works."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep)
                                  if not (Path(p) / "genesis").exists())  # no `genesis` on PATH
    ask = ["--project", str(project), "incidents", "show", "20261121T031400Z-Builder-i1"]
    if how == "console script":
        exe = str(Path(sys.executable).parent / "genesis")
        argv, first = [exe, *ask], [exe]
    elif how == "python -m":
        argv, first = [sys.executable, "-m", "genesis", *ask], [sys.executable, "-m", "genesis"]
    else:
        copy = tmp_path / "copy"
        shutil.copytree(Path(genesis.__file__).parent, copy / "genesis", ignore=shutil.ignore_patterns("__pycache__"))
        argv, first = [sys.executable, "-m", "genesis", *ask], [f"PYTHONPATH={copy}", sys.executable, "-m", "genesis"]
        env["PYTHONPATH"] = str(copy)
    told = subprocess.run(argv, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=60)
    assert told.returncode == 1 and "no incident 20261121T031400Z-Builder-i1" in told.stderr, told.stderr
    assert f"recorded in {project.resolve()};" in told.stderr
    (printed,) = hints_in(told.stderr)
    assert shlex.split(printed)[:len(first)] == first
    env.pop("PYTHONPATH", None)  # a new terminal: only what the hint says
    done = run_in(elsewhere, printed, env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "no incidents recorded\n"


def hints_in(text: str) -> list[str]:
    return QUOTED.findall(text)


def runs_genesis(command: str, program: str) -> bool:
    """The command starts with the genesis the loop used (GENESIS_BIN, or `genesis` that PATH finds as it)."""
    first = shlex.split(command)[0]
    found = shutil.which(first) if os.sep not in first else first
    return found is not None and os.path.realpath(found) == os.path.realpath(program)


STUCK_THEN_IDLE = """#!/usr/bin/env bash
# Iteration 1: silent until killed as stuck (an incident); iteration 2: does nothing.
[ "$GENESIS_ITERATION" = 1 ] && exec sleep 300
exit 0
"""


@pytest.mark.whole
@pytest.mark.fault(65)
def test_the_loop_s_hints_act_on_its_project_when_run_from_another_repository(project, tmp_path):
    checkout = tmp_path / "checkout"  # where the README has users stand: a repository of its own
    checkout.mkdir()
    git(checkout, "init", "-q")
    agent = script(tmp_path / "agent.sh", STUCK_THEN_IDLE)
    env = loop_env(GENESIS_PHASES="Builder", HEARTBEAT_STALE="1.5s", HEARTBEAT_COUNT_OUTPUT="false",
                   PHASE_RETRIES="0", CB_WARNING_THRESHOLD="1", CB_STOP_THRESHOLD="2")
    done = run_loop(project, "--agent-cmd", str(agent), "--max-iterations", "3", env=env)
    assert done.returncode == 3, done.stderr
    out, where = done.stderr, str(project.resolve())
    found = hints_in(out)
    incident = next(h for h in found if " incidents show " in h and not h.endswith(" ID"))
    reset = next(h for h in found if h.endswith(" breaker reset"))
    for command in found:
        assert shlex.split(command)[shlex.split(command).index("--project") + 1] == where, command
        assert runs_genesis(command, env["GENESIS_BIN"]), command
    assert any(h.endswith(" incidents show ID") for h in found)  # the summary's incidents section

    shown = run_in(checkout, incident, env)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith(f"Genesis incident {shlex.split(incident)[-1]}")
    assert (project / "orchestrator" / ".circuit_breaker.json").exists()
    reset_done = run_in(checkout, reset, env)
    assert reset_done.returncode == 0 and "the breaker is CLOSED" in reset_done.stdout, reset_done
    assert not (project / "orchestrator" / ".circuit_breaker.json").exists()
    assert not (checkout / ".git" / "genesis").exists() and not (checkout / "orchestrator").exists()


@pytest.mark.whole
@pytest.mark.fault(65)
def test_a_missing_hook_is_refused_with_commands_that_install_and_check_it_in_the_project(project, tmp_path):
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    git(checkout, "init", "-q")
    env = loop_env(GENESIS_AGENT_CLI="claude", GENESIS_PHASES="Builder",
                   GENESIS_AGENT_CMD=f"{sys.executable} -m genesis.demo.simagent --output-format text")
    done = run_loop(project, "--max-iterations", "1", env=env)
    assert done.returncode == 2, done.stderr
    install = next(h for h in re.findall(r"run: (\S.*?--scope local)", done.stderr))
    check = next(h for h in hints_in(done.stderr) if " hook status " in h)
    assert runs_genesis(install, env["GENESIS_BIN"]) and f"--project {project.resolve()} " in install
    installed = run_in(checkout, install, env)
    assert installed.returncode == 0, installed.stderr
    assert f"installed the heartbeat hook in {project.resolve()}/.claude/settings.local.json" in installed.stdout
    assert not (checkout / ".claude").exists()
    checked = run_in(checkout, check, env)
    assert checked.returncode == 0 and "local: installed in" in checked.stdout, checked
    again = run_loop(project, "--max-iterations", "1", env=env)
    assert again.returncode == 0, again.stderr
    assert "heartbeat hook: working (local settings" in again.stderr
    assert (state_of(project) / "hook.json").exists()

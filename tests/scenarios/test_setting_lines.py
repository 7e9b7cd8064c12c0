"""A newline (or another control character) in a setting's value: the loop reads its settings
one a line from `genesis loop-settings`, so a newline in a path shifted every value after it
(bash opened a chosen path as its lock file, then a traceback). Refused at resolve time, exit
2, the key named, in every form the value can take; nothing opened at the injected paths."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from helpers import paths
from helpers.agent import script
from helpers.git import git, new_repo
from helpers.loop import loop_env

from genesis import exitcodes


def start(project: Path, cwd: Path, *args: str, env: dict) -> subprocess.CompletedProcess:
    """The loop started from cwd (a shifted lock-file line is a path relative to it)."""
    return subprocess.run(["bash", str(paths.LOOP), "--project", str(project), *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


@pytest.fixture
def setup(project: Path, tmp_path: Path):
    agent = script(tmp_path / "agent.sh", "#!/usr/bin/env bash\necho hi >>notes.txt\n")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    return project, cwd, ("--agent-cmd", f"bash {agent}", "--set", "GENESIS_PHASES=Builder", "--max-iterations", "1")


def nothing_opened(tmp_path: Path, cwd: Path) -> None:
    assert not (tmp_path / "x").exists() and not (tmp_path / "evil").exists()
    assert list(cwd.iterdir()) == [], list(cwd.iterdir())


@pytest.mark.fault(85)
@pytest.mark.parametrize("form", ["env", "set"])
def test_a_newline_in_a_path_setting_is_refused_naming_the_key(setup, tmp_path, form):
    project, cwd, args = setup
    value = f"{tmp_path}/x\n{tmp_path}/evil"
    env = loop_env(GENESIS_SANDBOX="off", **({"GENESIS_LOG_DIR": value} if form == "env" else {}))
    extra = ("--set", f"GENESIS_LOG_DIR={value}") if form == "set" else ()
    done = start(project, cwd, *args, *extra, env=env)
    assert done.returncode == exitcodes.USAGE, done.stderr
    where = "the environment" if form == "env" else "a --set flag"
    assert f"GENESIS_LOG_DIR from {where} holds a control character ('\\n' at character" in done.stderr
    assert "Traceback" not in done.stderr
    nothing_opened(tmp_path, cwd)


@pytest.mark.fault(85)
def test_a_control_character_or_a_broken_line_in_genesis_conf_is_refused_naming_the_key(setup, tmp_path):
    project, cwd, args = setup
    conf = project / "orchestrator" / "genesis.conf"
    conf.parent.mkdir()
    conf.write_text(f"GENESIS_STOP_FLAG={tmp_path}/x\x1b{tmp_path}/evil\n")
    git(project, "add", "-A")
    git(project, "commit", "-qm", "settings")
    done = start(project, cwd, *args, env=loop_env(GENESIS_SANDBOX="off"))
    assert done.returncode == exitcodes.USAGE, done.stderr
    assert "GENESIS_STOP_FLAG from orchestrator/genesis.conf holds a control character ('\\x1b' at" in done.stderr
    # A newline inside quotes breaks the line: the key is named there too.
    conf.write_text(f'GENESIS_LOG_DIR="{tmp_path}/x\n{tmp_path}/evil"\n')
    git(project, "commit", "-qam", "settings")
    done = start(project, cwd, *args, env=loop_env(GENESIS_SANDBOX="off"))
    assert done.returncode == exitcodes.USAGE, done.stderr
    assert "genesis.conf:1: GENESIS_LOG_DIR: No closing quotation" in done.stderr
    nothing_opened(tmp_path, cwd)


@pytest.mark.fault(85)
def test_a_project_path_with_a_newline_is_refused_before_the_loop_reads_its_settings(tmp_path):
    project = new_repo(tmp_path / "a\nb")
    agent = script(tmp_path / "agent.sh", "#!/usr/bin/env bash\necho hi >>notes.txt\n")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    done = start(project, cwd, "--agent-cmd", f"bash {agent}", "--set", "GENESIS_PHASES=Builder",
                 "--max-iterations", "1", env=loop_env(GENESIS_SANDBOX="off"))
    assert done.returncode == exitcodes.USAGE, done.stderr
    assert "holds a line break or NUL: the loop reads one value a line" in done.stderr
    assert list(cwd.iterdir()) == []

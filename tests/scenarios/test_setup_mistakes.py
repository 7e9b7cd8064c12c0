"""The real loop started with the mistakes of a first evening: misspelt knobs in the
environment (warned about, with the name each most likely meant) and `$VARIABLE`s in
genesis.conf (warned about: nothing there is expanded), both in one night; the same typo in
genesis.conf or --set (refused, with the same suggestion); and a first run without the
package index (what failed, in pip's words, and how to go on: exit 2). Which words for which
mistake, by replay: tests/test_config.py."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import paths
from helpers.git import git
from helpers.loop import GENESIS, loop_env, run_loop


def conf(project: Path, text: str) -> None:
    (project / "orchestrator").mkdir(exist_ok=True)
    (project / "orchestrator" / "genesis.conf").write_text(text)
    git(project, "add", "-A")
    git(project, "commit", "-qm", "settings")


@pytest.mark.fault(71)
def test_misspelt_knobs_in_the_environment_and_variables_in_genesis_conf_are_warned_about_with_what_was_meant(
        one_builder, tmp_path):
    """GENESIS_MAX_ITERATONS and GENESIS_TRIAGE_COMMAND were silently ignored, and
    GENESIS_LOG_DIR=$HOME/... made a folder named `$HOME` in the project, unsaid. (A misspelt
    alert channel is refused instead: tests/scenarios/test_alert_channels.py.)"""
    project, args = one_builder
    conf(project, "GENESIS_LOG_DIR=$HOME/night-logs\nGENESIS_STOP_FLAG=${NOT_SET_HERE}/stop\n"
                  "PHASE_Builder_TRIGGER='when:[ -n \"$HOME\" ]'\nREAP_PATTERNS='server$'\n")
    env = loop_env(GENESIS_MAX_ITERATONS="1", GENESIS_TRIAGE_COMAND="judge", HEARTBEAT_STALE_MINS="3",
                   PHASE_Builder_TRIGER="never", PHASE_Bulder_PROMPT="x.md", CB_STOPTHRESHOLD="9",
                   # Variables that merely share a prefix, and those Genesis itself sets, are no typo.
                   GENESIS_ITERATION="4", GENESIS_PHASE="Builder", AUTO_RELOAD_PROXY="1",
                   HOME=str(tmp_path / "home"))
    done = run_loop(project, *args, "--max-iterations", "1", env=env)
    assert done.returncode == 0, done.stderr
    for typo, meant in [("GENESIS_MAX_ITERATONS", "GENESIS_MAX_ITERATIONS"),
                        ("GENESIS_TRIAGE_COMAND", "GENESIS_TRIAGE_CMD"),
                        ("HEARTBEAT_STALE_MINS", "HEARTBEAT_STALE"),
                        ("PHASE_Builder_TRIGER", "PHASE_Builder_TRIGGER"),
                        ("CB_STOPTHRESHOLD", "CB_STOP_THRESHOLD")]:
        assert f"{typo} is set in the environment but is not a setting, so it is ignored; did you mean {meant}?" \
            in done.stderr, done.stderr
    # A phase setting for a phase that is not configured is a valid key, but named.
    assert "PHASE_Bulder_PROMPT (the environment) is for a phase named Bulder, which is not in GENESIS_PHASES " \
           "(Builder), so it is ignored; did you mean PHASE_Builder_PROMPT?" in done.stderr
    for name in ("GENESIS_ITERATION", "GENESIS_PHASE ", "AUTO_RELOAD_PROXY"):
        assert name not in done.stderr

    # genesis.conf is never run by a shell: a $VARIABLE there is said, with the value to write.
    assert (f"GENESIS_LOG_DIR='$HOME/night-logs' in orchestrator/genesis.conf is used as written, $HOME and all: "
            f"genesis.conf is never run by a shell, so nothing in it is expanded. Write the value itself: "
            f"GENESIS_LOG_DIR={tmp_path}/home/night-logs") in done.stderr
    assert ("GENESIS_STOP_FLAG='${NOT_SET_HERE}/stop' in orchestrator/genesis.conf is used as written, "
            "$NOT_SET_HERE and all") in done.stderr
    assert "Write the value itself there, or set GENESIS_STOP_FLAG in the environment or with --set, where your " \
           "shell expands it" in done.stderr
    # A when: command is run by bash, and a regex's $ is an anchor: neither is a mistake.
    # (The trigger is named once, as a command trusted on first use: never as a mistake.)
    assert not [line for line in done.stderr.splitlines() if "PHASE_Builder_TRIGGER=" in line and "used as written"
                in line]
    assert "REAP_PATTERNS=" not in done.stderr
    logs = project / "$HOME" / "night-logs"
    assert logs.is_dir()  # as written, and now said

    # The warnings are in the run's console log too, and `config show` says them on stderr.
    assert "did you mean GENESIS_MAX_ITERATIONS?" in next(logs.glob("*/console.log")).read_text()
    shown = subprocess.run(GENESIS + ["--project", str(project), "config", "show"], env=env, capture_output=True,
                           text=True, timeout=60)
    assert shown.returncode == 0
    assert "genesis: warning: GENESIS_TRIAGE_COMAND is set in the environment" in shown.stderr


@pytest.mark.fault(71)
def test_the_same_typo_in_genesis_conf_is_refused_with_the_same_suggestion(one_builder):
    project, args = one_builder
    refused = run_loop(project, *args, "--set", "GENESIS_MAX_ITERATONS=1")
    assert refused.returncode == 2
    assert "unknown setting GENESIS_MAX_ITERATONS; did you mean GENESIS_MAX_ITERATIONS?" in refused.stderr
    conf(project, "GENESIS_MAX_ITERATONS=1\n")
    done = run_loop(project, *args, "--max-iterations", "1")
    assert done.returncode == 2
    assert "genesis.conf:1: 'GENESIS_MAX_ITERATONS=1' is not KEY=VALUE with a known key; did you mean " \
           "GENESIS_MAX_ITERATIONS?" in done.stderr


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.fault(72)
def test_an_offline_first_run_says_what_failed_and_exits_2(project, tmp_path):
    """A fresh checkout (no .venv) whose first run cannot reach the package index ended in
    pip's raw error, exit 1."""
    checkout = tmp_path / "genesis-checkout"
    checkout.mkdir()
    for name in ("start-multi-agent-loop.sh", "pyproject.toml", "README.md"):
        shutil.copy2(paths.ROOT / name, checkout / name)
    shutil.copytree(paths.ROOT / "genesis", checkout / "genesis", ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in loop_env().items() if not k.startswith("PIP_") and k != "GENESIS_BIN"}
    env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}",  # a python3 >= 3.10 with venv
               PIP_CONFIG_FILE=os.devnull, PIP_INDEX_URL=f"http://127.0.0.1:{closed_port()}/simple",
               PIP_RETRIES="0", PIP_DEFAULT_TIMEOUT="5", PIP_NO_CACHE_DIR="1", TMPDIR=str(tmp_path))
    done = subprocess.run(["bash", str(checkout / "start-multi-agent-loop.sh"), "--project", str(project)], env=env,
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stderr
    venv = checkout / ".venv"
    assert f"genesis: error: first run: could not install Genesis into {venv}: 'pip install -e {checkout}' " \
           f"failed. Its last lines:" in done.stderr
    assert "    ERROR: Could not find a version that satisfies the requirement setuptools" in done.stderr
    assert "connect to the network, or point PIP_INDEX_URL at an index you can reach, then run the same " \
           "command again" in done.stderr
    assert f"{venv}/bin/python -m pip install -e {checkout}" in done.stderr
    assert "Traceback" not in done.stderr and "subprocess-exited-with-error" not in done.stderr
    kept = list(tmp_path.glob("genesis-install.*"))
    assert len(kept) == 1 and f"its full output: {kept[0]}" in done.stderr
    assert "ERROR:" in kept[0].read_text()

"""The home's start refuses what would fail across machines, before it reaches Temporal."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("temporalio", reason="temporalio is not installed: pip install -e '.[test]'")

from helpers.fleet import fleet_env, fleet_project  # noqa: E402
from helpers.paths import LOOP  # noqa: E402

from genesis import exitcodes  # noqa: E402


def test_without_the_shared_remote_the_fleet_refuses_with_what_to_do(project):
    fleet_project(project, ["a task"])
    done = subprocess.run(["bash", str(LOOP), "--project", str(project), "--parallel", "2", "--engine", "temporal",
                           "--temporal-address", "127.0.0.1:9"], env=fleet_env(), capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == exitcodes.USAGE, done.stderr
    assert "no remote named 'origin'" in done.stderr and "GENESIS_TEMPORAL_REMOTE" in done.stderr


def test_the_engine_flags_need_parallel(project):
    done = subprocess.run(["bash", str(LOOP), "--project", str(project), "--engine", "temporal"], env=fleet_env(),
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == exitcodes.USAGE and "with --parallel N" in done.stderr, done.stderr


def test_a_fleet_file_is_refused_on_the_temporal_engine(tmp_path):
    fleet = tmp_path / "fleet.toml"
    fleet.write_text('[[project]]\npath = "app"\nparallel = 1\n')
    for how in (["--engine", "temporal"], []):   # the flag, or the knob in the environment
        env = {**fleet_env(), **({} if how else {"GENESIS_FLEET_ENGINE": "temporal"})}
        done = subprocess.run([sys.executable, "-m", "genesis", "--project", str(tmp_path), "fleet", "run",
                               "--fleet", str(fleet), *how], env=env, capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL)
        assert done.returncode == exitcodes.USAGE, done.stderr
        assert "the Temporal engine runs one project's fleet" in done.stderr, done.stderr

"""Without the temporal extra, every command of the Temporal engine says how to install it and
exits 2, never with a traceback; the local fleet's status does not need it."""

from __future__ import annotations

import subprocess
import sys

import pytest

# temporalio made unimportable for this process only, as on a machine without the extra.
WITHOUT = ("import sys; sys.modules['temporalio'] = None; from genesis.cli import main; "
           "sys.argv = ['genesis'] + sys.argv[1:]; main()")


def genesis_without_temporalio(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", WITHOUT, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize("args", [
    ("fleet", "run", "--parallel", "2", "--engine", "temporal"),
    ("worker",),
    ("temporal", "dev"),
    ("fleet", "status", "--engine", "temporal"),
    ("--set", "GENESIS_FLEET_ENGINE=temporal", "fleet", "status"),
], ids=" ".join)
def test_a_temporal_command_without_the_extra_says_what_to_install(project, args):
    done = genesis_without_temporalio("--project", str(project), *args, cwd=project)
    assert done.returncode == 2, done.stderr
    assert "pip install 'genesis-loop[temporal]'" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_the_local_fleet_status_needs_no_extra(project):
    done = genesis_without_temporalio("--project", str(project), "fleet", "status", cwd=project)
    assert done.returncode == 5, done.stderr
    assert "No fleet has run" in done.stdout

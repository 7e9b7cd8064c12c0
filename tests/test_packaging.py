"""A plain `pip install` ships the hook script (executable) and the default prompts."""

import json
import os
import stat
import subprocess
import sys
import sysconfig
import zipfile

import pytest

from helpers import paths

ROOT = paths.ROOT


@pytest.mark.whole
def test_the_wheel_carries_an_executable_hook_and_the_prompts(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "-w", str(tmp_path), str(ROOT)], check=True, capture_output=True)
    wheel = next(tmp_path.glob("genesis_loop-*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        hook = zf.getinfo("genesis/data/genesis-heartbeat.sh")
        assert stat.S_IMODE(hook.external_attr >> 16) & 0o111, "the hook must stay executable"
    for prompt in ("builder", "criticizer", "planner"):
        assert f"genesis/data/prompts/{prompt}.md" in names
    assert "genesis/demo/simagent.py" in names


@pytest.mark.whole
def test_hook_install_from_a_plain_pip_install_points_at_the_packaged_hook(tmp_path, hermetic):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(tmp_path), str(ROOT)],
                   check=True, capture_output=True)
    wheel = next(tmp_path.glob("genesis_loop-*.whl"))
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site),
                    str(wheel)], check=True, capture_output=True)
    # -S: no site hooks, so this checkout's editable install stays out of the way; the
    # dependencies come from the test environment's site-packages on the path.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), sysconfig.get_paths()["purelib"]])}
    python = [sys.executable, "-S"]
    where = subprocess.run(python + ["-c", "import genesis; print(genesis.__file__)"], env=env, cwd=tmp_path,
                           capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(site))  # the installed copy, not this checkout
    subprocess.run(python + ["-m", "genesis", "hook", "install"], env=env, check=True,
                   capture_output=True, cwd=tmp_path)
    settings = json.loads((hermetic / ".claude" / "settings.json").read_text())
    command = settings["hooks"]["PostToolUse"][0]["hooks"][0]["command"]
    assert command == f"bash {site / 'genesis' / 'data' / 'genesis-heartbeat.sh'}"
    beat = tmp_path / "hb.json"
    subprocess.run(["/bin/sh", "-c", command + " test_tool"], env={**env, "GENESIS_HEARTBEAT_FILE": str(beat)},
                   stdin=subprocess.DEVNULL, check=True)
    assert json.loads(beat.read_text())["tool"] == "test_tool"

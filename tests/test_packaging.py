"""A plain `pip install` ships the hook script (executable) and the default prompts."""

import stat
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


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
    assert "genesis/simagent.py" in names

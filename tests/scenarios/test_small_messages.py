"""Messages of the real loop in two corners: a reset time where the local zone is UTC (said
once, not "20:22 UTC (20:22 UTC)"), and a full disk (events that cannot be recorded are said
in words, never as a Python dict)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.agent import script
from helpers.loop import GENESIS, LOOP, loop_env
from helpers.fakeclaude import FAKE_CLAUDE, FIXTURES

STAMP = r"\d{4}-\d\d-\d\d \d\d:\d\d"


@pytest.fixture
def weekly(project: Path, tmp_path: Path):
    """Runs the loop against the stand-in `claude` replaying a weekly limit 2+ days away."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script(bin_dir / "claude", FAKE_CLAUDE.format(python=sys.executable))
    subprocess.run(GENESIS + ["--project", str(project), "hook", "install", "--scope", "local"], check=True,
                   capture_output=True)

    def run(tz: str) -> str:
        env = loop_env(PATH=f"{bin_dir}:{loop_env()['PATH']}", FAKE_STREAM=str(FIXTURES / "limit_seven_day.jsonl"),
                       FAKE_CALLS=str(tmp_path / "calls"), FAKE_RESET_IN="200000", TZ=tz)
        done = subprocess.run(["bash", str(LOOP), "--project", str(project)], env=env, capture_output=True,
                              text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert done.returncode == 20, done.stderr
        subprocess.run(GENESIS + ["--project", str(project), "limit", "clear"], capture_output=True, timeout=60)
        return done.stderr
    return run


@pytest.mark.fault(73)
def test_a_reset_time_in_utc_is_said_once(weekly):
    said = weekly("UTC")
    assert re.search(rf"resets at {STAMP} UTC, later than GENESIS_MAX_LIMIT_WAIT", said), said
    assert re.search(rf"Restart the loop after {STAMP} UTC\b", said), said
    assert not re.search(rf"UTC \({STAMP} UTC\)", said), said
    # Elsewhere, the local time and its zone, then UTC.
    said = weekly("JST-9")
    assert re.search(rf"resets at {STAMP} JST \({STAMP} UTC\), later than", said), said


# Inside a private mount namespace: the project on a real, small tmpfs, which the agent fills
# with a build artefact (ignored by git), as a real build fills a real disk.
ON_A_SMALL_DISK = r"""
set -u
mount -t tmpfs -o size=8m,mode=700 tmpfs "$1" || exit 77
cd "$1" && git init -q project && cd project
git config user.name Agent && git config user.email agent@example.invalid
printf 'build/\n' >.gitignore && echo hello >README.md && git add -A && git commit -qm init
bash "$2" --project "$PWD" --agent-cmd "bash $3" --max-iterations 2
echo "$?" >"$1/../status"
"""
FILLER = """#!/usr/bin/env bash
mkdir -p build && dd if=/dev/zero of=build/blob bs=64k count=1000 2>/dev/null
echo "built what fitted"
"""


@pytest.mark.fault(73)
def test_events_a_full_disk_keeps_out_of_the_ledger_are_said_in_words(tmp_path):
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1) to mount a small disk")
    disk = tmp_path / "disk"
    disk.mkdir()
    agent = script(tmp_path / "agent.sh", FILLER)
    done = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "bash", "-c", ON_A_SMALL_DISK, "_",
                           str(disk), str(LOOP), str(agent)], env=loop_env(), capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)
    if done.returncode == 77:
        pytest.skip("cannot mount a tmpfs here (no mount namespace)")
    assert (tmp_path / "status").read_text().strip() == "6", done.stderr
    said = done.stderr
    assert re.search(r"not recorded in the ledger: phase end \(iteration 1, phase Builder, pid \d+, "
                     r"(box pid \d+, )?status exited, returncode \d+, duration \d+s, .*, started \d\d:\d\d:\d\d \S+"
                     r"(, log \S+, tail \d+)?\): "
                     r"no room to write "
                     r"\S+/ledger.sqlite3", said), said
    assert "{'" not in said and "': " not in said, said

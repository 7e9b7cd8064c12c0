"""The box chosen at the run's start: said once with what it protects, recorded in the ledger; a
named box that cannot run refuses the start (exit 29); GENESIS_SANDBOX=off says what is lost;
where bubblewrap cannot run, Landlock boxes the agent. Real loops."""

from __future__ import annotations

import os
import pwd
import shutil
import tempfile
from pathlib import Path

import pytest
from helpers import paths
from helpers.agent import script
from helpers.loop import loop_env, run_loop
from helpers.state import events_of

from genesis.sandbox.landlock import abi

AGENT = """#!/usr/bin/env bash
echo "agent ran" >ran.txt
echo "outside" >"$OUTSIDE/planted.txt" 2>/dev/null || echo "outside refused" >>ran.txt
"""


def _night(project, tmp_path, outside: Path | None = None, **extra):
    agent = script(tmp_path / "agent.sh", AGENT)
    if outside is None:
        outside = tmp_path / "outside"
        outside.mkdir()
    return run_loop(project, "--agent-cmd", str(agent), "--max-iterations", "1",
                    env=loop_env(GENESIS_PHASES="Builder", OUTSIDE=str(outside), **extra), timeout=90)


@pytest.mark.whole
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="no bubblewrap here")
def test_the_default_box_is_said_once_and_recorded(project, tmp_path):
    done = _night(project, tmp_path)
    assert done.returncode == 0, done.stderr
    line = ("sandbox: bubblewrap: the agent cannot write Genesis's state or code, cannot see or signal the loop, "
            "has a private /tmp")
    # Once at the start (the night's report at the end names it again as "the agent's box").
    assert done.stderr.count(line) == 1
    assert "HOME is private" in done.stderr
    boxes = [e for e in events_of(project) if e["event"] == "sandbox"]
    assert len(boxes) == 1 and boxes[0]["box"] == "bubblewrap"
    assert any(p.endswith("/.git/genesis") for p in boxes[0]["protected"])


def test_a_named_box_that_cannot_run_refuses_the_start_with_how_to_install_it(project, tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    script(fake / "bwrap", "#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
    done = _night(project, tmp_path, GENESIS_SANDBOX="bwrap", PATH=f"{fake}:/usr/bin:/bin")
    assert done.returncode == 29, done.stderr
    assert "GENESIS_SANDBOX=bwrap, but that box cannot run here (a trial box failed: bwrap: setting up uid map: " \
           "Permission denied): install it (Debian/Ubuntu: apt-get install bubblewrap" in done.stderr
    assert not (project / "ran.txt").exists()


@pytest.mark.whole
def test_off_says_what_the_user_loses(project, tmp_path):
    done = _night(project, tmp_path, GENESIS_SANDBOX="off")
    assert done.returncode == 0, done.stderr
    assert "sandbox: off (GENESIS_SANDBOX=off): the agent can edit Genesis's state and code, signal the loop" \
           in done.stderr
    assert (tmp_path / "outside" / "planted.txt").exists()


def _beyond_landlock() -> Path:
    """A folder of ours where Landlock lets the agent write nothing: the checkout, unless it is
    under a temp folder (a CI clone in /tmp), else the real user's home (the test's is its own)."""
    writable = ("/tmp", "/var/tmp", "/dev", os.path.realpath(tempfile.gettempdir()))
    for place in (paths.ROOT, Path(pwd.getpwuid(os.getuid()).pw_dir)):
        real = os.path.realpath(place)
        if os.access(real, os.W_OK) and not any(real == w or real.startswith(w + "/") for w in writable):
            return Path(real)
    pytest.skip("no folder of ours outside Landlock's writable places")


@pytest.mark.whole
@pytest.mark.skipif(abi() < 1, reason="no Landlock in this kernel")
def test_where_bubblewrap_cannot_run_landlock_boxes_the_agent(project, tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    script(fake / "bwrap", "#!/bin/sh\nexit 1\n")
    # A folder outside the project, HOME and the temp folders: Landlock's writable places.
    outside = Path(tempfile.mkdtemp(prefix=".landlock-test-", dir=_beyond_landlock()))
    try:
        done = _night(project, tmp_path, outside, PATH=f"{fake}:/usr/bin:/bin")
        assert done.returncode == 0, done.stderr
        assert "sandbox: landlock: the agent writes only beneath the project, HOME and the temp folders" \
            in done.stderr
        assert (project / "ran.txt").read_text() == "agent ran\noutside refused\n"
        assert not (outside / "planted.txt").exists()
    finally:
        shutil.rmtree(outside)


@pytest.mark.whole
@pytest.mark.skipif(shutil.which("bwrap") is None or abi() < 1, reason="needs bubblewrap and Landlock")
def test_a_box_that_breaks_mid_night_is_said_never_a_silent_downgrade(project, tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    broken = tmp_path / "bwrap-broken"
    # bubblewrap works until the first agent has run, then fails as a kernel update could make it.
    script(fake / "bwrap", f"#!/bin/sh\n[ -e {broken} ] && exit 1\nexec {shutil.which('bwrap')} \"$@\"\n")
    agent = script(tmp_path / "agent.sh", f"#!/bin/sh\necho ran >>ran.txt\ntouch {broken}\n")
    done = run_loop(project, "--agent-cmd", str(agent), "--max-iterations", "2",
                    env=loop_env(GENESIS_PHASES="Builder", PATH=f"{fake}:/usr/bin:/bin"), timeout=90)
    assert done.returncode == 0, done.stderr
    assert (project / "ran.txt").read_text() == "ran\nran\n"
    assert "this phase's agent runs in a different box than at the start (bubblewrap then): sandbox: landlock" \
        in done.stderr
    changed = [e for e in events_of(project) if e["event"] == "sandbox_changed"]
    assert [(e["was"], e["box"]) for e in changed] == [("bubblewrap", "landlock")]

"""A stand-in `claude` that replays a recorded stream-json run (tests/fixtures/claude/), for
whole loops that must meet a usage limit or an API error without a model."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from helpers import paths
from helpers.agent import script
from helpers.git import git
from helpers.loop import GENESIS, loop_env

FIXTURES = paths.FIXTURES / "claude"

# Replays FAKE_STREAM: the reset moved to now + FAKE_RESET_IN, after FAKE_SLEEP seconds, with
# the exit status of the run it came from; each call is counted in FAKE_CALLS when set.
FAKE_CLAUDE = r'''#!{python}
import json, os, re, sys, time
if "FAKE_CALLS" in os.environ:
    with open(os.environ["FAKE_CALLS"], "a") as fh:
        fh.write(os.environ.get("GENESIS_AGENT", "?") + "\n")
text = open(os.environ["FAKE_STREAM"]).read()
if "FAKE_RESET_IN" in os.environ:
    reset = int(time.time() + float(os.environ["FAKE_RESET_IN"]))
    text = re.sub(r'"resetsAt":\d+', f'"resetsAt":{{reset}}', text)
time.sleep(float(os.environ.get("FAKE_SLEEP", "0")))
sys.stdout.write(text)
last = json.loads(text.strip().splitlines()[-1])
sys.exit(1 if last.get("is_error") else 0)
'''


@dataclass(frozen=True)
class Replay:
    """A project whose loop runs the stand-in `claude` first on PATH, the hook installed."""
    project: Path
    bin_dir: Path
    calls: Path

    def env(self, stream: str, **extra: str) -> dict[str, str]:
        """The loop's environment replaying `stream` (a file of tests/fixtures/claude/)."""
        return loop_env(PATH=f"{self.bin_dir}{os.pathsep}{os.environ['PATH']}", FAKE_STREAM=str(FIXTURES / stream),
                        FAKE_CALLS=str(self.calls), **extra)

    def called(self) -> list[str]:
        """The phases that ran the stand-in, in order."""
        return self.calls.read_text().splitlines()


def replay(project: Path, folder: Path) -> Replay:
    """Set up the project (a committer, the hook installed locally) and the stand-in in folder/bin."""
    git(project, "config", "user.name", "Agent")
    git(project, "config", "user.email", "agent@example.invalid")
    bin_dir = folder / "bin"
    bin_dir.mkdir(exist_ok=True)
    script(bin_dir / "claude", FAKE_CLAUDE.format(python=sys.executable))
    subprocess.run(GENESIS + ["--project", str(project), "hook", "install", "--scope", "local"], check=True,
                   capture_output=True)
    calls = folder / "calls.txt"
    calls.write_text("")
    return Replay(project, bin_dir, calls)

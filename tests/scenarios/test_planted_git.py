"""A hostile agent plants code in the repository's git config (a clean filter, fsmonitor, a
pre-commit hook), through the real loop script, in the default box: Genesis's auto-commit
runs none of it, the planting is undone, kept as evidence, and named on the console, in the
ledger and in the report; the user's own `git commit` afterwards runs nothing planted."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from helpers.agent import script
from helpers.git import git
from helpers.loop import GENESIS, loop_env, run_loop
from helpers.state import events_of

PLANTER = """#!/usr/bin/env bash
set -e
printf 'touch "%s"\\ncat\\n' "{marks}/filter-ran" > .git/payload.sh
git config filter.x.clean "sh .git/payload.sh"
git config core.fsmonitor "touch {marks}/fsmonitor-ran; true"
echo '*.txt filter=x' > .gitattributes
printf '#!/bin/sh\\ntouch "%s"\\n' "{marks}/hook-ran" > .git/hooks/pre-commit
chmod +x .git/hooks/pre-commit
echo "the agent's real work" > work.txt
"""


@pytest.mark.fault(33)
def test_a_planted_filter_fsmonitor_and_hook_never_run_and_are_undone_and_named(project, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    agent = script(tmp_path / "planter.sh", PLANTER.format(marks=marks))
    done = run_loop(project, "--agent-cmd", str(agent), "--max-iterations", "1",
                    env=loop_env(GENESIS_PHASES="Builder", PHASE_RETRIES="0", HEARTBEAT_STALE_SECONDS="120"))
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in marks.iterdir()) == []  # nothing the agent wrote ran outside the box
    assert git(project, "show", "HEAD:work.txt") == "the agent's real work\n"  # as written, no filter
    assert "the agent planted a git clean filter `x` (filter.x.clean = 'sh .git/payload.sh') in .git/config; " \
           "undone, kept at " in done.stderr
    assert "/planted/1-Builder/git-config.found" in done.stderr
    assert "the agent planted a git hook `pre-commit` in .git/hooks/pre-commit; undone" in done.stderr
    planted = [e for e in events_of(project) if e["event"] == "git_planted"]
    assert {(e["where"], e["undone"]) for e in planted} == {(".git/config", True), (".git/hooks/pre-commit", True),
                                                            (".gitattributes", False)}
    assert len([e for e in planted if e["where"] == ".git/config"]) == 2  # the filter and fsmonitor
    kept = Path(project / [e["kept"] for e in planted if e["where"] == ".git/hooks/pre-commit"][0])
    assert "hook-ran" in kept.read_text()
    assert subprocess.run(["git", "config", "filter.x.clean"], cwd=project).returncode == 1
    report = subprocess.run(GENESIS + ["--project", str(project), "report"], capture_output=True, text=True,
                            timeout=60)
    assert report.returncode == 0, report.stderr
    assert "git config planted by the agent" in report.stdout and "filter `x`" in report.stdout
    # The user's first commit of the morning, with the user's own git: nothing planted runs.
    (project / "notes.txt").write_text("mine\n")
    git(project, "add", "-A")
    git(project, "commit", "-qm", "morning")
    assert sorted(p.name for p in marks.iterdir()) == []

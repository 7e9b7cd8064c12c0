"""Fail closed where the box is absent (GENESIS_SANDBOX=off): an agent that takes Genesis's own
state from under the running loop (its state folder, the run's settings snapshot, the
ledger's tables, a remembered limit) never gets a second loop in, new settings mid-run, an
endless night or a refused restart. Real loops, real agents, real git; the rules behind them
are replayed too (tests/loop/test_recovery.py, tests/loop/test_limits.py)."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner
from helpers.agent import script
from helpers.git import git
from helpers.loop import LOOP, loop_env, run_loop
from helpers.state import events_of, state_of
from helpers.waits import wait_for

from genesis.cli import cli
from genesis.store.looplock import current_holder

NO_BOX = dict(GENESIS_SANDBOX="off", GENESIS_PHASES="Builder", HEARTBEAT_COUNT_OUTPUT="false")


@pytest.fixture
def agents(project: Path, tmp_path: Path):
    git(project, "config", "user.name", "Agent")
    git(project, "config", "user.email", "agent@example.invalid")

    def make(name: str, text: str) -> Path:
        return script(tmp_path / name, text)

    return make


# Deletes Genesis's state folder, then works on until the test says go, and commits.
DELETES_STATE = r"""#!/usr/bin/env bash
set -eu
echo $$ >"$MARKS/agent.pid"
rm -rf "$(git rev-parse --absolute-git-dir)/genesis"
: >"$MARKS/deleted"
for _ in $(seq 1 600); do [ -e "$MARKS/go" ] && break; sleep 0.1; done
echo "first loop's work" >first.txt
git add first.txt && git commit -qm "first loop: its work"
"""
SECOND = r"""#!/usr/bin/env bash
echo "second loop's work" >second.txt
git add second.txt && git commit -qm "second loop: its work"
"""


@pytest.mark.fault(74)
def test_fault_74_a_deleted_state_folder_never_lets_a_second_loop_in(project, agents, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    first_agent, second_agent = agents("deletes.sh", DELETES_STATE), agents("second.sh", SECOND)
    env = loop_env(MARKS=str(marks), HEARTBEAT_STALE="120s", **NO_BOX)
    first = subprocess.Popen(["bash", str(LOOP), "--project", str(project), "--agent-cmd", str(first_agent),
                              "--max-iterations", "1"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, stdin=subprocess.DEVNULL)
    try:
        wait_for(lambda: (marks / "deleted").exists(), timeout=90, what="the agent deleting the state folder")
        lock = state_of(project) / "loop.lock"
        try:  # the watcher's next check makes the folder and the lock again (never, before the fix)
            wait_for(lambda: current_holder(lock, lock.with_name("loop.json")) is not None, timeout=5,
                     what="the lock made again and held")
        except AssertionError:
            pass
        second = run_loop(project, "--agent-cmd", str(second_agent), "--max-iterations", "1", env=env, timeout=60)
        # Refused as a second loop, with the first one's live agent untouched.
        assert second.returncode == 4, second.stderr
        assert "another Genesis loop is already running" in second.stderr
        agent = psutil.Process(int((marks / "agent.pid").read_text()))
        assert agent.is_running() and agent.status() != psutil.STATUS_ZOMBIE
        (marks / "go").touch()
        out, err = first.communicate(timeout=60)
    finally:
        (marks / "go").touch()
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 0, err
    # The first loop's work alone, committed; the second loop never ran an agent.
    assert not (project / "second.txt").exists()
    log = git(project, "log", "--format=%s").splitlines()
    assert "first loop: its work" in log and "second loop: its work" not in log
    # What was lost is said, and the night's record goes on in the new ledger to its end.
    (lost,) = events_of(project, kind="state_lost")
    assert lost["by"] == "watcher" and not lost["stopped"]
    assert "ledger's record of this run before now went with it" in err, err
    assert "no summary" not in err and "iteration 1: progress" in err
    (end,) = events_of(project, kind="loop_end")
    assert end["exit_code"] == 0 and end["run_id"] == lost["run_id"]
    assert events_of(project, kind="phase_end")[0]["ending"] == "finished"


# Loosens its own supervision in genesis.conf, then deletes the run's snapshot of the settings.
EDITS_CONF = r"""#!/usr/bin/env bash
set -eu
printf 'HEARTBEAT_STALE=86400s\nAUTO_COMMIT=false\n' >>orchestrator/genesis.conf
rm -f "$(git rev-parse --absolute-git-dir)/genesis/config.json"
echo "iteration $GENESIS_ITERATION" >>work.txt
"""


@pytest.mark.fault(76)
def test_fault_76_a_deleted_settings_snapshot_stops_the_run_instead_of_reading_genesis_conf(project, agents):
    (project / "orchestrator").mkdir()
    (project / "orchestrator" / "genesis.conf").write_text("# the user's settings\n")
    git(project, "add", "-A")
    git(project, "commit", "-qm", "settings")
    edits = agents("edits.sh", EDITS_CONF)
    done = run_loop(project, "--agent-cmd", str(edits), "--max-iterations", "3", env=loop_env(**NO_BOX))
    assert done.returncode == 26, done.stderr
    assert "settings snapshot" in done.stderr and "Stopping rather than reading genesis.conf" in done.stderr
    # The phase that did it was the last: no phase ran under the edited settings.
    assert len(events_of(project, kind="phase_start")) == 1
    assert events_of(project, kind="loop_end")[-1]["exit_code"] == 26


# Drops the ledger's events and retries (what retry accounting reads), then hangs, every time.
DROPS_LEDGER = r"""#!/usr/bin/env bash
set -eu
"$PY" - "$(git rev-parse --absolute-git-dir)/genesis/ledger.sqlite3" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], timeout=10)
for table in ("events", "retries"):
    db.execute(f"DROP TABLE IF EXISTS {table}")
db.commit()
PY
exec sleep 300
"""


@pytest.mark.fault(75)
def test_fault_75_dropped_ledger_tables_neither_make_retries_endless_nor_lose_later_nights(project, agents, tmp_path):
    drops = agents("drops.sh", DROPS_LEDGER)
    env = loop_env(PY=sys.executable, HEARTBEAT_STALE="1.5s", GENESIS_MAX_RECOVERIES="1", **NO_BOX)
    done = run_loop(project, "--agent-cmd", str(drops), "--max-iterations", "4", env=env, timeout=60)
    # The budget held though the ledger lost its retries: iteration 1 retried once and failed,
    # iteration 2's stuck phase found the night's one recovery spent.
    assert done.returncode == 25, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert "recovery budget (GENESIS_MAX_RECOVERIES=1) is spent" in done.stderr
    # The damaged ledger was kept aside (with its WAL) and said; the new one holds the rest.
    assert [p for p in state_of(project).glob("ledger.sqlite3.corrupt-*") if not p.name.endswith(("-wal", "-shm"))]
    assert "the ledger was damaged" in done.stderr and "kept aside" in done.stderr, done.stderr
    assert events_of(project, kind="ledger_reset")
    assert events_of(project, kind="loop_end")[-1]["exit_code"] == 25
    # The report reads it without a traceback (in this process, as the views below); a later night
    # is recorded.
    report = CliRunner().invoke(cli, ["--project", str(project), "report"], catch_exceptions=False)
    assert "Traceback" not in report.output and report.exit_code == 0, (report.output, done.stderr)
    ok = agents("ok.sh", "#!/usr/bin/env bash\necho fine >ok.txt\n")
    later = run_loop(project, "--agent-cmd", str(ok), "--max-iterations", "1", env=env, timeout=60)
    assert later.returncode == 0, later.stderr
    assert [e["exit_code"] for e in events_of(project, kind="loop_end")][-1] == 0
    # On a damaged ledger, every view says so in a line, never with a traceback (a copy of it, in
    # a project where no loop's late writer, such as an alert's deliverer, starts a new one).
    # (The views run in this process: an exception they did not handle would fail the test.)
    copy = tmp_path / "copy"
    copy.mkdir()
    git(copy, "init", "-q")
    state_of(copy).mkdir(mode=0o700)
    with sqlite3.connect(state_of(project) / "ledger.sqlite3") as raw, \
            sqlite3.connect(state_of(copy) / "ledger.sqlite3") as kept:
        raw.backup(kept)
        kept.execute("DROP TABLE events")
    for view in (["report"], ["report", "--json"], ["status"], ["incidents"]):
        shown = CliRunner().invoke(cli, ["--project", str(copy), *view], catch_exceptions=False)
        assert "Traceback" not in shown.output, (view, shown.output)
    damaged = CliRunner().invoke(cli, ["--project", str(copy), "report"], catch_exceptions=False)
    assert damaged.exit_code == 1 and "is damaged (the ledger lacks its tables events)" in damaged.stderr


@pytest.mark.fault(77)
def test_fault_77_a_planted_usage_limit_never_refuses_a_start(project, agents):
    """One planted in the file as an older Genesis wrote it: not applied. (One planted for this
    very CLI and account, which would idle the night: tests/loop/test_limits.py replays it.)"""
    ok = agents("ok.sh", "#!/usr/bin/env bash\necho \"ran $GENESIS_ITERATION\" >>ran.txt\n")
    env = loop_env(**NO_BOX)
    limit_file = state_of(project) / "limit.json"
    state_of(project).mkdir(mode=0o700, parents=True, exist_ok=True)
    # A weekly limit three days away, in the file as an older Genesis wrote it (for the whole CLI).
    now = time.time()
    limit_file.write_text(json.dumps({"resets_at": now + 3 * 86400, "kind": "seven_day", "guessed": False,
                                      "message": "You've hit your weekly limit", "seen_at": now - 10}))
    first = run_loop(project, "--agent-cmd", str(ok), "--max-iterations", "1", env=env, timeout=60)
    assert first.returncode == 0, first.stderr
    assert (project / "ran.txt").read_text() == "ran 1\n"
    assert "no run of Genesis recorded" in first.stderr and "not applied" in first.stderr
    assert not limit_file.exists() and list(state_of(project).glob("limit.json.unvouched-*"))
    assert events_of(project, kind="limit_unvouched")
    assert not events_of(project, kind="wait_start")


@pytest.mark.fault(84)
def test_fault_84_a_ledger_held_by_a_foreign_writer_is_not_the_watcher_paused(project, agents, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    hang = agents("hang.sh", '#!/usr/bin/env bash\necho $$ >"$MARKS/started"\nexec sleep 300\n')
    env = loop_env(MARKS=str(marks), HEARTBEAT_STALE="4s", HEARTBEAT_CHECK_INTERVAL="1",
                   AGENT_MAX_RUNTIME="60s", PHASE_RETRIES="0", **NO_BOX)
    loop = subprocess.Popen(["bash", str(LOOP), "--project", str(project), "--agent-cmd", str(hang),
                             "--max-iterations", "1"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, stdin=subprocess.DEVNULL)
    holder = None
    try:
        wait_for(lambda: (marks / "started").exists(), timeout=90, what="the agent's start")
        # Another program takes the ledger's write lock and keeps it: every write of the loop's waits.
        holder = sqlite3.connect(str(state_of(project) / "ledger.sqlite3"), timeout=10, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        agent = psutil.Process(int((marks / "started").read_text()))
        # Ended well before the runtime cap; then the other program lets go.
        wait_for(lambda: not agent.is_running() or agent.status() == psutil.STATUS_ZOMBIE, timeout=25,
                 what="the hung agent ended")
        holder.close()
        _out, err = loop.communicate(timeout=60)
    finally:
        if loop.poll() is None:
            loop.kill()
            loop.wait()
        if holder is not None:
            holder.close()
    # Killed as stuck by its window (4 s) and a check or two, not left to the runtime cap (60 s):
    # the watcher's own waits on the ledger are not taken for its being paused.
    assert loop.returncode == 0, err
    assert "staleness window restarted" not in err, err
    found = re.search(r"Builder: stuck: no heartbeat for ([0-9.]+)s \(stale after 4s\)", err)
    assert found, err
    assert float(found.group(1)) <= 4 + 2 * 1 + 1, err

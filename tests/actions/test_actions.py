"""The actions on real repositories and ledgers: each does what it says on a fleet's task (the
branch merged, sent back with its note, reopened, skipped), reverts a phase's commits with a
safety ref, asks the running monitor or wait through a request file, is recorded with where it
came from, and one that does not apply says so with its own exit code."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers.agent import script
from helpers.dashboard import fleet_running, loop_mid_phase, task
from helpers.git import commit_file, git, new_repo
from helpers.loop import loop_env, run_loop

from genesis import exitcodes
from genesis.actions import inbox
from genesis.actions.errors import NotApplicable, NothingRuns, Origin
from genesis.actions.perform import fleet_dir, perform
from genesis.cli import cli
from genesis.config import default_layout, resolve
from genesis.fleet.ledger import FleetLedger
from genesis.fleet.taskref import task_id
from genesis.ledger.store import Ledger
from genesis.repo import safety
from genesis.store.atomicio import write_json

ME = Origin("terminal", "tester (uid 1)")
TEXT = "add the parser"


def fleet_project(tmp_path: Path, state: str, tasks_md: str | None = None) -> tuple[Path, str, Path]:
    """A project whose fleet kept TEXT's branch (one commit of work, the task ticked on it) in a worktree."""
    project = new_repo(tmp_path / "project")
    commit_file(project, "TASKS.md", tasks_md or f"# Tasks\n\n- [ ] {TEXT}\n- [ ] add the printer\n", "tasks")
    tid = task_id(TEXT)
    where = tmp_path / "worktrees" / tid
    git(project, "worktree", "add", "-q", "-b", f"genesis/task/{tid}", str(where))
    commit_file(where, "parser.py", "parse = 1\n", "the parser")
    (where / "TASKS.md").write_text((where / "TASKS.md").read_text().replace(f"- [ ] {TEXT}", f"- [x] {TEXT}"))
    git(where, "commit", "-qam", "tick", "--allow-empty")
    now = time.time()
    fd = fleet_running(project, now, [task(tid, state, now, text=TEXT, worktree=str(where))])
    os.close(fd)  # the monitor is gone: the actions are done here
    return project, tid, where


def rows(project: Path) -> dict:
    with FleetLedger.open(fleet_dir(default_layout(project)) / "ledger.sqlite3", readonly=True) as led:
        return {r.id: r for r in led.tasks()}


def actions_recorded(project: Path) -> list[dict]:
    if not default_layout(project).ledger_file.exists():
        return []
    with Ledger.open(default_layout(project).ledger_file, readonly=True) as led:
        return led.events(kinds=("action",))


def test_approve_brings_the_reviewed_branch_home_ticked_and_records_who(tmp_path):
    project, tid, _ = fleet_project(tmp_path, "ready")
    done = perform(project, "approve", Origin("dashboard", "key 0123456789"), task=tid[:6])   # a start of its id
    assert done.task == tid and "approved" in done.said
    assert (project / "parser.py").read_text() == "parse = 1\n"
    assert f"- [x] {TEXT}" in git(project, "show", "HEAD:TASKS.md")
    assert rows(project)[tid].state == "merged"
    [recorded] = actions_recorded(project)
    assert (recorded["action"], recorded["task"], recorded["source"], recorded["credential"]) == \
        ("approve", tid, "dashboard", "key 0123456789")


def test_send_back_reopens_the_task_on_its_branch_with_the_note_and_relaunches_it(tmp_path):
    project, tid, where = fleet_project(tmp_path, "needs-review")
    perform(project, "send-back", ME, task=tid, note="use the stdlib tokenizer")
    text = git(where, "show", "HEAD:TASKS.md")
    assert f"- [ ] {TEXT}\n  note: use the stdlib tokenizer\n" in text
    row = rows(project)[tid]
    assert (row.state, row.not_before, row.reason) == ("restarting", 0.0, "sent back: use the stdlib tokenizer")
    assert actions_recorded(project)[-1]["note"] == "use the stdlib tokenizer"


# The next attempt's agent: it keeps its prompt (ignored by git: nothing of it is committed).
KEEPS_PROMPT = """#!/usr/bin/env bash
set -eu
printf '%s' "${*: -1}" >"$PROMPT_OUT"
"""


@pytest.mark.whole
def test_the_next_attempt_of_a_task_sent_back_is_told_its_note(tmp_path):
    """A real loop on the task's branch, as its next child runs it: the note is in its prompt."""
    project, tid, where = fleet_project(tmp_path, "needs-review")
    perform(project, "send-back", ME, task=tid, note="use the stdlib tokenizer,\nnot a regex")
    agent = script(tmp_path / "agent.sh", KEEPS_PROMPT)
    told = where / "prompt.txt"  # in the worktree: the agent's box binds it
    (where / ".gitignore").write_text("prompt.txt\n")
    git(where, "add", ".gitignore")
    git(where, "commit", "-qm", "ignore the prompt")
    done = run_loop(where, "--agent-cmd", str(agent), "--max-iterations", "1",
                    env=loop_env(GENESIS_PHASES="Builder", GENESIS_TASK=TEXT, GENESIS_TASK_ID=tid,
                                 PROMPT_OUT=str(told), HEARTBEAT_COUNT_OUTPUT="false"))
    prompt = told.read_text()
    assert f"- {TEXT}\n  The note: use the stdlib tokenizer, not a regex\n" in prompt, (done.stderr, prompt)
    assert prompt.count("The note:") == 1  # only the task sent back has one


def test_send_back_without_a_note_and_approve_of_a_running_task_do_not_apply(tmp_path):
    project, tid, _ = fleet_project(tmp_path, "running")
    with pytest.raises(NotApplicable, match="not waiting for review"):
        perform(project, "approve", ME, task=tid)
    with pytest.raises(NotApplicable, match="no task 'nope'"):
        perform(project, "skip", ME, task="nope")
    assert actions_recorded(project) == []


def test_retry_of_a_failed_task_reopens_it_on_the_project_branch(tmp_path):
    project, tid, _ = fleet_project(tmp_path, "failed", f"# Tasks\n\n- [!] {TEXT} (failed: tests failed)\n")
    done = perform(project, "retry", ME, task=tid)
    assert "reopened" in done.said
    assert git(project, "show", "HEAD:TASKS.md") == f"# Tasks\n\n- [ ] {TEXT}\n"
    row = rows(project)[tid]
    assert (row.state, row.attempts, row.strategy) == ("queued", 0, 0)


def test_retry_of_a_restarting_task_drops_its_backoff(tmp_path):
    project, tid, _ = fleet_project(tmp_path, "restarting")
    with FleetLedger.open(fleet_dir(default_layout(project)) / "ledger.sqlite3") as led:
        led.set_state(tid, "restarting", "stuck", not_before=time.time() + 3600)
    perform(project, "retry", ME, task=tid)
    assert rows(project)[tid].not_before == 0.0


def test_skip_marks_the_task_failed_on_the_project_branch(tmp_path):
    project, tid, _ = fleet_project(tmp_path, "queued")
    perform(project, "skip", Origin("alert", "link abc"), task=tid)
    assert f"- [!] {TEXT} (failed: skipped from the alert)" in git(project, "show", "HEAD:TASKS.md")
    assert rows(project)[tid].state == "failed"


def test_the_running_monitor_gets_pause_and_retry_as_requests(tmp_path):
    project = new_repo(tmp_path / "project")
    now = time.time()
    fd = fleet_running(project, now, [task("t1", "running", now)])
    try:
        perform(project, "pause", ME)
        perform(project, "retry", ME, task="t1")
        taken = inbox.take(fleet_dir(default_layout(project)) / inbox.FOLDER)
    finally:
        os.close(fd)
    assert [(r.action, r.task, r.source) for r in taken] == [("pause", "", "terminal"), ("retry", "t1", "terminal")]
    with pytest.raises(NothingRuns, match="monitor on .* is not running"):
        perform(project, "resume", ME)


def test_a_single_loop_has_no_tasks_and_no_launches_to_pause(tmp_path):
    project = new_repo(tmp_path / "project")
    fd = loop_mid_phase(project, "run-1", time.time())
    try:
        with pytest.raises(NotApplicable, match="no fleet ran"):
            perform(project, "retry", ME, task="anything")
        with pytest.raises(NotApplicable, match="no fleet ran"):
            perform(project, "pause", ME)
    finally:
        os.close(fd)


def test_wait_end_and_extend_go_to_the_waiting_loop_and_need_a_wait(tmp_path):
    project = new_repo(tmp_path / "project")
    fd = loop_mid_phase(project, "run-1", time.time())
    lay = default_layout(project)
    try:
        with pytest.raises(NotApplicable, match="no wait is under way"):
            perform(project, "wait-end", ME)
        write_json(lay.wait_file, {"run_id": "run-1", "kind": "limit", "until": time.time() + 600, "reason": "5-hour"})
        perform(project, "wait-extend", ME, seconds=900)
        perform(project, "wait-end", ME)
    finally:
        os.close(fd)
    taken = inbox.take(lay.state_dir / inbox.FOLDER)
    assert [(r.action, r.seconds) for r in taken] == [("wait-extend", 900.0), ("wait-end", 0.0)]


def test_stop_writes_the_flag_and_stop_now_needs_a_running_loop(tmp_path):
    project = new_repo(tmp_path / "project")
    with pytest.raises(NothingRuns):
        perform(project, "stop-now", ME)
    fd = loop_mid_phase(project, "run-1", time.time())
    try:
        perform(project, "stop", ME)
    finally:
        os.close(fd)
    assert resolve(project).stop_flag.read_text() == "false\n"
    assert actions_recorded(project)[-1]["run_id"] == "run-1"


def test_revert_undoes_a_phases_commits_in_one_new_commit_and_keeps_the_tip(tmp_path):
    project = new_repo(tmp_path / "project")
    safety.keep_phase(project, "run-1", 1, "Builder")
    commit_file(project, "a.py", "a\n", "builder one")
    commit_file(project, "b.py", "b\n", "builder two")
    safety.keep_phase(project, "run-1", 1, "Criticizer")
    commit_file(project, "review.md", "ok\n", "criticizer")
    tip = git(project, "rev-parse", "HEAD").strip()
    done = perform(project, "revert", ME, phase="Builder")
    assert "reverted the 2 commit(s) of Builder" in done.said
    assert not (project / "a.py").exists() and not (project / "b.py").exists() and (project / "review.md").exists()
    assert git(project, "rev-parse", "HEAD~1").strip() == tip      # a new commit on top, nothing rewritten
    kept = git(project, "for-each-ref", "--format=%(objectname)", "refs/genesis/reverts").split()
    assert kept == [tip]
    with pytest.raises(NotApplicable, match="no Planner phase"):
        perform(project, "revert", ME, phase="Planner")
    with pytest.raises(NotApplicable, match="a loop works in"):
        fd = loop_mid_phase(project, "run-2", time.time())
        try:
            perform(project, "revert", ME, phase="Criticizer")
        finally:
            os.close(fd)


def test_the_commands_say_what_was_done_and_exit_38_when_it_does_not_apply(tmp_path):
    project, tid, _ = fleet_project(tmp_path, "running")
    run = CliRunner().invoke(cli, ["--project", str(project), "approve", tid], catch_exceptions=False)
    assert run.exit_code == exitcodes.NOT_APPLICABLE == 38
    assert "is not waiting for review (it is running)" in run.output
    run = CliRunner().invoke(cli, ["--project", str(project), "pause"], catch_exceptions=False)
    assert run.exit_code == exitcodes.NOT_RUNNING
    run = CliRunner().invoke(cli, ["--project", str(project), "limit-wait", "extend", "soon"], catch_exceptions=False)
    assert run.exit_code == exitcodes.USAGE and "not a duration" in run.output
    with FleetLedger.open(fleet_dir(default_layout(project)) / "ledger.sqlite3") as led:
        led.set_state(tid, "ready", "kept for review")
    run = CliRunner().invoke(cli, ["--project", str(project), "approve", tid], catch_exceptions=False)
    assert run.exit_code == 0, run.output
    assert run.output.startswith(f"approved {TEXT!r}")
    assert actions_recorded(project)[-1]["credential"].endswith(f"(uid {os.getuid()})")


def test_an_action_shows_in_status_and_in_the_report(tmp_path):
    project = new_repo(tmp_path / "project")
    fd = loop_mid_phase(project, "run-1", time.time())
    try:
        perform(project, "stop", Origin("alert", "alert link abcd1234"))
        status = CliRunner().invoke(cli, ["--project", str(project), "status"], catch_exceptions=False)
        report = CliRunner().invoke(cli, ["--project", str(project), "report", "--run-id", "run-1"],
                                    catch_exceptions=False)
        as_json = CliRunner().invoke(cli, ["--project", str(project), "report", "--run-id", "run-1", "--json"],
                                     catch_exceptions=False)
    finally:
        os.close(fd)
    assert "stop, from the alert (alert link abcd1234): wrote false to the stop flag" in " ".join(status.output.split())
    assert "actions (1: taken from the terminal, the dashboard or an alert)" in report.output
    assert "stop  from the alert  (alert link abcd1234)" in report.output
    doc = json.loads(as_json.output)
    night = doc["runs"][0] if "runs" in doc else doc
    assert [(a["action"], a["source"]) for a in night["actions"]] == [("stop", "alert")]


def test_stop_now_sends_sigterm_to_the_loop_that_holds_the_lock(tmp_path):
    project = new_repo(tmp_path / "project")
    lay = default_layout(project)
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from pathlib import Path; from genesis.store.looplock import hold\n"
        f"hold(Path({str(lay.loop_lock)!r}), Path({str(lay.loop_record)!r}), 'run-9'); print('held', flush=True)\n"
        "time.sleep(120)")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        run = CliRunner().invoke(cli, ["--project", str(project), "stop", "--now"], catch_exceptions=False)
        assert run.exit_code == 0, run.output
        assert f"sent SIGTERM to the loop (pid {holder.pid})" in run.output
        assert holder.wait(timeout=30) == -signal.SIGTERM
    finally:
        if holder.poll() is None:
            holder.kill()
    assert resolve(project).stop_flag.read_text() == "false\n"
    run = CliRunner().invoke(cli, ["--project", str(project), "stop", "--now"], catch_exceptions=False)
    assert run.exit_code == exitcodes.NOT_RUNNING


def test_a_pause_shows_in_fleet_status_while_the_monitor_runs_until_resume(tmp_path):
    project = new_repo(tmp_path / "project")
    now = time.time()
    fd = fleet_running(project, now, [task("t1", "queued", now)], events=(("paused", None, {"source": "dashboard"}),))
    try:
        shown = CliRunner().invoke(cli, ["--project", str(project), "fleet", "status"], catch_exceptions=False)
        doc = json.loads(CliRunner().invoke(cli, ["--project", str(project), "fleet", "status", "--json"],
                                            catch_exceptions=False).output)
        assert "LAUNCHES PAUSED: no child starts until `genesis resume`" in shown.output
        assert (doc["paused"]["kind"], doc["paused"]["reason"]) == ("paused", "asked from the dashboard")
        with FleetLedger.open(fleet_dir(default_layout(project)) / "ledger.sqlite3") as led:
            led.record("resumed", None, source="terminal")
        doc = json.loads(CliRunner().invoke(cli, ["--project", str(project), "fleet", "status", "--json"],
                                            catch_exceptions=False).output)
        assert doc["paused"] is None
    finally:
        os.close(fd)

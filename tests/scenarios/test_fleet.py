"""A fleet as a user runs it: `start-multi-agent-loop.sh --parallel N` on a project with open
tasks, real git, real child loops with a scripted agent, real signals.

The agent (helpers/fleet.py) works on $GENESIS_TASK: it writes a file named after the task and
ticks its task in the worktree's TASKS.md, as the shipped prompts ask. A gate file per task
(GATES/<task id>) holds its phase until the test lets it go.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from helpers.fakeclaude import FIXTURES, replay
from helpers.fleet import (TASK_AGENT, fleet_dir, fleet_env, fleet_ledger, fleet_project, start_fleet, task_agent,
                           tasks_on)
from helpers.git import git, new_repo
from helpers.loop import GENESIS, LOOP
from helpers.procs import alive, carries
from helpers.state import events_of
from helpers.waits import wait_for

from genesis import exitcodes
from genesis.fleet.taskref import task_id
from genesis.ledger.store import Ledger, LedgerError
from genesis.repo.tasks import DONE, OPEN, parse
from genesis.store.layout import state_dir_of

SIX = ["add the parser", "add the printer", "add the cache", "add the logger", "add the config", "add the docs"]
# The task agent, held while GATES/<task id> exists.
GATED = """#!/usr/bin/env bash
set -euo pipefail
echo "$$ ${GENESIS_TASK_ID}" >>"${AGENT_PIDS}"
while [[ -e ${GATES}/${GENESIS_TASK_ID} ]]; do sleep 0.1; done
printf '%s\\n' "${GENESIS_TASK}" >"work-${GENESIS_TASK_ID}.txt"
"${PY}" - <<'PY'
import os
text = os.environ["GENESIS_TASK"]
lines = open("TASKS.md").read().splitlines(keepends=True)
out = [line.replace("[ ]", "[x]", 1) if line.rstrip("\\n").endswith(text) and "[ ]" in line else line for line in lines]
open("TASKS.md", "w").write("".join(out))
PY
"""


def overlap(attempts) -> int:
    """The most attempts running at one moment."""
    marks = sorted([(a.started, 1) for a in attempts] + [(a.ended, -1) for a in attempts if a.ended is not None])
    most = now = 0
    for _at, step in marks:
        now += step
        most = max(most, now)
    return most


def agent_pids(path: Path) -> list[tuple[int, str]]:
    """(pid as the agent saw it: in its box's own pid namespace, task id) of each agent started."""
    if not path.exists():
        return []
    return [(int(pid), tid) for pid, tid in (line.split() for line in path.read_text().splitlines() if line)]


def carrying(key: str, value: str) -> list[int]:
    """The live processes whose environment holds key=value (the test's own marker)."""
    found = []
    for proc in psutil.process_iter(["pid"]):
        if proc.pid != os.getpid() and carries(proc.pid, {key: value}) and alive(proc.pid):
            found.append(proc.pid)
    return found


def states(project: Path) -> dict[str, str]:
    with fleet_ledger(project) as led:
        return {row.text: row.state for row in led.tasks()}


def child_ends(project: Path) -> list[dict]:
    """Every loop_end the children's own ledgers hold (their worktrees are kept while not merged)."""
    ends = []
    common = Path(git(project, "rev-parse", "--path-format=absolute", "--git-common-dir").strip())
    for wt in (common / "genesis-worktrees").iterdir():
        ledger = state_dir_of(wt) / "ledger.sqlite3"
        if ledger.is_file():
            with Ledger.open(ledger, readonly=True) as led:
                ends += [{**e, "worktree": wt.name} for e in led.events(kinds=["loop_end"])]
    return ends


def test_six_tasks_at_parallel_three_all_come_home_ticked(project, tmp_path):
    fleet_project(project, SIX)
    agent = task_agent(tmp_path / "agent.sh")
    proc = start_fleet(project, "3", agent, log=tmp_path / "fleet.log")
    assert proc.wait(timeout=240) == exitcodes.OK, (tmp_path / "fleet.log").read_text()[-3000:]

    tasks = parse(tasks_on(project))
    assert {t.text for t in tasks.items if t.state == DONE} == set(SIX)
    assert not [t for t in tasks.items if t.state == OPEN]
    for text in SIX:  # each task's work is on the project branch
        assert git(project, "show", f"HEAD:work-{task_id(text)}.txt").strip() == text
    with fleet_ledger(project) as led:
        rows = led.tasks()
        attempts = led.attempts()
        launches = led.events("launch")
        assert [e.detail["exit_code"] for e in led.events("fleet_end")] == [exitcodes.OK]
    assert {r.state for r in rows} == {"merged"} and len(rows) == 6
    assert overlap(attempts) <= 3
    assert len(attempts) == 6  # one child per task: nothing failed, nothing ran twice
    # Each child had a port range of its own among those running beside it.
    spans = {(e.detail["port_base"], e.task_id) for e in launches}
    assert len({e.task_id for e in launches}) == 6 and all(e.detail["port_count"] == 10 for e in launches)
    assert len(spans) == 6
    # Only merged work was pruned: no task branch is left, the user's checkout is untouched.
    assert not git(project, "branch", "--list", "genesis/task/*").strip()
    assert not git(project, "status", "--porcelain").strip()
    assert git(project, "symbolic-ref", "--short", "HEAD").strip() in ("master", "main")


@pytest.mark.fault(97)
def test_fault_97_a_monitor_killed_mid_night_is_readopted_without_a_duplicate_or_a_lost_merge(project, tmp_path):
    texts = ["first task", "second task", "third task"]
    fleet_project(project, texts)
    gates, pids = tmp_path / "gates", tmp_path / "pids"
    gates.mkdir()
    for text in texts[1:]:
        (gates / task_id(text)).touch()
    merge_gate, merging = tmp_path / "merge.gate", tmp_path / "merging"
    merge_gate.touch()
    test_cmd = f"touch {merging}; while [ -e {merge_gate} ]; do sleep 0.1; done"
    env = fleet_env(GATES=str(gates), AGENT_PIDS=str(pids), GENESIS_MERGE_TEST_CMD=test_cmd,
                    HEARTBEAT_STALE="600s")
    agent = task_agent(tmp_path / "agent.sh", GATED)
    first = start_fleet(project, "3", agent, "--trust", env=env, log=tmp_path / "first.log")
    # The first task is verified and its merge is under way; the other two children run.
    wait_for(merging.exists, 120, "the first task's merge to run its test command")
    wait_for(lambda: len(agent_pids(pids)) == 3, 60, "three agents")
    second_monitor = subprocess.run(["bash", str(LOOP), "--project", str(project), "--parallel", "3",
                                     "--agent-cmd", f"bash {agent}"], env=env, capture_output=True, text=True,
                                    timeout=60, stdin=subprocess.DEVNULL)
    assert second_monitor.returncode == exitcodes.LOCKED
    assert f"a fleet monitor already runs on {project} (pid {first.pid}" in second_monitor.stderr
    single = subprocess.run(["bash", str(LOOP), "--project", str(project), "--agent-cmd", f"bash {agent}"],
                            env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert single.returncode == exitcodes.LOCKED and "another Genesis loop is already running" in single.stderr

    first.send_signal(signal.SIGKILL)  # the monitor dies mid-merge, its children mid-phase
    first.wait(timeout=10)
    assert states(project) == {"first task": "merging", "second task": "running", "third task": "running"}
    assert len(carrying("GATES", str(gates))) > 2  # the children go on without it

    second = start_fleet(project, "3", agent, env=env, log=tmp_path / "second.log")
    with_log = lambda: (tmp_path / "second.log").read_text()[-3000:]  # noqa: E731
    wait_for(lambda: len(fleet_ledger_events(project, "adopted")) == 2, 60, "the two children adopted")
    merge_gate.unlink()
    for gate in gates.iterdir():
        gate.unlink()
    assert second.wait(timeout=180) == exitcodes.OK, with_log()

    tasks = parse(tasks_on(project))
    assert {t.text for t in tasks.items if t.state == DONE} == set(texts)
    with fleet_ledger(project) as led:
        assert {r.state for r in led.tasks()} == {"merged"}
        assert len(led.attempts()) == 3  # one child per task, ever: none launched twice
        assert len(led.events("launch")) == 3
        assert {e.task_id for e in led.events("adopted")} == {task_id(t) for t in texts[1:]}
        assert len(led.events("merged")) == 3
        killed, ended = led.events("fleet_end")  # the killed monitor's end, recorded by the next one
        assert killed.detail["exit_code"] is None and "the monitor was killed" in killed.detail["reason"]
        assert ended.detail["exit_code"] == exitcodes.OK
    assert sorted(tid for _pid, tid in agent_pids(pids)) == sorted(task_id(t) for t in texts)
    for text in texts:
        assert git(project, "show", f"HEAD:work-{task_id(text)}.txt").strip() == text


def fleet_ledger_events(project: Path, kind: str) -> list:
    try:
        with fleet_ledger(project) as led:
            return led.events(kind)
    except Exception:  # noqa: BLE001 - not made yet
        return []


@pytest.mark.fault(99)
def test_fault_99_ctrl_c_on_a_fleet_reaps_every_child_tree_and_records_every_end(project, tmp_path):
    texts = ["task alpha", "task beta", "task gamma"]
    fleet_project(project, texts)
    gates, pids = tmp_path / "gates", tmp_path / "pids"
    gates.mkdir()
    for text in texts:
        (gates / task_id(text)).touch()
    env = fleet_env(GATES=str(gates), AGENT_PIDS=str(pids), HEARTBEAT_STALE="600s")
    proc = start_fleet(project, "3", task_agent(tmp_path / "agent.sh", GATED), env=env, log=tmp_path / "fleet.log")
    wait_for(lambda: len(agent_pids(pids)) == 3, 90, "three agents at work")
    with fleet_ledger(project) as led:
        loops = [e.detail["pid"] for e in led.events("launch")]

    proc.send_signal(signal.SIGINT)  # Ctrl-C: the terminal's signal reaches the monitor alone
    assert proc.wait(timeout=120) == exitcodes.INTERRUPTED_INT, (tmp_path / "fleet.log").read_text()[-3000:]

    assert not carrying("GATES", str(gates))  # every child loop and agent tree reaped
    assert not [pid for pid in loops if alive(pid)]
    with fleet_ledger(project) as led:
        ends = led.events("child_end")
        assert sorted(e.task_id for e in ends) == sorted(task_id(t) for t in texts)
        assert {e.detail["outcome"] for e in ends} == {"stopped"}
        assert [e.detail["exit_code"] for e in led.events("fleet_end")] == [exitcodes.INTERRUPTED_INT]
        assert {r.state for r in led.tasks()} == {"queued"}  # not failed: the next start takes them up
        assert all(a.outcome == "stopped" for a in led.attempts())
    recorded = child_ends(project)
    assert len(recorded) == 3 and {e["exit_code"] for e in recorded} == {exitcodes.INTERRUPTED_INT}


def test_genesis_stop_ends_the_fleet_after_the_current_phases(project, tmp_path):
    texts = ["one", "two", "three"]
    fleet_project(project, texts)
    gates, pids = tmp_path / "gates", tmp_path / "pids"
    gates.mkdir()
    for text in texts:
        (gates / task_id(text)).touch()
    env = fleet_env(GATES=str(gates), AGENT_PIDS=str(pids), HEARTBEAT_STALE="600s")
    proc = start_fleet(project, "2", task_agent(tmp_path / "agent.sh", GATED), env=env, log=tmp_path / "fleet.log")
    wait_for(lambda: len(agent_pids(pids)) == 2, 90, "two agents at work")
    status = subprocess.run([*GENESIS, "--project", str(project), "status"], env=env, capture_output=True,
                            text=True, timeout=60)
    assert "a fleet runs on this project" in " ".join(status.stdout.split()), status.stdout

    stop = subprocess.run([*GENESIS, "--project", str(project), "stop"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert stop.returncode == 0, stop.stderr
    assert "the fleet (monitor pid " in stop.stdout and "each child stops before its next phase" in stop.stdout
    for gate in gates.iterdir():  # the phases under way finish
        gate.unlink()
    assert proc.wait(timeout=120) == exitcodes.OK, (tmp_path / "fleet.log").read_text()[-3000:]

    started = {tid for _pid, tid in agent_pids(pids)}
    assert len(started) == 2  # nothing new started after the stop
    with fleet_ledger(project) as led:
        rows = {r.id: r for r in led.tasks()}
        assert led.events("fleet_end")[-1].detail["reason"] == "stopped by the stop flag"
    assert {rows[t].state for t in started} == {"merged"}  # their phase's work came home
    (left,) = set(rows) - started
    assert rows[left].state == "queued" and rows[left].attempts == 0
    assert (project / "hooks" / "loop_multi_agent.txt").read_text().strip() == "false"
    assert git(project, "status", "--porcelain") == ""  # the stop flag is kept out, as a single loop keeps it


def ended_runs(worktrees: list[Path]) -> int:
    """How many of these children's loops recorded their end."""
    ends = 0
    for wt in worktrees:
        try:
            with Ledger.open(state_dir_of(wt) / "ledger.sqlite3", readonly=True) as led:
                ends += bool(led.events(kinds=["loop_end"]))
        except (LedgerError, OSError):
            pass
    return ends


def test_genesis_stop_reaches_the_children_of_a_monitor_that_died(project, tmp_path):
    texts = ["one", "two"]
    fleet_project(project, texts)
    gates, pids = tmp_path / "gates", tmp_path / "pids"
    gates.mkdir()
    for text in texts:
        (gates / task_id(text)).touch()
    never_done = GATED.split('"${PY}"')[0]  # works, but never ticks its task: only the stop ends the child
    env = fleet_env(GATES=str(gates), AGENT_PIDS=str(pids), HEARTBEAT_STALE="600s")
    proc = start_fleet(project, "2", task_agent(tmp_path / "agent.sh", never_done), env=env,
                       log=tmp_path / "fleet.log")
    wait_for(lambda: len(agent_pids(pids)) == 2, 90, "two agents at work")
    os.kill(proc.pid, signal.SIGKILL)  # the script exec'd the monitor: this is the monitor
    proc.wait(timeout=10)

    stop = subprocess.run([*GENESIS, "--project", str(project), "stop"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert stop.returncode == 0, stop.stderr
    assert "the fleet's monitor is not running, and its 2 child loops" in stop.stdout
    for gate in gates.iterdir():
        gate.unlink()
    with fleet_ledger(project) as led:
        worktrees = [Path(r.worktree) for r in led.tasks()]
    wait_for(lambda: ended_runs(worktrees) == 2, 120, "both children ended")
    flag = project / "hooks" / "loop_multi_agent.txt"
    assert [e["reason"] for e in child_ends(project)] == [f"stop flag {flag} says false"] * 2
    assert len(agent_pids(pids)) == 2  # each stopped after its phase: no second iteration began


@pytest.mark.fault(100)
def test_fault_100_no_child_starts_while_free_memory_is_below_the_floor(project, tmp_path):
    fleet_project(project, ["only task"])
    floor = 16_000_000  # MB: more than this machine has free
    env = fleet_env(GENESIS_FLEET_MEMORY_FLOOR_MB=str(floor))
    proc = start_fleet(project, "2", task_agent(tmp_path / "agent.sh"), env=env, log=tmp_path / "fleet.log")
    wait_for(lambda: fleet_ledger_events(project, "memory_held"), 60, "the launch held by the memory floor")
    time.sleep(1)  # several checks: still nothing launched
    status = subprocess.run([*GENESIS, "--project", str(project), "fleet", "status", "--json"], env=env,
                            capture_output=True, text=True, timeout=60)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == exitcodes.INTERRUPTED_TERM
    with fleet_ledger(project) as led:
        assert not led.events("launch") and not led.attempts()
        (row,) = led.tasks()
    assert row.state == "waiting" and f"below the floor GENESIS_FLEET_MEMORY_FLOOR_MB={floor}" in row.reason
    assert status.returncode == 0, status.stderr  # `fleet status` says why to the user
    assert "below the floor GENESIS_FLEET_MEMORY_FLOOR_MB" in json.dumps(json.loads(status.stdout))
    assert not (fleet_dir(project) / "children").exists()  # no child's log: none ever started


CALLED = """#!/usr/bin/env bash
echo "$*" >>"{calls}"
exit 0
"""


@pytest.mark.parametrize("value, said", [
    ("0", "not '0'"), ("-2", "not '-2'"), ("many", "not 'many'"), ("", None)])
def test_parallel_needs_a_number_from_one_or_auto(tmp_path, value, said):
    calls = tmp_path / "calls"
    fake = task_agent(tmp_path / "genesis", CALLED.format(calls=calls))
    done = subprocess.run(["bash", str(LOOP), "--parallel", value], env=fleet_env(GENESIS_BIN=str(fake)),
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == exitcodes.USAGE and not calls.exists()
    assert "--parallel needs a number of tasks at once, or auto, e.g. --parallel 3" in done.stderr
    assert said is None or said in done.stderr


def test_parallel_hands_the_project_over_to_the_fleets_monitor(project, tmp_path):
    calls = tmp_path / "calls"
    fake = task_agent(tmp_path / "genesis", CALLED.format(calls=calls))
    done = subprocess.run(["bash", str(LOOP), "--project", str(project), "--parallel=auto", "--trust",
                           "--set", "AUTO_PUSH=true"], env=fleet_env(GENESIS_BIN=str(fake)),
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    assert calls.read_text() == f"--project {project} --set AUTO_PUSH=true fleet run --parallel auto --trust\n"


@pytest.mark.fault(98)
def test_fault_98_ten_of_twenty_children_killed_at_once_pause_every_restart_with_one_critical_alert(project, tmp_path):
    texts = [f"task number {n}" for n in range(20)]
    fleet_project(project, texts)
    gates, pids = tmp_path / "gates", tmp_path / "pids"
    gates.mkdir()
    for text in texts:
        (gates / task_id(text)).touch()
    env = fleet_env(GATES=str(gates), AGENT_PIDS=str(pids), HEARTBEAT_STALE="600s",
                    GENESIS_FLEET_STAGGER_SECONDS="0.3",
                    GENESIS_FLEET_RESTART_EVERY_SECONDS="60")  # the shipped budget: one restart a minute
    proc = start_fleet(project, "20", task_agent(tmp_path / "agent.sh", GATED), env=env, log=tmp_path / "fleet.log")
    try:
        wait_for(lambda: len(agent_pids(pids)) == 20, 240, "twenty agents at work")
        with fleet_ledger(project) as led:
            loops = sorted((e.detail["pid"] for e in led.events("launch")))
        killed = loops[:10]
        for pid in killed:  # ten children killed at once
            os.kill(pid, signal.SIGKILL)
        wait_for(lambda: fleet_ledger_events(project, "cascade_pause"), 60, "the cascade pause")
        wait_for(lambda: len(fleet_ledger_events(project, "child_end")) == 10, 60, "the ten ends seen")
        time.sleep(2)  # several checks more: nothing is restarted meanwhile
        with fleet_ledger(project) as led:
            events = led.events()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=180)
    ends = [e for e in events if e.kind == "child_end"]
    assert len(ends) == 10 and {e.detail["outcome"] for e in ends} == {"failed"}
    (pause,) = [e for e in events if e.kind == "cascade_pause"]
    restarts = [e for e in events if e.kind in ("restart", "escalate")]
    assert len(restarts) <= 1  # held to the budget: one restart a minute at most, whatever the ladder says
    assert not [e for e in restarts if e.seq > pause.seq]  # none once paused
    criticals = [e for e in events if e.kind == "alert" and e.detail["severity"] == "critical"]
    assert len(criticals) == 1 and "cascade" in criticals[0].detail["cause"]
    # Detected at the very end that made it more than 30% of the 20 (7: 6 is exactly 30%), not a check later.
    assert len([e for e in ends if e.seq < pause.seq]) == 7
    assert not carrying("GATES", str(gates))


# Both tasks rewrite the same line of shared.txt; the Merger (the same agent, GENESIS_AGENT=Merger)
# notes that it ran and leaves the conflict as it is.
CLASHING = """#!/usr/bin/env bash
set -euo pipefail
if [[ ${GENESIS_AGENT:-} == Merger ]]; then
  echo "merger in $PWD: $*" >>"${MERGER_RAN}"
  exit 1
fi
printf '%s\\n' "${GENESIS_TASK}" >shared.txt
"${PY}" - <<'PY'
import os
text = os.environ["GENESIS_TASK"]
lines = open("TASKS.md").read().splitlines(keepends=True)
out = [line.replace("[ ]", "[x]", 1) if line.rstrip("\\n").endswith(text) and "[ ]" in line else line for line in lines]
open("TASKS.md", "w").write("".join(out))
PY
"""


def test_two_tasks_on_the_same_lines_the_second_goes_through_the_merger_then_needs_review(project, tmp_path):
    (project / "shared.txt").write_text("nobody yet\n")
    git(project, "add", "shared.txt")
    texts = ["say hello", "say goodbye"]
    fleet_project(project, texts)
    ran = tmp_path / "merger-ran"
    env = fleet_env(MERGER_RAN=str(ran))
    proc = start_fleet(project, "2", task_agent(tmp_path / "agent.sh", CLASHING), env=env, log=tmp_path / "fleet.log")
    assert proc.wait(timeout=180) == exitcodes.FLEET_NEEDS_REVIEW, (tmp_path / "fleet.log").read_text()[-3000:]

    with fleet_ledger(project) as led:
        rows = {r.text: r for r in led.tasks()}
        (merger,) = led.events("merger")
        (review,) = led.events("needs_review")
    first, second = sorted(texts, key=lambda t: rows[t].state != "merged")
    assert (rows[first].state, rows[second].state) == ("merged", "needs-review")
    assert merger.task_id == review.task_id == task_id(second)
    assert ran.read_text().count("merger in ") == 1  # the Merger had one try
    # The first came home; the second's branch is intact, its work on it, its worktree kept.
    assert git(project, "show", "HEAD:shared.txt") == f"{first}\n"
    branch = rows[second].branch
    assert git(project, "show", f"{branch}:shared.txt") == f"{second}\n"
    assert Path(rows[second].worktree).is_dir()
    tasks = parse(tasks_on(project))
    assert {t.text: t.state for t in tasks.items} == {first: DONE, second: OPEN}


# The Planner adds one task (once: a second Planner run would add it again); the Builder does it.
PLANNING = """#!/usr/bin/env bash
set -euo pipefail
if [[ ${GENESIS_AGENT} == Planner ]]; then
  echo planned >>"${PLANNER_RAN}"
  printf -- '- [ ] write the changelog\\n' >>TASKS.md
  exit 0
fi
printf '%s\\n' "${GENESIS_TASK}" >"work-${GENESIS_TASK_ID}.txt"
"${PY}" - <<'PY'
import os
text = os.environ["GENESIS_TASK"]
lines = open("TASKS.md").read().splitlines(keepends=True)
out = [line.replace("[ ]", "[x]", 1) if line.rstrip("\\n").endswith(text) and "[ ]" in line else line for line in lines]
open("TASKS.md", "w").write("".join(out))
PY
"""


def test_with_no_task_open_the_planner_runs_once_and_its_tasks_start_children(project, tmp_path):
    fleet_project(project, [])
    ran = tmp_path / "planner-ran"
    proc = start_fleet(project, "2", task_agent(tmp_path / "agent.sh", PLANNING), "--set",
                       "GENESIS_PHASES=Builder Planner", env=fleet_env(PLANNER_RAN=str(ran)),
                       log=tmp_path / "fleet.log")
    assert proc.wait(timeout=180) == exitcodes.OK, (tmp_path / "fleet.log").read_text()[-3000:]
    assert ran.read_text() == "planned\n"  # once
    tasks = parse(tasks_on(project))
    assert [(t.text, t.state) for t in tasks.items] == [("write the changelog", DONE)]
    assert git(project, "show", f"HEAD:work-{task_id('write the changelog')}.txt") == "write the changelog\n"
    with fleet_ledger(project) as led:
        assert {r.text: r.state for r in led.tasks()} == {"the Planner: new tasks for TASKS.md": "merged",
                                                          "write the changelog": "merged"}


def test_a_planner_that_adds_nothing_is_no_merged_task_of_the_report(project, tmp_path):
    fleet_project(project, ["write the readme"])
    idle_planner = TASK_AGENT.replace("set -euo pipefail\n", 'set -euo pipefail\n[[ ${GENESIS_AGENT} != Planner ]] || exit 0\n')
    proc = start_fleet(project, "2", task_agent(tmp_path / "agent.sh", idle_planner), "--set",
                       "GENESIS_PHASES=Builder Planner", log=tmp_path / "fleet.log")
    assert proc.wait(timeout=180) == exitcodes.OK, (tmp_path / "fleet.log").read_text()[-3000:]
    with fleet_ledger(project) as led:
        assert sorted(r.text for r in led.tasks()) == ["the Planner: new tasks for TASKS.md", "write the readme"]
    report = subprocess.run([*GENESIS, "--project", str(project), "report"], env=fleet_env(), capture_output=True,
                            text=True, timeout=60)
    assert "1 task: 1 merged; the Planner: nothing-added" in report.stdout, report.stdout
    assert "tasks merged without escalation: 1 of 1 task (1 merged in all)" in " ".join(report.stdout.split())


def test_no_child_starts_while_a_usage_limit_of_the_account_is_known_and_they_start_after_it(tmp_path):
    """Another loop of this user met a 5-hour limit of the same CLI and account: the fleet starts no
    child (the task `waiting`, and why) until the reset and its margin, then starts them."""
    loop_project, fleet_at = new_repo(tmp_path / "single"), fleet_project(new_repo(tmp_path / "fleet"), ["a task"])
    (tmp_path / "ra").mkdir()
    (tmp_path / "rb").mkdir()
    ra, rb = replay(loop_project, tmp_path / "ra"), replay(fleet_at, tmp_path / "rb")
    knobs = {"GENESIS_LIMIT_MARGIN_SECONDS": "2", "FAKE_RESET_IN": "6"}
    stream = tmp_path / "single-stream.jsonl"  # what its agent prints: the limit, then (after the reset) its work
    shutil.copy(FIXTURES / "limit_five_hour.jsonl", stream)
    single = subprocess.Popen(["bash", str(LOOP), "--project", str(loop_project), "--max-iterations", "1"],
                              env={**ra.env("limit_five_hour.jsonl", **knobs), "FAKE_STREAM": str(stream)},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                              start_new_session=True)
    fleet = None
    try:
        wait_for(lambda: any(e["event"] == "wait_start" for e in safe_events(loop_project)), 60, "the limit met")
        shutil.copy(FIXTURES / "success.jsonl", stream)
        env = {**rb.env("success.jsonl", **knobs), **{k: v for k, v in fleet_env().items() if k.startswith(
            "GENESIS_FLEET")}}
        fleet = subprocess.Popen(["bash", str(LOOP), "--project", str(fleet_at), "--parallel", "2", "--set",
                                  "GENESIS_PHASES=Builder"], env=env, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, start_new_session=True)
        wait_for(lambda: fleet_ledger_events(fleet_at, "limit_hold"), 60, "the fleet's hold")
        with fleet_ledger(fleet_at) as led:
            (row,) = led.tasks()
            assert not led.events("launch")
        assert row.state == "waiting" and "usage limit of claude" in row.reason
        wait_for(lambda: fleet_ledger_events(fleet_at, "launch"), 60, "the launch after the reset")
    finally:
        for proc in (fleet, single):
            if proc is not None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=120)
    reset = [e for e in safe_events(loop_project) if e["event"] == "limit_remembered"][0]["resets_at"]
    with fleet_ledger(fleet_at) as led:
        (launch,) = led.events("launch")
        (resume,) = led.events("limit_resume")
        (hold,) = led.events("limit_hold")
    assert hold.at < reset <= reset + 2 <= resume.at <= launch.at  # nothing started while it was known
    assert hold.detail["until"] == reset + 2


def safe_events(project: Path) -> list[dict]:
    try:
        return events_of(project)
    except LedgerError:  # read while the loop is still making it
        return []


FAILING = """#!/usr/bin/env bash
echo "$(basename "$0") ${GENESIS_TASK_ID}" >>"${RAN}"
exit 1
"""


def test_a_task_whose_agent_always_fails_climbs_the_whole_ladder_to_a_permanent_failure(project, tmp_path):
    fleet_project(project, ["never works"])
    ran = tmp_path / "ran"
    fallback = task_agent(tmp_path / "fallback.sh", FAILING)
    env = fleet_env(RAN=str(ran), GENESIS_FLEET_CHILD_ITERATIONS="1", GENESIS_FLEET_ESCALATION="fallback",
                    GENESIS_FALLBACK_AGENT_CMD=f"bash {fallback}", GENESIS_FLEET_MAX_TASK_RESTARTS="1")
    proc = start_fleet(project, "1", task_agent(tmp_path / "agent.sh", FAILING), env=env, log=tmp_path / "fleet.log")
    assert proc.wait(timeout=300) == exitcodes.FLEET_TASKS_FAILED, (tmp_path / "fleet.log").read_text()[-3000:]

    ident = task_id("never works")
    with fleet_ledger(project) as led:
        history = [(a.kind, a.agent, a.outcome) for a in led.attempts(ident)]
        (row,) = led.tasks()
        (failed,) = led.events("failed_permanently")
        criticals = [e for e in led.events("alert") if e.detail["severity"] == "critical"]
    # Seed 000's ladder (its counts are replays': tests/fleet/test_decide.py), one restart a strategy
    # here: the first attempt and its restart, then the fallback and its restart, then failed.
    assert history == ([("start", "configured", "failed"), ("restart", "configured", "failed"),
                        ("escalate", "fallback", "failed"), ("restart", "fallback", "failed")])
    assert [line.split()[0] for line in ran.read_text().splitlines()] == ["agent.sh"] * 2 + ["fallback.sh"] * 2
    assert row.state == "failed" and failed.task_id == ident and len(criticals) == 1
    assert "- [!] never works (failed: " in tasks_on(project)  # marked on the project branch
    assert git(project, "rev-parse", "--verify", "-q", row.branch).strip()  # its branch kept


# The first attempt edits a tracked file and is killed mid-phase (as OOM or kill -9 would); the
# next attempt does the task.
KILLED_FIRST = """#!/usr/bin/env bash
set -euo pipefail
if [[ ! -e ${FIRST}/tried ]]; then
  touch "${FIRST}/tried"
  printf 'half done by the first attempt\\n' >README.md
  touch "${FIRST}/working"
  sleep 300
fi
""" + TASK_AGENT.split("\n", 2)[2]


def test_a_child_killed_mid_phase_leaves_work_the_next_attempt_starts_on_top_of(project, tmp_path):
    fleet_project(project, ["the task"])
    first = tmp_path / "first"
    first.mkdir()
    env = fleet_env(FIRST=str(first), HEARTBEAT_STALE="600s")
    proc = start_fleet(project, "1", task_agent(tmp_path / "agent.sh", KILLED_FIRST), env=env,
                       log=tmp_path / "fleet.log")
    try:
        wait_for((first / "working").exists, 120, "the first attempt at work")
        (launch,) = fleet_ledger_events(project, "launch")
        # The child's whole tree killed at once (the OOM killer, a kill -9 of its group): its loop's
        # companion too, so nothing commits the agent's edit.
        os.killpg(launch.detail["pid"], signal.SIGKILL)
        for pid in carrying("GENESIS_TASK_ID", task_id("the task")):  # whatever of it left its group
            with contextlib.suppress(ProcessLookupError):  # ...unless it has ended since it was listed
                os.kill(pid, signal.SIGKILL)
        assert proc.wait(timeout=180) == exitcodes.OK, (tmp_path / "fleet.log").read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=180)
    with fleet_ledger(project) as led:
        assert [a.outcome for a in led.attempts(task_id("the task"))] == ["failed", "verified"]
        (left,) = led.events("leftovers")
    assert any("committed 1 file(s) left uncommitted by attempt 1" in d for d in left.detail["done"])
    log = git(project, "log", "--format=%s", "HEAD")
    assert "Genesis: work left by attempt 1, which ended:" in log
    assert git(project, "show", "HEAD:README.md") == "half done by the first attempt\n"  # kept, and home
    assert parse(tasks_on(project)).items[0].state == DONE


# The first attempt's agent makes no progress at all (its breaker opens); every later one does the task.
IDLE_FIRST = """#!/usr/bin/env bash
set -euo pipefail
echo "$(basename "$0") ${GENESIS_TASK_ID}" >>"${RAN}"
if [[ ! -e ${FIRST}/tried ]]; then
  touch "${FIRST}/tried"
  exit 0
fi
""" + TASK_AGENT.split("\n", 2)[2]


def test_a_child_that_ended_with_its_breaker_open_is_restarted_with_a_fair_breaker(project, tmp_path):
    fleet_project(project, ["the task"])
    ran, first = tmp_path / "ran", tmp_path / "first"
    first.mkdir()
    env = fleet_env(RAN=str(ran), FIRST=str(first), GENESIS_FLEET_CHILD_ITERATIONS="3", CB_WARNING_THRESHOLD="1",
                    CB_STOP_THRESHOLD="1")
    proc = start_fleet(project, "1", task_agent(tmp_path / "agent.sh", IDLE_FIRST), env=env,
                       log=tmp_path / "fleet.log")
    try:
        assert proc.wait(timeout=240) == exitcodes.OK, (tmp_path / "fleet.log").read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=180)
    ident = task_id("the task")
    with fleet_ledger(project) as led:
        assert [(a.exit_code, a.outcome) for a in led.attempts(ident)] == [(exitcodes.BREAKER_OPEN, "failed"),
                                                                           (exitcodes.OK, "verified")]
        (left,) = led.events("leftovers")
    assert len(ran.read_text().splitlines()) == 2  # the second attempt ran its agent: not refused by the breaker
    assert any(d.startswith("set aside the circuit breaker attempt 1 left (OPEN") for d in left.detail["done"])
    assert parse(tasks_on(project)).items[0].state == DONE

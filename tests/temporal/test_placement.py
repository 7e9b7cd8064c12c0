"""Where a task's attempts run, proven on the real dev server with two `genesis worker`s in two
separate "machines": a task's next attempt is pinned to the machine holding its worktree and
reuses it; when that machine dies, the attempt waits GENESIS_TEMPORAL_HOST_WAIT_SECONDS for it,
then runs on the other machine on a fresh clone of the task's branch as pushed; a worker that
dies and restarts while its loop runs adopts that loop rather than starting a second one.
Each is said by the attempt's record (memo, report) and by the workflow's history."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import psutil
import pytest

pytest.importorskip("temporalio", reason="temporalio is not installed: pip install -e '.[test]'")

from helpers.fleet import TASK_AGENT, fleet_env, fleet_project, task_agent  # noqa: E402
from helpers.git import git  # noqa: E402
from helpers.temporal import GENESIS, Machines, loops_under, origin_for, run_payloads  # noqa: E402
from temporalio.api.enums.v1 import PendingActivityState  # noqa: E402
from temporalio.client import Client  # noqa: E402

from genesis.fleet.taskref import task_id  # noqa: E402
from genesis.temporal import adoption, reading, tether  # noqa: E402
from genesis.temporal.records import fingerprint, fleet_workflow_id, task_workflow_id  # noqa: E402

from .test_fleet import record_histories  # noqa: E402

pytestmark = [pytest.mark.temporal, pytest.mark.heavy]

TEXT = "write the alpha note"
FLEET_WAIT = 180.0
# H + 1 s + S past 10 s: a decision sooner after a worker's death may wait 10 s more for the
# dead worker's sticky queue (see docs/maintainers/temporal.md), which would only make the test slower.
HEARTBEAT, HOST_WAIT = 3, 6

# One line per run in $RUNS: the machine, whether the worktree's own git folder still holds the
# mark an earlier run left there (kept) or not (new), and whether the first run's pushed work is
# in it. The first run fails (the ladder restarts the task, pinned to its machine); the next
# waits while $SLOW_FILE exists (a phase the test may interrupt); later runs do the task.
FAILS_ONCE = r"""#!/usr/bin/env bash
set -euo pipefail
: "${GENESIS_TASK:?no task given}"
if [[ -n ${AGENT_PIDS:-} ]]; then echo "$$ ${GENESIS_TASK_ID}" >>"${AGENT_PIDS}"; fi
mark="$(git rev-parse --absolute-git-dir)/placement-mark"
runs=0
if [[ -e ${RUNS} ]]; then runs=$(wc -l <"${RUNS}"); fi
seen=new
if [[ -e ${mark} ]]; then seen=kept; fi
work=no
if [[ -e first-attempt.txt ]]; then work=yes; fi
echo "${MACHINE} ${seen} ${work}" >>"${RUNS}"
touch "${mark}"
if (( runs == 0 )); then printf 'from the first attempt, on %s\n' "${MACHINE}" >first-attempt.txt; exit 1; fi
if (( runs == 1 )); then while [[ -e ${SLOW_FILE} ]]; do sleep 0.1; done; fi
""" + "\n".join(TASK_AGENT.splitlines()[6:]) + "\n"

# Each run says when it started ($PY's clock, the machines' one clock). On $SLOW_ON it holds a
# lock on $ALIVE for as long as it or any process of its tree lives (a pid says nothing across
# boxes of their own pids) and waits while $SLOW_FILE exists; elsewhere it first tries that lock,
# and says so in $OVERLAPS if an agent of $SLOW_ON still holds it.
STAMPED = r"""#!/usr/bin/env bash
set -euo pipefail
: "${GENESIS_TASK:?no task given}"
started="$("${PY}" -c 'import time; print(repr(time.time()))')"
if [[ ${MACHINE} == "${SLOW_ON}" ]]; then
  exec 7>>"${ALIVE}"
  "${PY}" -c 'import fcntl; fcntl.flock(7, fcntl.LOCK_EX)'
elif ! "${PY}" -c 'import fcntl, sys; fcntl.flock(open(sys.argv[1], "a"), fcntl.LOCK_EX | fcntl.LOCK_NB)' \
    "${ALIVE}" 2>/dev/null; then
  echo "an agent of ${SLOW_ON} alive as ${MACHINE} started" >>"${OVERLAPS}"
fi
echo "$$ ${GENESIS_TASK_ID} ${started}" >>"${AGENT_PIDS}"
while [[ ${MACHINE} == "${SLOW_ON}" && -e ${SLOW_FILE} ]]; do sleep 0.1; done
""" + "\n".join(TASK_AGENT.splitlines()[6:]) + "\n"
# A heartbeat timeout whose tether grace is above zero for an unplaced attempt: stopped by construction.
TETHER_HEARTBEAT = 20


@pytest.fixture
def machines(dev_server, tmp_path):
    world = Machines(tmp_path, dev_server.address, f"p{uuid.uuid4().hex[:8]}",
                     fleet_env(GENESIS_TEMPORAL_HEARTBEAT_SECONDS=str(HEARTBEAT),
                               GENESIS_TEMPORAL_HOST_WAIT_SECONDS=str(HOST_WAIT), HEARTBEAT_STALE="120s"))
    yield world
    world.stop_all()


def logs(world: Machines) -> str:
    return "\n".join(f"--- {name}\n{world.log(name)[-2500:]}" for name in ("home", "worker-A", "worker-B"))


def wait_for(what: str, check, world: Machines, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g}s\n{logs(world)}"
        time.sleep(0.1)


def wait_end(proc: subprocess.Popen, what: str, world: Machines) -> int:
    deadline = time.monotonic() + FLEET_WAIT
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert proc.poll() is not None, f"{what} did not end within {FLEET_WAIT:g}s\n{logs(world)}"
    return proc.returncode


def lines(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


async def read_task(address: str, project: Path, remote: Path, task: str) -> tuple[dict, list, list[dict]]:
    """The task's memo, its activities as its history tells them, and each run_attempt's payload."""
    target = git(project, "symbolic-ref", "--short", "HEAD").strip()
    fleet = fleet_workflow_id(fingerprint(str(remote), target))
    client = await Client.connect(address)
    memos = await reading.task_memos(client, fleet)
    handle = client.get_workflow_handle(task_workflow_id(fleet, task))
    runs = [t for t in await reading.tries_of(handle) if t.activity == "run_attempt"]
    return memos.get(task, {}), runs, await run_payloads(handle)


async def pending_runs(address: str, project: Path, remote: Path, task: str) -> list:
    """The task's run_attempt in flight, as Temporal describes it (its try, its state, its worker)."""
    target = git(project, "symbolic-ref", "--short", "HEAD").strip()
    client = await Client.connect(address)
    handle = client.get_workflow_handle(task_workflow_id(fleet_workflow_id(fingerprint(str(remote), target)), task))
    described = await handle.describe()
    return [p for p in described.raw_description.pending_activities if p.activity_type.name == "run_attempt"]


def leaders(root: Path) -> set[int]:
    """The machine's loops by their own pids: the loop script run by bash, leading its session
    (not its subshells, nor a sandbox that names the script among its mounts)."""
    found = set()
    for proc in loops_under(root):
        try:
            argv = proc.cmdline()
            if len(argv) > 1 and argv[1].endswith("start-multi-agent-loop.sh") and os.getsid(proc.pid) == proc.pid:
                found.add(proc.pid)
        except (OSError, psutil.Error):
            pass
    return found


def held(path: Path) -> bool:
    """Whether a process holds the lock on path (flock: it goes with the last process of its holder)."""
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False


def report_of(project: Path, world: Machines) -> str:
    done = subprocess.run([*GENESIS, "--project", str(project), "report"], env=world.env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.fault(108)
def test_a_restart_is_pinned_to_its_machine_and_moves_to_a_fresh_clone_when_that_machine_dies(
        machines, project, tmp_path):
    """Both machines poll from the start. The task's first attempt fails wherever it ran (X); its
    restart is pinned to X's queue and runs in X's kept worktree although the other machine (Y)
    is idle, and is mid-phase when X dies: its heartbeat times out, its retry waits for X on X's
    queue for HOST_WAIT seconds (a schedule-to-start timeout), and the task resumes on Y, on a
    fresh clone of its branch holding X's pushed work, which comes home."""
    fleet_project(project, [TEXT])
    remote = origin_for(project, tmp_path)
    target = git(project, "symbolic-ref", "--short", "HEAD").strip()
    runs_file, slow = tmp_path / "runs", tmp_path / "slow"
    slow.write_text("held\n")
    machines.env.update(RUNS=str(runs_file), SLOW_FILE=str(slow))
    machines.worker("A", parallel=1)
    machines.worker("B", parallel=1)
    home = machines.home(project, 1, "--set", f"GENESIS_AGENT_CMD=bash {task_agent(tmp_path / 'a.sh', FAILS_ONCE)}",
                         "--set", "GENESIS_PHASES=Builder", "--set", "GENESIS_FLEET_CHILD_ITERATIONS=1")
    wait_for("the restart's run held", lambda: len(lines(runs_file)) == 2, machines)
    x = lines(runs_file)[0][0]
    y = "A" if x == "B" else "B"
    machines.kill(x)
    wait_for(f"the task resumed on {y}", lambda: len(lines(runs_file)) == 3, machines, timeout=60)
    assert wait_end(home, "the fleet", machines) == 0, logs(machines)

    # What the agent saw: two runs on X, the restart in the worktree the first one made; the
    # last on Y in a worktree new there, with X's pushed work in it.
    assert lines(runs_file) == [[x, "new", "no"], [x, "kept", "yes"], [y, "new", "yes"]]
    assert [line.split()[1] for line in machines.agents(y)] == [task_id(TEXT)]   # Y never ran it before

    memo, runs, payloads = asyncio.run(read_task(machines.address, project, remote, task_id(TEXT)))
    steps = [(a["kind"], a["outcome"], a["host"], a["queue"].rpartition("-")[2].rpartition("@")[2])
             for a in memo["attempts"]]
    assert steps == [("start", "failed", x, "any"), ("restart", "stopped", x, x), ("resume", "verified", y, "any")], \
        steps
    assert f"its machine {x} did not come back within {HOST_WAIT}s" in memo["attempts"][1]["reason"]
    # Where each attempt's worktree came from, failed attempts included: X's first made it, its
    # restart kept it (it never came back to say), Y's was a fresh clone.
    assert [a["fresh_clone"] for a in memo["attempts"]] == [True, False, True], memo["attempts"]
    # The history: which queue each try was scheduled on, which worker took it, on what worktree.
    assert [(r.queue.endswith("-any"), r.queue.endswith(f"@{x}"), r.closed) for r in runs] == \
        [(True, False, "failed"), (False, True, "timed out"), (True, False, "completed")]
    assert [r.host for r in runs] == [x, "", y]   # a try that never started names no worker
    assert [(p.get("host"), p.get("fresh_clone")) for p in payloads] == [(x, True), (None, None), (y, True)], payloads
    assert runs[1].failure == "activity ScheduleToStart timeout <- activity Heartbeat timeout", runs[1]
    assert "first-attempt.txt" in git(remote, "ls-tree", "-r", "--name-only", target).split()
    assert x in git(remote, "show", f"{target}:first-attempt.txt")   # X's pushed work came home through Y
    assert "[x] write the alpha note" in git(remote, "show", f"{target}:TASKS.md")
    # Genesis's report says which too.
    report = report_of(project, machines)
    assert f"did not come back within {HOST_WAIT}s" in report, report
    assert f"on {y} (a fresh clone of its branch)" in report, report
    record_histories(machines, project, remote, "machine-gone")


def test_a_worker_killed_and_restarted_while_its_pinned_loop_runs_adopts_that_loop(machines, project, tmp_path):
    """The task's first attempt fails on A, so its restart is pinned to A; while that restart's
    agent works, only A's worker process is SIGKILLed (its loop, in a session of its own, lives
    on, tethered to a lease nobody renews) and started again. Temporal's retry can only start on
    A's queue for HOST_WAIT seconds, and the loop's tether waits that long (less its margins) for
    a worker: the retry finds the loop still holding its worktree's lock and follows it to its
    end, renewing the lease in its own name: one loop, one agent, the attempt's work merged once."""
    fleet_project(project, [TEXT])
    remote = origin_for(project, tmp_path)
    target = git(project, "symbolic-ref", "--short", "HEAD").strip()
    runs_file, slow = tmp_path / "runs", tmp_path / "slow"
    slow.write_text("held\n")
    machines.env.update(RUNS=str(runs_file), SLOW_FILE=str(slow))
    machines.env["GENESIS_TEMPORAL_HOST_WAIT_SECONDS"] = "60"   # the pinned loop's tether waits about that long
    worker = machines.worker("A", parallel=1)
    home = machines.home(project, 1, "--set", f"GENESIS_AGENT_CMD=bash {task_agent(tmp_path / 'a.sh', FAILS_ONCE)}",
                         "--set", "GENESIS_PHASES=Builder", "--set", "GENESIS_FLEET_CHILD_ITERATIONS=1")
    wait_for("the restart's agent working on A", lambda: len(machines.agents("A")) == 2, machines)

    def stage() -> tuple[int, str]:   # the try's attempt and what it last told Temporal by its heartbeat
        found = asyncio.run(pending_runs(machines.address, project, remote, task_id(TEXT)))
        beats = found[0].heartbeat_details.payloads if found else []
        return (found[0].attempt if found else 0), (json.loads(beats[0].data).get("stage", "") if beats else "")

    wait_for("Temporal told the restart runs", lambda: stage() == (1, "running"), machines)
    before = leaders(machines.roots["A"])
    assert len(before) == 1, before
    os.killpg(worker.pid, signal.SIGKILL)   # the worker alone: the loop and its tether run in sessions of their own
    worker.wait()
    assert leaders(machines.roots["A"]) == before
    machines.worker("A", parallel=1)

    def retried() -> bool:   # the history holds a try's start only once it ends: ask for the pending one
        (pending,) = asyncio.run(pending_runs(machines.address, project, remote, task_id(TEXT))) or [None]
        return pending is not None and pending.attempt == 2 and pending.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED

    wait_for("Temporal's retry started on the new worker", retried, machines, timeout=60)
    time.sleep(3)   # past LIVE_FLOOR: a tether ignoring the new worker's lease would have acted by now
    assert leaders(machines.roots["A"]) == before   # the same loop, no second one
    slow.unlink()
    assert wait_end(home, "the fleet", machines) == 0, logs(machines)

    assert len(machines.agents("A")) == 2, machines.agents("A")   # one agent per attempt, never a third
    memo, runs, payloads = asyncio.run(read_task(machines.address, project, remote, task_id(TEXT)))
    first, restart = memo["attempts"]
    assert (first["kind"], first["outcome"], first["host"]) == ("start", "failed", "A"), first
    assert (restart["kind"], restart["outcome"], restart["host"], restart["tries"], restart["adopted"]) == \
        ("restart", "verified", "A", 2, True), restart
    assert restart["queue"].endswith("@A") and restart["lost"].startswith("A: running"), restart
    assert [r.closed for r in runs] == ["failed", "completed"], runs
    assert runs[1].attempt == 2 and "heartbeat" in runs[1].last_failure.lower(), runs[1]
    assert payloads[1]["adopted"] is True
    fleet_dir = next(machines.roots["A"].glob("*/fleet"))
    assert not tether.record_file(fleet_dir, task_id(TEXT)).exists()   # the tether never stopped it
    ticks = git(remote, "log", "--format=%s", target).splitlines()
    assert sum(1 for s in ticks if TEXT in s) == 1, ticks
    assert "(adopted its running loop)" in report_of(project, machines)


def test_a_worker_killed_alone_has_its_loops_agent_gone_before_the_retry_starts_one_elsewhere(
        machines, project, tmp_path):
    """The task's first attempt (unplaced: its retry may run on any machine) works on A when
    only A's worker is SIGKILLed; B's worker polls. The loop's tether, its grace derived from the
    heartbeat timeout, ends the loop's whole tree before Temporal can time the attempt out: by
    the records, A's agent was gone (the tether's end, and no live pid of it seen by B's agent
    as it started) before B's agent for the task started."""
    fleet_project(project, [TEXT])
    remote = origin_for(project, tmp_path)
    target = git(project, "symbolic-ref", "--short", "HEAD").strip()
    slow = tmp_path / "slow"
    slow.write_text("held\n")
    alive = tmp_path / "alive"
    machines.env.update(SLOW_FILE=str(slow), SLOW_ON="A", OVERLAPS=str(tmp_path / "overlaps"), ALIVE=str(alive),
                        GENESIS_TEMPORAL_HEARTBEAT_SECONDS=str(TETHER_HEARTBEAT))
    worker = machines.worker("A", parallel=1)
    home = machines.home(project, 1, "--set", f"GENESIS_AGENT_CMD=bash {task_agent(tmp_path / 'a.sh', STAMPED)}",
                         "--set", "GENESIS_PHASES=Builder")
    wait_for("the agent working on A", lambda: len(machines.agents("A")) == 1, machines)
    machines.worker("B", parallel=1)
    loop_a = leaders(machines.roots["A"])
    assert len(loop_a) == 1, loop_a
    assert held(alive)   # the record works: A's agent holds its lock while it lives
    os.killpg(worker.pid, signal.SIGKILL)   # the worker alone: the loop and its tether run in sessions of their own
    worker.wait()
    wait_for("the task's agent on B", lambda: len(machines.agents("B")) == 1, machines, timeout=90)
    slow.unlink()
    assert wait_end(home, "the fleet", machines) == 0, logs(machines)

    fleet_dir = next(machines.roots["A"].glob("*/fleet"))
    stopped = json.loads(tether.record_file(fleet_dir, task_id(TEXT)).read_text())
    (_b_agent, b_task, b_started), = [line.split() for line in machines.agents("B")]
    assert b_task == task_id(TEXT)
    assert "is gone" in stopped["why"] and stopped["processes"] >= 2, stopped
    assert stopped["ended"] < float(b_started), (stopped, b_started)   # A's tree was gone before B's agent began
    assert not (tmp_path / "overlaps").exists(), (tmp_path / "overlaps").read_text()   # B saw no live agent of A's
    assert not leaders(machines.roots["A"]) and not held(alive)
    assert adoption.read_launch(fleet_dir, task_id(TEXT))["stopping"] is True
    memo, runs, _payloads = asyncio.run(read_task(machines.address, project, remote, task_id(TEXT)))
    (attempt,) = memo["attempts"]
    assert (attempt["outcome"], attempt["host"], attempt["tries"], attempt["adopted"]) == ("verified", "B", 2, False)
    (run,) = runs
    assert run.attempt == 2 and "heartbeat" in run.last_failure.lower(), run
    ticks = git(remote, "log", "--format=%s", target).splitlines()
    assert sum(1 for s in ticks if TEXT in s) == 1, ticks

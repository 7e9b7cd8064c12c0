"""One real loop in a linked worktree, told its one task (GENESIS_TASK), as a fleet's monitor
starts a child: the prompt and the environment name the task, the agent's own commit works in
the default box, the loop ends exit 0 "done" when THIS task is ticked whatever the others, and
a push the remote refuses is said and never forced; a bad commit key is refused at the start
(a keyed child's night: tests/loop/test_keyedtries.py). A monitor that dies mid-night is told
once while the child goes on to its own end, or, with GENESIS_FLEET_MONITOR_STOP_SECONDS, ends
the child at its next check between phases."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.agent import script
from helpers.git import git, new_repo
from helpers.loop import GENESIS, LOOP, loop_env, run_loop
from helpers.receiver import Receiver
from helpers.waits import wait_for

from genesis import exitcodes
from genesis.ledger.store import Ledger, LedgerError

TASK = "Serve it over HTTP"
TASKS = f"# Tasks\n\n- [ ] Add a greeting\n- [ ] {TASK}\n- [ ] Log each request\n"
CHILD = {"GENESIS_TASK": TASK, "GENESIS_TASK_ID": "serve-it-over-http-5d41e2", "PORT": "20040",
         "GENESIS_PORT_BASE": "20040", "GENESIS_PORT_COUNT": "10"}

# Builder: notes what it was told, commits its own work with git, marks its task [?];
# Criticizer: marks it [x]. Scripted as a model would follow the prompt: the task named first.
# The prompt's head is read from a here-string: from a pipe, `head` could exit before printf
# wrote its last line, and printf's SIGPIPE would fail the agent (set -o pipefail) on a busy machine.
AGENT = r"""#!/usr/bin/env bash
set -euo pipefail
prompt="${!#}"
mkdir -p notes
{ printf 'task=%s\nid=%s\nport=%s\nbase=%s\ncount=%s\nfleet=%s\n' "${GENESIS_TASK:-}" "${GENESIS_TASK_ID:-}" \
    "${PORT:-}" "${GENESIS_PORT_BASE:-}" "${GENESIS_PORT_COUNT:-}" "${GENESIS_FLEET_DIR:-}"
  head -3 <<<"$prompt"; } > "notes/$GENESIS_AGENT.txt"
if [ "$GENESIS_AGENT" = Builder ]; then
  echo "served" > server.txt
  git add server.txt && git -c user.name=Agent -c user.email=agent@example.invalid commit -qm "Serve it"
  sed -i "s/^- \[ \] $GENESIS_TASK\$/- [?] $GENESIS_TASK/" TASKS.md
else
  sed -i "s/^- \[?\] $GENESIS_TASK\$/- [x] $GENESIS_TASK/" TASKS.md
fi
"""


@pytest.fixture
def child(tmp_path: Path) -> dict[str, Path]:
    """A project with three open tasks and a linked worktree for one of them, where a fleet makes it."""
    main = new_repo(tmp_path / "repo")
    (main / "TASKS.md").write_text(TASKS)
    git(main, "add", "TASKS.md")
    git(main, "commit", "-qm", "tasks")
    tree = main / ".git" / "genesis-worktrees" / "serve-it-over-http-5d41e2"
    git(main, "worktree", "add", "-q", "-b", "genesis/task/serve-it-over-http-5d41e2", str(tree))
    git(tree, "config", "user.name", "Agent")
    git(tree, "config", "user.email", "agent@example.invalid")
    return {"main": main, "tree": tree, "agent": script(tmp_path / "agent.sh", AGENT),
            "state": main / ".git" / "worktrees" / tree.name / "genesis"}


def events(state: Path, kind: str | None = None) -> list[dict]:
    path = state / "ledger.sqlite3"
    if not path.exists():
        return []
    try:
        with Ledger.open(path, readonly=True) as led:
            return [e for e in led.events(None) if kind is None or e["event"] == kind]
    except LedgerError:  # read while the loop makes it: nothing yet
        return []


BRANCH = "genesis/task/serve-it-over-http-5d41e2"


def shared_remote(child: dict[str, Path], tmp_path: Path) -> Path:
    """A real bare remote the machines share, the project pushed to it; the task's branch, made
    with no upstream as the fleet makes it, is not on it yet."""
    bare = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    git(child["main"], "remote", "add", "origin", str(bare))
    git(child["main"], "push", "-q", "-u", "origin", "HEAD")
    return bare


def rival_push(bare: Path, tmp_path: Path) -> str:
    """Another machine pushed the task's branch meanwhile: the remote's tip, which this one lacks."""
    other = tmp_path / "machine-b"
    git(tmp_path, "clone", "-q", str(bare), str(other))
    git(other, "checkout", "-q", "-b", BRANCH)
    (other / "theirs.txt").write_text("theirs\n")
    git(other, "add", "theirs.txt")
    git(other, "commit", "-qm", "theirs")
    git(other, "push", "-q", "origin", BRANCH)
    return git(bare, "rev-parse", f"refs/heads/{BRANCH}")


@pytest.mark.whole
def test_a_loop_in_a_linked_worktree_works_its_one_task_to_done_and_never_forces_a_refused_push(child, tmp_path):
    """Its task's branch tracks an upstream the user set, which another machine pushed meanwhile."""
    main, tree = child["main"], child["tree"]
    bare = shared_remote(child, tmp_path)
    theirs = rival_push(bare, tmp_path)
    git(tree, "fetch", "-q", "origin")   # a local fleet's child pushes only to an upstream the user set
    git(tree, "branch", "-q", "--set-upstream-to", f"origin/{BRANCH}")
    head = git(main, "rev-parse", "HEAD")
    done = run_loop(tree, "--trust", "--agent-cmd", f"bash {child['agent']}", "--max-iterations", "3",
                    "--set", "GENESIS_PHASES=Builder Criticizer", "--set", "AUTO_PUSH=true", env=loop_env(**CHILD))
    assert done.returncode == 0, done.stderr
    assert "iteration 1: done: the task 'Serve it over HTTP' is done in TASKS.md" in done.stderr
    (end,) = events(child["state"], "loop_end")
    assert end["exit_code"] == 0 and end["reason"].startswith("done")
    # Only this task is ticked, in the worktree; the others stay open for other loops.
    assert (tree / "TASKS.md").read_text() == TASKS.replace(f"- [ ] {TASK}", f"- [x] {TASK}")
    # The agent was told its task, first, and had its task and ports, not the fleet's state.
    notes = (tree / "notes" / "Builder.txt").read_text().splitlines()
    assert notes[:6] == [f"task={TASK}", "id=serve-it-over-http-5d41e2", "port=20040", "base=20040", "count=10",
                         "fleet="]
    assert notes[6] == "This run works on ONE task of TASKS.md (id serve-it-over-http-5d41e2):"
    assert notes[8] == f"    {TASK}"
    # Its own commit in the box, then Genesis's auto-commits, on the task's branch; the project's untouched.
    subjects = git(tree, "log", "--format=%s", f"{head.strip()}..HEAD").splitlines()
    assert subjects[-1] == "Serve it" and len(subjects) == 3, subjects
    assert git(main, "rev-parse", "HEAD") == head and git(main, "status", "--porcelain") == ""
    (box,) = events(child["state"], "sandbox")
    assert box["box"] == "bubblewrap"
    assert [e["breaker"] for e in events(child["state"], "iteration_end")] == ["CLOSED"]
    # Unkeyed, the existing rule: each refused push is said and the loop goes on; their work is kept.
    failed = events(child["state"], "commit_failed")
    assert [(e["phase"], e["in_a_row"]) for e in failed] == [("Builder", 1), ("Criticizer", 2)]
    assert all("[rejected]" in e["error"] and "never forces a push" in e["error"] for e in failed), failed
    assert git(bare, "rev-parse", f"refs/heads/{BRANCH}") == theirs
    assert "auto-commit failed (2 in a row): git push failed" in done.stderr
    status = subprocess.run([*GENESIS, "--project", str(tree), "status"], capture_output=True, text=True,
                            timeout=60, env=loop_env())
    assert status.returncode == exitcodes.NOT_RUNNING, status.stderr  # the loop has ended: said, and read
    assert "2 open, 0 awaiting review, 1 done (TASKS.md)" in status.stdout, status.stdout


def test_a_bad_commit_key_is_refused_at_the_start(child):
    done = run_loop(child["tree"], "--trust", "--agent-cmd", f"bash {child['agent']}", "--max-iterations", "1",
                    env=loop_env(**CHILD, GENESIS_COMMIT_KEY="fleet/task #3"))
    assert done.returncode == exitcodes.USAGE, done.stderr
    assert "GENESIS_COMMIT_KEY='fleet/task #3' (env) holds a space" in done.stderr, done.stderr
    assert events(child["state"], "phase_start") == []


# A monitor stand-in: beats into monitor.json as the fleet's monitor does, until it is killed.
MONITOR = r"""import json, os, sys, time
folder = sys.argv[1]
while True:
    tmp = os.path.join(folder, ".monitor.json.tmp")
    with open(tmp, "w") as fh:
        json.dump({"pid": os.getpid(), "run_id": "fleet-run", "started": 0, "at": time.time()}, fh)
    os.replace(tmp, os.path.join(folder, "monitor.json"))
    time.sleep(0.1)
"""

# Builder only: its first run holds while $HOLD exists (saying so: its output is its sign of
# life), so that the test can kill the monitor and let its heartbeat age meanwhile; unless
# $NEVER_TICK is set, its second run ticks its task.
HELD = r"""#!/usr/bin/env bash
set -euo pipefail
n=$(( $(cat runs 2>/dev/null || echo 0) + 1 )); echo "$n" > runs
while [ "$n" -eq 1 ] && [ -e "$HOLD" ]; do echo "held"; sleep 0.5; done
echo "run $n"
if [ "$n" -ge 2 ] && [ -z "${NEVER_TICK:-}" ]; then
  sed -i "s/^- \[ \] $GENESIS_TASK\$/- [x] $GENESIS_TASK/" TASKS.md
fi
"""


def monitored(child: dict[str, Path], procs) -> tuple[Path, subprocess.Popen]:
    """The fleet's folder, with a monitor stand-in beating in it."""
    fleet = child["main"] / ".git" / "genesis" / "fleet"
    fleet.mkdir(parents=True, mode=0o700)
    monitor = procs([sys.executable, "-c", MONITOR, str(fleet)])
    wait_for(lambda: (fleet / "monitor.json").exists(), what="the monitor's first beat")
    return fleet, monitor


def kill_while_held(child: dict[str, Path], monitor: subprocess.Popen, fleet: Path, hold: Path, age: float) -> None:
    """Once the child's first phase runs: the monitor SIGKILLed, and the first phase let go only
    when the heartbeat is older than `age`, so that the child's next check finds it so."""
    wait_for(lambda: events(child["state"], "phase_start"), timeout=60, what="the child's first phase")
    assert events(child["state"], "monitor_down") == []  # beating: nothing said
    os.kill(monitor.pid, signal.SIGKILL)
    monitor.wait(timeout=10)
    at = json.loads((fleet / "monitor.json").read_text())["at"]
    wait_for(lambda: time.time() - at > age, what="the monitor's heartbeat to age")
    hold.unlink()


@pytest.mark.whole
@pytest.mark.fault(96)
def test_a_child_whose_monitor_is_killed_raises_one_monitor_down_and_goes_on_to_its_end(child, tmp_path, procs):
    tree = child["tree"]
    fleet, monitor = monitored(child, procs)
    agent, hold = script(tmp_path / "held.sh", HELD), tmp_path / "hold"
    hold.touch()
    with Receiver() as rx:
        env = loop_env(**CHILD, GENESIS_FLEET_DIR=str(fleet), GENESIS_FLEET_MONITOR_STALE_SECONDS="2",
                       GENESIS_NOTIFY_DESKTOP="false", GENESIS_NOTIFY_WEBHOOK=f"{rx.url}/hook", HOLD=str(hold))
        loop = subprocess.Popen(["bash", str(LOOP), "--project", str(tree), "--trust", "--agent-cmd", f"bash {agent}",
                                 "--max-iterations", "6", "--set", "GENESIS_PHASES=Builder"], env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            kill_while_held(child, monitor, fleet, hold, 2)
            out, err = loop.communicate(timeout=120)
        finally:
            if loop.poll() is None:
                loop.kill()
                loop.wait()
        assert loop.returncode == 0, err
        wait_for(lambda: any(r.json["genesis"]["kind"] == "monitor_down" for r in rx.requests), timeout=60,
                 what="the monitor-down alert")
        kinds = [r.json["genesis"]["kind"] for r in rx.requests]
    # A fleet's child tells no end of its own: its fleet does.
    assert not any(r.json["genesis"].get("final") for r in rx.requests), kinds
    # One record and one alert, though two checks found the monitor down (iteration 2's start and
    # its phase's).
    (down,) = events(child["state"], "monitor_down")
    assert down["pid"] == monitor.pid and down["age"] >= 2 and down["task_id"] == "serve-it-over-http-5d41e2"
    assert kinds.count("monitor_down") == 1, kinds
    assert "monitor_back" not in kinds
    assert err.count("the fleet's monitor looks down") == 1
    # The child went on to its own end: every run, its task ticked, exit 0 "done".
    assert [e["iteration"] for e in events(child["state"], "iteration_start")] == [1, 2]
    assert events(child["state"], "loop_end")[-1]["reason"].startswith("done")
    assert f"iteration 1: not done: the task '{TASK}' is open in TASKS.md" in err


@pytest.mark.whole
def test_a_child_whose_monitor_stays_gone_past_the_stop_bound_stops_cleanly(child, tmp_path, procs):
    tree = child["tree"]
    fleet, monitor = monitored(child, procs)
    agent, hold = script(tmp_path / "held.sh", HELD), tmp_path / "hold"
    hold.touch()
    env = loop_env(**CHILD, GENESIS_FLEET_DIR=str(fleet), GENESIS_FLEET_MONITOR_STALE_SECONDS="1",
                   GENESIS_FLEET_MONITOR_STOP_SECONDS="3", HOLD=str(hold), NEVER_TICK="1")
    loop = subprocess.Popen(["bash", str(LOOP), "--project", str(tree), "--trust", "--agent-cmd", f"bash {agent}",
                             "--max-iterations", "40", "--set", "GENESIS_PHASES=Builder"], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        kill_while_held(child, monitor, fleet, hold, 3)
        out, err = loop.communicate(timeout=120)
    finally:
        if loop.poll() is None:
            loop.kill()
            loop.wait()
    assert loop.returncode == exitcodes.MONITOR_LOST == 34, err
    (lost,) = events(child["state"], "monitor_lost")
    assert lost["gone"] >= 3 and lost["pid"] == monitor.pid and lost["task_id"] == "serve-it-over-http-5d41e2"
    # Stopped at its first check between phases past the bound: no phase started after it, and
    # none after the one the monitor died in, of the 40 iterations allowed.
    starts = events(child["state"], "phase_start")
    assert all(e["epoch"] <= lost["epoch"] for e in starts)
    assert [e["iteration"] for e in starts] == [1]
    (end,) = events(child["state"], "loop_end")
    assert end["exit_code"] == 34
    assert end["reason"].startswith("the fleet's monitor is gone (its heartbeat is ") and \
        "another machine's loop, which may have it by now" in end["reason"], end["reason"]
    # Cleanly: every phase's work committed on the task's branch, the loop's lock let go.
    assert git(tree, "status", "--porcelain") == ""
    assert git(tree, "show", "HEAD:runs").strip() == str(len(starts))
    status = subprocess.run([*GENESIS, "--project", str(tree), "status"], capture_output=True, text=True,
                            timeout=60, env=loop_env())
    assert status.returncode == exitcodes.NOT_RUNNING, status.stderr


# A monitor stand-in that answers as the fleet's monitor does (loop/agentgo.py): while the file
# HOLD exists, the restart budget holds any agent death's next start a second ahead; then the go.
ANSWERING = r"""import json, os, sys, time
folder, task, hold = sys.argv[1:4]
while True:
    answer = {"died": 1e12, "held": time.time() + 1} if os.path.exists(hold) else {"died": 1e12}
    tmp = os.path.join(folder, ".monitor.json.tmp")
    with open(tmp, "w") as fh:
        json.dump({"pid": os.getpid(), "run_id": "fleet-run", "started": 0, "at": time.time(),
                   "agent_restarts": {task: answer}}, fh)
    os.replace(tmp, os.path.join(folder, "monitor.json"))
    time.sleep(0.1)
"""

# Builder only: its first agent is killed by SIGKILL (as the OOM killer would); the next ticks the task.
KILLED_FIRST = r"""#!/usr/bin/env bash
set -euo pipefail
n=$(( $(cat runs 2>/dev/null || echo 0) + 1 )); echo "$n" > runs
if [ "$n" -eq 1 ]; then kill -9 $$; fi
sed -i "s/^- \[ \] $GENESIS_TASK\$/- [x] $GENESIS_TASK/" TASKS.md
"""


@pytest.mark.whole
def test_a_child_whose_agent_was_killed_starts_the_next_only_on_its_monitors_go(child, tmp_path, procs):
    main, tree = child["main"], child["tree"]
    fleet = main / ".git" / "genesis" / "fleet"
    fleet.mkdir(parents=True, mode=0o700)
    hold = tmp_path / "hold"
    hold.touch()
    procs([sys.executable, "-c", ANSWERING, str(fleet), CHILD["GENESIS_TASK_ID"], str(hold)])
    wait_for(lambda: (fleet / "monitor.json").exists(), what="the monitor's first beat")
    agent = script(tmp_path / "killed.sh", KILLED_FIRST)
    loop = subprocess.Popen(["bash", str(LOOP), "--project", str(tree), "--trust", "--agent-cmd", f"bash {agent}",
                             "--max-iterations", "3", "--set", "GENESIS_PHASES=Builder"],
                            env=loop_env(**CHILD, GENESIS_FLEET_DIR=str(fleet)), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: len([e for e in events(child["state"], "wait_start") if e["kind"] == "budget"]) >= 2,
                 timeout=90, what="the child asking twice for its next agent")
        assert len(events(child["state"], "phase_start")) == 1   # held: no agent started again
        went = time.time()
        hold.unlink()
        out, err = loop.communicate(timeout=120)
    finally:
        if loop.poll() is None:
            loop.kill()
            loop.wait()
    assert loop.returncode == 0, err
    first, second = events(child["state"], "phase_end")
    assert first["returncode"] == 128 + signal.SIGKILL and not first["killed"]
    starts = events(child["state"], "phase_start")
    assert len(starts) == 2 and starts[1]["epoch"] >= went   # the next agent started after the go
    waits = [e for e in events(child["state"], "wait_start") if e["kind"] == "budget"]
    assert all(first["epoch"] <= e["epoch"] <= starts[1]["epoch"] for e in waits)
    assert "restart budget holds the next start" in waits[0]["reason"]
    assert events(child["state"], "loop_end")[-1]["reason"].startswith("done")

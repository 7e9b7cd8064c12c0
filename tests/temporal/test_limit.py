"""A usage limit met on one machine holds every task of the account on both machines until its
reset (one durable timer in the account's workflow): no agent starts in between, and a loop
already in a phase on the other machine starts no next phase (it asks the account through its
worker before each). The held attempts are limits, never failures, and every task comes home
after the reset. Proven on the real dev server with two `genesis worker`s, by the agents' own
start records against the account's hold."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid

import pytest

pytest.importorskip("temporalio", reason="temporalio is not installed: pip install -e '.[test]'")

from helpers.agent import script  # noqa: E402
from helpers.fakeclaude import FIXTURES  # noqa: E402
from helpers.fleet import fleet_env, fleet_project  # noqa: E402
from helpers.git import git  # noqa: E402
from helpers.temporal import GENESIS, Machines, origin_for  # noqa: E402

from genesis.fleet.taskref import task_id  # noqa: E402
from genesis.repo.tasks import DONE, parse  # noqa: E402

from .test_fleet import TEXTS, fleet_id, live_status, read_fleet, wait_end, wait_for  # noqa: E402

pytestmark = [pytest.mark.temporal, pytest.mark.heavy]

RESET_IN, MARGIN = 25, 1
# A stand-in `claude`. Each start is logged in STARTS: `epoch task machine`. The first agent on
# LIMIT_ON meets a 5-hour limit resetting in RESET_IN seconds (written to FIRST). An agent that
# starts elsewhere while $HOLD exists works until it is gone, then writes its note, and its task
# is ticked only by a later phase (one that finds the note): its loop has a next phase to hold.
# Every other agent ticks its task at once and ends as a successful run does.
CLAUDE = r'''#!{python}
import os, re, sys, time
machine, task_id = os.environ.get("MACHINE", "?"), os.environ.get("GENESIS_TASK_ID", "?")
with open(os.environ["STARTS"], "a") as fh:
    fh.write(f"{{time.time()!r}} {{task_id}} {{machine}}\n")
fd = None
if machine == os.environ["LIMIT_ON"]:
    try:
        fd = os.open(os.environ["FIRST"], os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        pass
if fd is not None:
    reset = int(time.time() + float(os.environ["RESET_IN"]))
    os.write(fd, str(reset).encode())
    os.close(fd)
    text = re.sub(r'"resetsAt":\d+', f'"resetsAt":{{reset}}', {limit!r})
    sys.stdout.write(text)
    sys.exit(1)
held = machine != os.environ["LIMIT_ON"] and os.path.exists(os.environ["HOLD"])
while held and os.path.exists(os.environ["HOLD"]):
    time.sleep(0.1)
note = f"work-{{task_id}}.txt"
if os.path.exists(note) or not held:
    task = os.environ["GENESIS_TASK"]
    lines = open("TASKS.md").read().splitlines(keepends=True)
    out = [l.replace("[ ]", "[x]", 1) if l.rstrip("\n").endswith(task) and "[ ]" in l else l for l in lines]
    open("TASKS.md", "w").write("".join(out))
open(note, "a").write(f"{{time.time()!r}}\n")
sys.stdout.write({success!r})
'''


async def release_once_held(address: str, prefix: str, hold, within: float) -> float:
    """Removes `hold` the moment the fleet's account holds, by its workflow's own word (asked
    every 0.1 s): the phase under way on the other machine then ends at once, its next due
    inside the hold. When."""
    from temporalio.client import Client

    client = await Client.connect(address)
    deadline = time.monotonic() + within
    seen: dict = {}
    while time.monotonic() < deadline:
        async for wf in client.list_workflows(f'WorkflowId STARTS_WITH "{prefix}-account-"'):
            state = await client.get_workflow_handle(wf.id).query("state")
            seen[wf.id] = state
            if float(state.get("until") or 0.0) > time.time():
                at = time.time()
                hold.unlink()
                return at
        await asyncio.sleep(0.1)
    raise AssertionError(f"the account was not held within {within:g}s; last seen at {time.time():.1f}: {seen}")


async def account_timers(address: str, prefix: str) -> list[int]:
    """The durable timers each account workflow of this prefix started."""
    from temporalio.api.enums.v1 import EventType
    from temporalio.client import Client

    client = await Client.connect(address)
    counts = []
    async for wf in client.list_workflows(f'WorkflowId STARTS_WITH "{prefix}-account-"'):
        events = [e async for e in client.get_workflow_handle(wf.id).fetch_history_events()]
        counts.append(sum(1 for e in events if e.event_type == EventType.EVENT_TYPE_TIMER_STARTED))
    return counts


@pytest.fixture
def machines(dev_server, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # The fixtures' text is in the script: the agent runs in its box, whose /tmp is its own, so a
    # checkout under /tmp is out of its sight.
    script(bin_dir / "claude", CLAUDE.format(python=sys.executable,
                                             limit=(FIXTURES / "limit_five_hour.jsonl").read_text(),
                                             success=(FIXTURES / "success.jsonl").read_text()))
    env = fleet_env(GENESIS_TEMPORAL_HEARTBEAT_SECONDS="3", GENESIS_TEMPORAL_HOST_WAIT_SECONDS="4",
                    GENESIS_TEMPORAL_ACCOUNT="team-subscription", GENESIS_LIMIT_MARGIN_SECONDS=str(MARGIN),
                    PATH=f"{bin_dir}:{fleet_env()['PATH']}", STARTS=str(tmp_path / "starts"),
                    FIRST=str(tmp_path / "first"), RESET_IN=str(RESET_IN), LIMIT_ON="B", HOLD=str(tmp_path / "hold"),
                    GENESIS_FLEET_STAGGER_SECONDS="0", HEARTBEAT_STALE="120s")
    world = Machines(tmp_path, dev_server.address, f"t{uuid.uuid4().hex[:8]}", env)
    yield world
    world.stop_all()


def starts_of(path) -> list[tuple[float, str, str]]:
    return sorted((float(at), task, host) for at, task, host in
                  (line.split() for line in path.read_text().splitlines())) if path.exists() else []


@pytest.mark.fault(107)
def test_a_usage_limit_holds_both_machines_tasks_until_its_reset_with_no_agent_started(machines, project, tmp_path):
    """A's loop is in its first phase when B's first agent meets the limit: no agent starts after
    the account holds, on B or on A (the account's hold, or its answer just before an agent would
    start, or before A's loop's next phase), until the reset and its margin; then all four come
    home. The held attempts, A's running one too, are limits."""
    fleet_project(project, TEXTS)
    remote = origin_for(project, tmp_path)
    target = git(project, "symbolic-ref", "--short", "HEAD").strip()
    (tmp_path / "hold").touch()
    starts = tmp_path / "starts"
    machines.worker("A", parallel=1)
    home = machines.home(project, 4, "--set", "GENESIS_PHASES=Builder", "--set", "GENESIS_FLEET_CHILD_ITERATIONS=3")
    wait_for("A's loop in its first phase", lambda: [s[2] for s in starts_of(starts)] == ["A"], machines)
    (_at, on_a, _host), = starts_of(starts)
    machines.worker("B", parallel=1)   # the next task goes to B, whose first agent meets the limit
    first = tmp_path / "first"
    try:
        held_at = asyncio.run(release_once_held(machines.address, machines.prefix, tmp_path / "hold", 120))
    except AssertionError as exc:   # what each side did, for whoever reads the failure
        raise AssertionError(f"{exc}\nstarts: {starts_of(starts)}\nlimit met, reset at: "
                             f"{first.read_text() if first.exists() else None}\nB: {machines.log('worker-B')[-3000:]}\n"
                             f"A: {machines.log('worker-A')[-2000:]}\nhome: {machines.log('home')[-3000:]}") from exc
    reset = int(first.read_text())
    # While it holds: the fleet-wide limit and its reset (plus the margin), in the home's status
    # and in the one read straight from Temporal.
    shown: dict = {}

    def limit_shown() -> bool:
        time.sleep(0.5)
        shown.update(home=json.loads(subprocess.run(
            [*GENESIS, "--project", str(project), "fleet", "status", "--json"], env=machines.env,
            capture_output=True, text=True, timeout=60).stdout))
        return shown["home"]["limit"] is not None
    wait_for("the home's status showing the account's limit", limit_shown, machines, timeout=20)
    live, _code = live_status(project, machines)
    for doc in (shown["home"], live):
        assert doc["limit"]["kind"] == "limit" and doc["limit"]["until_epoch"] == reset + MARGIN, doc["limit"]
        assert "every task on it, on every machine" in doc["limit"]["reason"], doc["limit"]
    assert wait_end(home, "the fleet", machines) == 0, machines.log("home")[-4000:]

    on_origin = parse(git(remote, "show", f"{target}:TASKS.md"))
    assert {t.text: t.state for t in on_origin.items} == {text: DONE for text in TEXTS}
    seen = starts_of(starts)
    between = [s for s in seen if held_at < s[0] < reset + MARGIN]
    assert between == [], (between, held_at, reset)   # no agent started on either machine inside the hold
    a_task = [s for s in seen if s[1] == on_a]
    assert a_task[0][2] == "A" and len(a_task) >= 2, seen   # A's first phase; the rest after the reset
    assert all(at >= reset + MARGIN for at, _t, _h in a_task[1:]), (a_task, reset)
    assert {task for at, task, _h in seen if at >= reset + MARGIN} == {task_id(t) for t in TEXTS}, seen
    memos, _tries = asyncio.run(read_fleet(machines.address, fleet_id(project, remote)))
    attempts = [a for memo in memos.values() for a in memo["attempts"]]
    assert not [a for a in attempts if a["outcome"] == "failed"], attempts
    limits = [a for a in attempts if a["outcome"] == "limit"]
    assert min(limits, key=lambda a: a["ended"])["host"] == "B", limits   # B's agent met it; the attempts
    assert all(a["ended"] < reset + MARGIN for a in limits), limits      # held after it are limits too
    a_first = memos[on_a]["attempts"][0]
    assert (a_first["host"], a_first["outcome"]) == ("A", "limit"), memos[on_a]["attempts"]
    assert asyncio.run(account_timers(machines.address, machines.prefix)) == [1]

"""A usage limit met on one machine holds every task of the account on both machines until its
reset (one durable timer in the account's workflow), with no agent started in between; the
held attempts are limits, never failures, and every task comes home after the reset."""

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

from genesis.repo.tasks import DONE, parse  # noqa: E402

from .test_fleet import TEXTS, fleet_id, live_status, read_fleet, wait_end, wait_for  # noqa: E402

pytestmark = [pytest.mark.temporal, pytest.mark.heavy]

# A stand-in `claude`: the first agent on machine LIMIT_ON meets a 5-hour limit resetting in
# RESET_IN seconds (it writes the reset to FIRST); every other works WORK_SECONDS, ticks its task
# and ends as a successful run does. Each start is logged in STARTS: `epoch task machine`.
CLAUDE = r'''#!{python}
import os, re, sys, time
with open(os.environ["STARTS"], "a") as fh:
    fh.write(f"{{time.time()}} {{os.environ.get('GENESIS_TASK_ID', '?')}} {{os.environ.get('MACHINE', '?')}}\n")
fd = None
if os.environ.get("MACHINE") == os.environ["LIMIT_ON"]:
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
time.sleep(float(os.environ.get("WORK_SECONDS", "0")))
task = os.environ["GENESIS_TASK"]
lines = open("TASKS.md").read().splitlines(keepends=True)
out = [l.replace("[ ]", "[x]", 1) if l.rstrip("\n").endswith(task) and "[ ]" in l else l for l in lines]
open("TASKS.md", "w").write("".join(out))
open(f"work-{{os.environ['GENESIS_TASK_ID']}}.txt", "w").write(task + "\n")
sys.stdout.write({success!r})
'''


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
                    GENESIS_TEMPORAL_ACCOUNT="team-subscription", GENESIS_LIMIT_MARGIN_SECONDS="1",
                    PATH=f"{bin_dir}:{fleet_env()['PATH']}", STARTS=str(tmp_path / "starts"),
                    FIRST=str(tmp_path / "first"), RESET_IN="25", WORK_SECONDS="4", LIMIT_ON="B",
                    GENESIS_FLEET_STAGGER_SECONDS="0")   # A's first agent works when B's meets the limit
    world = Machines(tmp_path, dev_server.address, f"t{uuid.uuid4().hex[:8]}", env)
    yield world
    world.stop_all()


@pytest.mark.fault(107)
def test_a_usage_limit_holds_both_machines_tasks_until_its_reset_with_no_agent_started(machines, project, tmp_path):
    """B's first agent meets the limit while A's works: no attempt starts an agent after it, on B
    or on A (the account's hold, or the account's answer just before the agent would start),
    until the reset and its margin; then all four come home. The held attempts are limits."""
    fleet_project(project, TEXTS)
    remote = origin_for(project, tmp_path)
    target = git(project, "symbolic-ref", "--short", "HEAD").strip()
    machines.worker("A", parallel=1)
    machines.worker("B", parallel=1)
    home = machines.home(project, 4, "--set", "GENESIS_PHASES=Builder")
    first = tmp_path / "first"
    wait_for("B's agent meeting the limit", lambda: first.exists() and first.read_text().strip(), machines)
    reset = int(first.read_text())
    # While it holds: the fleet-wide limit and its reset (plus the 1 s margin), in the home's
    # status and in the one read straight from Temporal.
    shown: dict = {}

    def held() -> bool:
        time.sleep(0.5)
        shown.update(home=json.loads(subprocess.run(
            [*GENESIS, "--project", str(project), "fleet", "status", "--json"], env=machines.env,
            capture_output=True, text=True, timeout=60).stdout))
        return shown["home"]["limit"] is not None
    wait_for("the home's status showing the account's limit", held, machines, timeout=20)
    live, _code = live_status(project, machines)
    for doc in (shown["home"], live):
        assert doc["limit"]["kind"] == "limit" and doc["limit"]["until_epoch"] == reset + 1, doc["limit"]
        assert "every task on it, on every machine" in doc["limit"]["reason"], doc["limit"]
    assert wait_end(home, "the fleet", machines) == 0, machines.log("home")[-4000:]

    on_origin = parse(git(remote, "show", f"{target}:TASKS.md"))
    assert {t.text: t.state for t in on_origin.items} == {text: DONE for text in TEXTS}
    starts = sorted((float(at), task, host) for at, task, host in
                    (line.split() for line in (tmp_path / "starts").read_text().splitlines()))
    memos, _tries = asyncio.run(read_fleet(machines.address, fleet_id(project, remote)))
    attempts = [a for memo in memos.values() for a in memo["attempts"]]
    limits = [a for a in attempts if a["outcome"] == "limit"]
    known = min(a["ended"] for a in limits)          # the moment the fleet knew of the limit
    assert not [a for a in attempts if a["outcome"] == "failed"], attempts
    first = min(limits, key=lambda a: a["ended"])
    assert first["host"] == "B", limits       # B's agent met it; the attempts held after it are limits too,
    assert all(a["ended"] < reset + 1 for a in limits), limits   # on whichever machine took them
    # A's own task worked on and came home; A then had a free slot and tasks were waiting, and it
    # started nothing until the reset either (below).
    assert [a for a in attempts if a["host"] == "A" and a["outcome"] == "verified"], attempts
    between = [s for s in starts if known < s[0] < reset + 1]
    assert between == [], (between, known, reset)     # no agent started from the limit to its reset + margin
    assert len([s for s in starts if s[0] >= reset + 1]) >= 3, starts   # and they went on after it
    assert account_timers_of(machines) == [1]


def account_timers_of(machines: Machines) -> list[int]:
    return asyncio.run(account_timers(machines.address, machines.prefix))

"""The account's hold across two machines with a loop running on the other: a usage limit met
on A while B's loop is in its first phase, and B's loop starts no next phase until the reset
(it asks the account through its worker before each phase); its attempt ends as a limit, not
spent, and both tasks come home after the reset. Proven on the real dev server with two
`genesis worker`s, by the agents' own start records against the account's hold."""

from __future__ import annotations

import asyncio
import sys
import time
import uuid

import pytest

pytest.importorskip("temporalio", reason="temporalio is not installed: pip install -e '.[test]'")

from helpers.agent import script  # noqa: E402
from helpers.fakeclaude import FIXTURES  # noqa: E402
from helpers.fleet import fleet_env, fleet_project  # noqa: E402
from helpers.git import git  # noqa: E402
from helpers.temporal import Machines, origin_for  # noqa: E402

from genesis.repo.tasks import DONE, parse  # noqa: E402

from .test_fleet import fleet_id, read_fleet, wait_end, wait_for  # noqa: E402

pytestmark = [pytest.mark.temporal, pytest.mark.heavy]

TEXTS = ["write the alpha note", "write the beta note"]
RESET_IN, MARGIN = 30, 1
# A stand-in `claude`. Each start is logged in STARTS: `epoch task machine phase-count`. The
# first agent on LIMIT_ON meets a 5-hour limit resetting in RESET_IN seconds (written to FIRST).
# Every other works while $HOLD exists on another machine, then writes its note; its task is
# ticked only by a later phase (one that finds the note), so each loop runs two phases.
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
while machine != os.environ["LIMIT_ON"] and os.path.exists(os.environ["HOLD"]):
    time.sleep(0.1)
note = f"work-{{task_id}}.txt"
if os.path.exists(note):
    task = os.environ["GENESIS_TASK"]
    lines = open("TASKS.md").read().splitlines(keepends=True)
    out = [l.replace("[ ]", "[x]", 1) if l.rstrip("\n").endswith(task) and "[ ]" in l else l for l in lines]
    open("TASKS.md", "w").write("".join(out))
open(note, "a").write(f"{{time.time()!r}}\n")
sys.stdout.write({success!r})
'''


async def release_once_held(address: str, prefix: str, hold, within: float) -> float:
    """Removes `hold` the moment the fleet's account holds, by its workflow's own word (asked
    every 0.1 s): B's phase under way then ends at once, its next due inside the hold. When."""
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
                    FIRST=str(tmp_path / "first"), RESET_IN=str(RESET_IN), LIMIT_ON="A", HOLD=str(tmp_path / "hold"),
                    GENESIS_FLEET_STAGGER_SECONDS="0", HEARTBEAT_STALE="120s")
    world = Machines(tmp_path, dev_server.address, f"h{uuid.uuid4().hex[:8]}", env)
    yield world
    world.stop_all()


def starts_of(path) -> list[tuple[float, str, str]]:
    return sorted((float(at), task, host) for at, task, host in
                  (line.split() for line in path.read_text().splitlines())) if path.exists() else []


def test_a_limit_met_on_a_holds_the_loop_running_on_b_before_its_next_phase(machines, project, tmp_path):
    fleet_project(project, TEXTS)
    remote = origin_for(project, tmp_path)
    target = git(project, "symbolic-ref", "--short", "HEAD").strip()
    (tmp_path / "hold").touch()
    starts = tmp_path / "starts"
    machines.worker("B", parallel=1)
    home = machines.home(project, 2, "--set", "GENESIS_PHASES=Builder", "--set", "GENESIS_FLEET_CHILD_ITERATIONS=3")
    wait_for("B's loop in its first phase", lambda: [s[2] for s in starts_of(starts)] == ["B"], machines)
    (_at, on_b, _host), = starts_of(starts)
    machines.worker("A", parallel=1)   # the other task goes to A, whose first agent meets the limit
    try:
        held_at = asyncio.run(release_once_held(machines.address, machines.prefix, tmp_path / "hold", 120))
    except AssertionError as exc:   # what each side did, for whoever reads the failure
        first = tmp_path / "first"
        raise AssertionError(f"{exc}\nstarts: {starts_of(starts)}\nlimit met, reset at: "
                             f"{first.read_text() if first.exists() else None}\nA: {machines.log('A')[-3000:]}\n"
                             f"B: {machines.log('B')[-2000:]}\nhome: {machines.log('home')[-3000:]}") from exc
    reset = int((tmp_path / "first").read_text())
    assert wait_end(home, "the fleet", machines) == 0, machines.log("home")[-4000:]

    on_origin = parse(git(remote, "show", f"{target}:TASKS.md"))
    assert {t.text: t.state for t in on_origin.items} == {text: DONE for text in TEXTS}
    seen = starts_of(starts)
    between = [s for s in seen if held_at < s[0] < reset + MARGIN]
    assert between == [], (between, held_at, reset)   # no phase started on either machine inside the hold
    b_task = [s for s in seen if s[1] == on_b]
    assert b_task[0][2] == "B" and len(b_task) >= 2, seen   # B's first phase; the rest after the reset
    assert all(at >= reset + MARGIN for at, _t, _h in b_task[1:]), (b_task, reset)
    memos, _tries = asyncio.run(read_fleet(machines.address, fleet_id(project, remote)))
    b_first = memos[on_b]["attempts"][0]
    assert (b_first["host"], b_first["outcome"]) == ("B", "limit"), memos[on_b]["attempts"]
    assert not [a for m in memos.values() for a in m["attempts"] if a["outcome"] == "failed"], memos

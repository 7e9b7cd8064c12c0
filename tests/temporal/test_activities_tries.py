"""run_attempt's tries share a task branch through the remote: a try SIGKILLed once its first
phase was pushed is retried on another machine's fresh clone, then on its own machine's
worktree, each skipping the phase already keyed (nothing committed twice, nothing pushed lost);
a try whose branch another loop pushed meanwhile steps aside (a "stopped" result with 34, never
a retryable git failure), and the attempt that follows on the same machine starts from the
pushed branch, its own refused commit kept under a ref.
The activity runs in the SDK's ActivityEnvironment with a client of the real dev server."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import subprocess
import time
from pathlib import Path

import psutil
import pytest

pytest.importorskip("temporalio", reason="temporalio is not installed: pip install -e '.[test]'")

from helpers.fleet import fleet_env, task_agent  # noqa: E402
from helpers.git import git  # noqa: E402
from helpers.temporal import procs_under, pushed_project, trusting  # noqa: E402
from temporalio.client import Client  # noqa: E402
from temporalio.exceptions import ApplicationError  # noqa: E402
from temporalio.testing import ActivityEnvironment  # noqa: E402

from genesis import exitcodes  # noqa: E402
from genesis.fleet.taskref import branch_for, task_id  # noqa: E402
from genesis.repo.phasekeys import keys_on  # noqa: E402
from genesis.temporal.activities import ASIDE_REFS, MachineActivities  # noqa: E402
from genesis.temporal.records import USAGE_LIMIT, AttemptInput, TaskSpec, commit_key  # noqa: E402

from .test_activities_gate import Gated  # noqa: E402

pytestmark = [pytest.mark.temporal]

TEXT = "write the beta note"
TID = task_id(TEXT)
BRANCH = branch_for(TID)
# Builder adds a line (always something to commit), then waits while $BUILDER_HOLD exists;
# Criticizer waits while $HOLD exists, then ticks the task. Each start is noted in $RUNS, outside every clone.
AGENT = r"""#!/usr/bin/env bash
set -euo pipefail
echo "${GENESIS_AGENT} ${MACHINE}" >>"${RUNS}"
if [[ ${GENESIS_AGENT} == Builder ]]; then
  echo "built on ${MACHINE}" >>"built.txt"
  while [[ -e ${BUILDER_HOLD} ]]; do sleep 0.1; done
  exit 0
fi
while [[ -e ${HOLD} ]]; do sleep 0.1; done
"${PY}" - <<'PY'
import os
text = os.environ["GENESIS_TASK"]
lines = open("TASKS.md").read().splitlines(keepends=True)
open("TASKS.md", "w").write("".join(l.replace("[ ]", "[x]", 1) if l.rstrip("\n").endswith(text) else l for l in lines))
PY
"""


@pytest.fixture
def world(tmp_path):
    project, remote = pushed_project(tmp_path, [TEXT])
    agent = task_agent(tmp_path / "agent.sh", AGENT)
    roots = [tmp_path / "root-a", tmp_path / "root-b"]
    yield project, remote, agent, roots
    doomed = [proc for root in roots for proc in procs_under(root)]
    for proc in doomed:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(doomed, timeout=10)


def attempt(project: Path, remote: Path, agent: Path, number: int = 1) -> AttemptInput:
    target = git(project, "symbolic-ref", "--short", "HEAD").strip()
    return AttemptInput("tfleet", "tfleet/task", TaskSpec(TID, TEXT, BRANCH), number, "start", 0, str(remote),
                        target, "tacct", ("Builder", "Criticizer"), 2,
                        (("GENESIS_AGENT_CMD", f"bash {agent}"), ("GENESIS_PHASES", "Builder Criticizer"),
                         ("PHASE_Criticizer_TRIGGER", "always")), 1.0)


def machine(client: Client, root: Path, tmp: Path, name: str, hold: Path,
            builder_hold: Path | None = None) -> MachineActivities:
    """A machine of its own: its root, HOME and shared state apart from the other's."""
    home = tmp / f"home-{name}"
    home.mkdir(exist_ok=True)
    env = fleet_env(**trusting(tmp), HOME=str(home), GENESIS_SHARED_STATE_DIR=str(tmp / f"state-{name}"),
                    RUNS=str(tmp / "runs"),
                    MACHINE=name, HOLD=str(hold), HEARTBEAT_STALE="120s",
                    BUILDER_HOLD=str(builder_hold or tmp / "no-builder-hold"))
    return MachineActivities(client, root, name, env, stop_wait=5.0)


def wait_until(what: str, check, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def pushed_keys(remote: Path, key: str) -> list:
    return list(keys_on(remote, f"refs/heads/{BRANCH}", prefix=key))


def test_a_try_killed_after_its_first_push_is_retried_without_committing_it_twice(dev_server, world, tmp_path):
    """A's try dies once its Builder's keyed commit is pushed; Temporal's retry on B (a fresh
    clone) skips that phase and dies in the next; the retry after it, back on A (its own
    worktree, as the first try left it), skips it too and finishes the attempt."""
    project, remote, agent, (root_a, root_b) = world
    hold = tmp_path / "hold"
    hold.touch()
    key = commit_key("tfleet/task", 1)
    inp = attempt(project, remote, agent)

    def kill_in_criticizer(host: str, root: Path) -> str:
        """The machine dies, its loop with it (SIGKILL), once the Builder's keyed commit is
        pushed and the machine's Criticizer is at work: the branch as pushed then."""
        wait_until("the Builder's push", lambda: pushed_keys(remote, key))
        wait_until(f"the Criticizer's start on {host}", lambda: f"Criticizer {host}" in (tmp_path / "runs").read_text())
        for proc in procs_under(root):
            with contextlib.suppress(psutil.Error):
                proc.kill()
        return git(remote, "rev-parse", f"refs/heads/{BRANCH}").strip()

    async def lose(client, host: str, root: Path, attempt_no: int) -> str:
        env = ActivityEnvironment()   # Temporal's try of the same attempt
        env.info = dataclasses.replace(env.info, attempt=attempt_no)
        lost = asyncio.create_task(env.run(machine(client, root, tmp_path, host, hold).run_attempt, inp))
        pushed = await asyncio.to_thread(kill_in_criticizer, host, root)
        env.cancel()   # its worker went with the machine: no end, no final push from it
        with contextlib.suppress(BaseException):
            await lost
        return pushed

    async def run():
        client = await Client.connect(dev_server.address)
        pushed = await lose(client, "A", root_a, 1)
        assert await lose(client, "B", root_b, 2) == pushed   # B's Criticizer never pushed
        hold.unlink()
        third = ActivityEnvironment()
        third.info = dataclasses.replace(third.info, attempt=3)
        return pushed, await third.run(machine(client, root_a, tmp_path, "A", hold).run_attempt, inp)

    pushed, result = asyncio.run(run())
    assert result.outcome == "verified" and result.host == "A", result
    assert not result.fresh_clone and not result.adopted, result
    tip = git(remote, "rev-parse", f"refs/heads/{BRANCH}").strip()
    assert result.tip == tip
    # Nothing pushed is lost: A's pushed Builder commit is under the final branch ...
    git(remote, "merge-base", "--is-ancestor", pushed, tip)
    # ... and nothing is committed twice: both retries skipped the keyed Builder, every key appears once.
    keys = [(k.iteration, k.phase) for k in pushed_keys(remote, key)]
    assert len(keys) == len(set(keys)) and (1, "Builder") in keys, keys
    (builder,) = [k for k in pushed_keys(remote, key) if (k.iteration, k.phase) == (1, "Builder")]
    assert builder.sha == git(remote, "log", "-1", "--format=%H", "--grep=Builder, iteration 1", pushed).strip()
    runs = (tmp_path / "runs").read_text().splitlines()
    assert runs == ["Builder A", "Criticizer A", "Criticizer B", "Criticizer A"], runs
    assert git(remote, "show", f"{tip}:built.txt") == "built on A\n"


def test_a_refused_push_steps_aside_and_the_next_attempt_starts_from_the_pushed_branch(
        dev_server, world, tmp_path):
    project, remote, agent, (root_a, _) = world
    hold = tmp_path / "hold"
    hold.touch()

    def rival_pushes() -> str:
        """While A's Builder works, another machine's loop of the task pushes its branch."""
        wait_until("the Builder's start", lambda: (tmp_path / "runs").exists())
        other = tmp_path / "machine-c"
        git(tmp_path, "clone", "-q", str(remote), str(other))
        git(other, "checkout", "-q", "-b", BRANCH)
        (other / "theirs.txt").write_text("theirs\n")
        git(other, "add", "theirs.txt")
        git(other, "-c", "user.name=C", "-c", "user.email=c@example.invalid", "commit", "-qm", "theirs")
        git(other, "push", "-q", "origin", BRANCH)
        hold.unlink()
        return git(remote, "rev-parse", f"refs/heads/{BRANCH}").strip()

    async def run():
        client = await Client.connect(dev_server.address)
        acts = machine(client, root_a, tmp_path, "A", tmp_path / "no-hold", builder_hold=hold)
        rival = asyncio.create_task(asyncio.to_thread(rival_pushes))
        stepped = await ActivityEnvironment().run(acts.run_attempt, attempt(project, remote, agent))
        return await rival, stepped, acts.env

    theirs, stepped, env = asyncio.run(run())
    # The refused try is a "stopped" result with 34 (the workflow's free new attempt), not a failure.
    assert stepped.outcome == "stopped" and stepped.exit_code == exitcodes.STEPPED_ASIDE, stepped
    assert "was refused" in stepped.reason and "steps aside" in stepped.reason, stepped.reason
    # The next attempt on the same machine, as far as its loop's launch (which the account's
    # limit then refuses): its worktree starts from the pushed branch (theirs), the refused
    # commit kept under a ref of this clone, never pushed over theirs.
    gated = Gated(None, root_a, "A", env)
    with pytest.raises(ApplicationError) as held:
        asyncio.run(ActivityEnvironment().run(gated.run_attempt, attempt(project, remote, agent, number=2)))
    assert held.value.type == USAGE_LIMIT and gated.calls == ["prepared", "ask tacct"], gated.calls
    (wt,) = root_a.glob(f"tfleet/*/{TID}")
    assert git(wt, "rev-parse", "HEAD").strip() == theirs == git(remote, "rev-parse", f"refs/heads/{BRANCH}").strip()
    kept = git(wt, "rev-parse", f"{ASIDE_REFS}/{TID}").strip()
    assert git(wt, "log", "-1", "--format=%s", kept).startswith("genesis: Builder, iteration 1")
    assert subprocess.run(["git", "-C", str(wt), "merge-base", "--is-ancestor", kept, theirs]).returncode == 1

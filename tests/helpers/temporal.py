"""Machines for the Temporal engine's tests: a bare "origin" every machine clones and pushes to,
`genesis worker`s each with a root, HOME and shared-state folder of its own (nothing local is
shared between two "machines"), the home (`start-multi-agent-loop.sh --parallel N --engine
temporal`, which runs `genesis fleet run --engine temporal`), and the
guarantee that every process they started, child loops included, is gone at the end.

  Machines(tmp, address, prefix, env)   .worker(host), .home(project, parallel, *flags), .kill(host)
  origin_for(project, tmp)              a bare remote of the project, named origin there
  pushed_project(tmp, texts)            a project with these tasks and its origin, pushed
  printing_agent(lines)                 a hook-less agent that prints while $HOLD exists
  kill_under(root)                      every process of a machine's loops killed
  loops_under(root)                     the child loops running in a machine's worktrees (their pids)
  run_payloads(handle)                  what each run_attempt of a task's history handed back
  trusting(tmp)                         a machine's GENESIS_TEMPORAL_AGENT_COMMANDS: the tests' agents in tmp
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
from helpers.fleet import TASK_AGENT, fleet_project
from helpers.git import git
from helpers.paths import LOOP

__all__ = ["Machines", "trusting", "origin_for",
           "pushed_project", "printing_agent", "kill_under", "loops_under", "procs_under",
           "run_payloads", "GENESIS"]

GENESIS = [sys.executable, "-m", "genesis"]
STOP_WAIT = 60.0


def trusting(tmp: Path) -> dict[str, str]:
    """A machine trusts the agent command lines the tests give their fleets (`bash <tmp>/agent.sh`,
    a.sh, fallback.sh), as an operator lists a team's agents in each worker's configuration."""
    return {"GENESIS_TEMPORAL_AGENT_COMMANDS": "|".join(f"bash {tmp / name}"
                                                        for name in ("agent.sh", "a.sh", "fallback.sh"))}


def origin_for(project: Path, tmp: Path) -> Path:
    remote = tmp / "origin.git"
    git(tmp, "init", "-q", "--bare", str(remote))
    git(project, "remote", "add", "origin", str(remote))
    return remote


def pushed_project(tmp: Path, texts: list[str]) -> tuple[Path, Path]:
    """tmp/project with these tasks open, and its bare origin with the project branch pushed."""
    project = tmp / "project"
    project.mkdir()
    git(project, "init", "-q")
    fleet_project(project, texts)
    remote = origin_for(project, tmp)
    git(project, "push", "-q", "origin", "HEAD")
    return project, remote


def printing_agent(lines: int) -> str:
    """A hook-less agent: its pid in $AGENT_PIDS, a line every 0.2 s while $HOLD exists (at
    most `lines` of them), then its task done as TASK_AGENT does it."""
    return f"""#!/usr/bin/env bash
set -euo pipefail
echo "$$" >>"${{AGENT_PIDS}}"
for _ in $(seq {lines}); do
  [[ -e ${{HOLD}} ]] || break
  echo "still working"
  sleep 0.2
done
""" + TASK_AGENT[TASK_AGENT.index("printf '%s"):]


def kill_under(root: Path) -> None:
    """Every process of a machine's loops (procs_under) killed, and waited for."""
    doomed = procs_under(root)
    _kill_all(doomed)
    psutil.wait_procs(doomed, timeout=10)


def loops_under(root: Path) -> list[psutil.Process]:
    """Child loops (the loop script) whose worktree is under root: a machine's own, found by
    their command line, since each runs in a session of its own."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        argv = proc.info.get("cmdline") or []
        if any(a.endswith("start-multi-agent-loop.sh") for a in argv) and \
                any(a.startswith(str(root) + os.sep) for a in argv):
            found.append(proc)
    return found


def procs_under(root: Path) -> list[psutil.Process]:
    """Every process of a machine's loops: the loops, their steps, watchers and agents (some in
    groups of their own), and any whose working folder is under root."""
    found = {p.pid: p for p in loops_under(root)}
    for proc in list(found.values()):
        try:
            found.update({kid.pid: kid for kid in proc.children(recursive=True)})
        except psutil.Error:
            pass
    for proc in psutil.process_iter(["cwd"]):
        cwd = proc.info.get("cwd") or ""
        if cwd == str(root) or cwd.startswith(str(root) + os.sep):
            found[proc.pid] = proc
    found.pop(os.getpid(), None)
    return list(found.values())


async def run_payloads(handle) -> list[dict]:
    """Per `run_attempt` the workflow scheduled, in order (as reading.tries_of lists them): the
    AttemptResult it completed with, or the details its worker failed it with ({} for a try
    that timed out or was cancelled): where it ran, and whether on a fresh clone or adopted."""
    from temporalio.api.enums.v1 import EventType

    rows: dict[int, dict] = {}
    async for event in handle.fetch_history_events():
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            if event.activity_task_scheduled_event_attributes.activity_type.name == "run_attempt":
                rows[event.event_id] = {}
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            attrs = event.activity_task_completed_event_attributes
            if attrs.scheduled_event_id in rows and attrs.result.payloads:
                rows[attrs.scheduled_event_id] = json.loads(attrs.result.payloads[0].data)
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED:
            attrs = event.activity_task_failed_event_attributes
            details = attrs.failure.application_failure_info.details.payloads
            if attrs.scheduled_event_id in rows and details:
                rows[attrs.scheduled_event_id] = json.loads(details[0].data)
    return list(rows.values())


def _kill_all(procs: list[psutil.Process]) -> None:
    for proc in procs:
        try:
            proc.kill()
        except psutil.Error:
            pass


class Machines:
    def __init__(self, tmp: Path, address: str, prefix: str, env: dict[str, str]):
        self.tmp, self.address, self.prefix, self.env = tmp, address, prefix, {**trusting(tmp), **env}
        self.procs: dict[str, subprocess.Popen] = {}
        self.roots: dict[str, Path] = {}

    def flags(self) -> list[str]:
        return ["--temporal-address", self.address, "--temporal-task-queue", self.prefix]

    def machine_env(self, host: str) -> dict[str, str]:
        place = self.tmp / "machines" / host
        for sub in ("home", "state"):
            (place / sub).mkdir(parents=True, exist_ok=True)
        return {**self.env, "HOME": str(place / "home"), "GENESIS_SHARED_STATE_DIR": str(place / "state"),
                "AGENT_PIDS": str(place / "agents"), "MACHINE": host}

    def agents(self, host: str) -> list[str]:
        """The agents started on the machine, one line each: `pid task-id`."""
        path = self.tmp / "machines" / host / "agents"
        return path.read_text().splitlines() if path.exists() else []

    def worker(self, host: str, parallel: int = 2) -> subprocess.Popen:
        root = self.tmp / "machines" / host / "root"
        self.roots[host] = root
        log = open(self.tmp / f"worker-{host}.log", "ab")
        try:
            proc = subprocess.Popen([*GENESIS, "worker", "--root", str(root), "--host", host, "--parallel",
                                     str(parallel), *self.flags()], env=self.machine_env(host),
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        finally:
            log.close()
        self.procs[host] = proc
        return proc

    def home(self, project: Path, parallel: int, *sets: str) -> subprocess.Popen:
        log = open(self.tmp / "home.log", "ab")
        try:
            proc = subprocess.Popen(["bash", str(LOOP), "--project", str(project), *sets, "--parallel",
                                     str(parallel), "--engine", "temporal", "--trust", *self.flags()],
                                    env={**self.env, "GENESIS_SHARED_STATE_DIR": str(self.tmp / "home-state")},
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        finally:
            log.close()
        self.procs["home"] = proc
        return proc

    def kill(self, host: str) -> float:
        """A machine's power cut: its worker and every process of its loops, SIGKILLed at once."""
        proc = self.procs[host]
        doomed = procs_under(self.roots[host])
        try:
            doomed += psutil.Process(proc.pid).children(recursive=True)
        except psutil.Error:
            pass
        os.killpg(proc.pid, signal.SIGKILL)
        _kill_all(doomed)
        at = time.time()
        proc.wait()
        return at

    def log(self, name: str) -> str:
        path = self.tmp / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_WAIT
        for proc in self.procs.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        for root in self.roots.values():
            _kill_all(procs_under(root))

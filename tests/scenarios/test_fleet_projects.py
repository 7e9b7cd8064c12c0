"""Several projects in one fleet, as a user runs it: `start-multi-agent-loop.sh --fleet fleet.toml`
over two real projects, real child loops with the scripted task agent (helpers/fleet.py), real
git; `genesis fleet status --fleet`, `genesis report --fleet`, `genesis stop --fleet`.

What the projects share while their children fail or meet a limit (the cascade gate, the
account's usage limit) is judged by replay through their real monitors: tests/fleet/test_monitor_replay.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import psutil
import pytest
from helpers.fleet import TASK_AGENT, fleet_env, fleet_ledger, fleet_project, task_agent, tasks_on
from helpers.git import git, new_repo
from helpers.loop import GENESIS, LOOP
from helpers.procs import carries, lock_held
from helpers.waits import wait_for

from genesis import exitcodes
from genesis.config import default_layout, resolve
from genesis.fleet.ledger import FleetLedgerError
from genesis.fleet.taskref import task_id
from genesis.repo.tasks import DONE, parse
from genesis.store.layout import state_dir_of
from genesis.store.looplock import current_holder

# The task agent, held while GATES/<task id> exists (its pid and task recorded first).
GATED = TASK_AGENT.replace('if [[ -n ${HANG:-} ]]; then sleep 300; fi\n',
                           'while [[ -e ${GATES}/${GENESIS_TASK_ID} ]]; do sleep 0.1; done\n')


def two_projects(tmp_path: Path, app_tasks: list[str], api_tasks: list[str], extra: str = "") -> Path:
    """app and api, each with its open tasks, and fleet.toml (next to them) listing both."""
    for name, texts in (("app", app_tasks), ("api", api_tasks)):
        fleet_project(new_repo(tmp_path / name), texts)
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(f'{extra}\n[[project]]\npath = "app"\nparallel = 2\n\n'
                     f'[[project]]\npath = "api"\nparallel = 2\n[project.settings]\nGENESIS_MAX_ITERATIONS = "5"\n')
    return fleet


def start(fleet: Path, agent: Path, env: dict, log: Path, *args: str) -> subprocess.Popen:
    out = open(log, "ab")
    try:
        return subprocess.Popen(["bash", str(LOOP), "--fleet", str(fleet.name), "--agent-cmd", f"bash {agent}",
                                 "--set", "GENESIS_PHASES=Builder", *args], cwd=fleet.parent, env=env,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True)
    finally:
        out.close()


def genesis(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*GENESIS, *args], env=env, capture_output=True, text=True, timeout=120)


def gated(tmp_path: Path, texts: list[str]) -> Path:
    gates = tmp_path / "gates"
    gates.mkdir(exist_ok=True)
    for text in texts:
        (gates / task_id(text)).touch()
    return gates


def marked(tmp_path: Path) -> dict[str, str]:
    """A mark in the environment of the monitor and of everything it starts: end_all proves its processes by it."""
    return {"FLEET_TEST_MARK": str(tmp_path)}


def end_all(proc: subprocess.Popen, mark: dict[str, str]) -> None:
    """After a failure: the monitor and every process it started that still runs (its children live in
    sessions of their own), each proven this test's by the mark in its environment, killed."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    for one in psutil.process_iter():
        if one.pid != os.getpid() and carries(one.pid, mark):
            try:
                one.kill()
            except psutil.Error:
                pass
    proc.wait(timeout=30)


def agents(path: Path) -> list[str]:
    """The task ids of the agents started so far."""
    return [line.split()[1] for line in path.read_text().splitlines() if line] if path.exists() else []


def test_two_projects_under_one_monitor_all_come_home_and_status_and_report_show_both(tmp_path):
    fleet = two_projects(tmp_path, ["add the parser", "add the printer"], ["add the endpoint"],
                         extra="max_parallel = 2")
    app, api = tmp_path / "app", tmp_path / "api"
    gates = gated(tmp_path, ["add the endpoint"])  # api's agent held until app's fleet is over
    env = fleet_env(GATES=str(gates), HEARTBEAT_STALE="600s", **marked(tmp_path))
    proc = start(fleet, task_agent(tmp_path / "agent.sh", GATED), env, tmp_path / "fleet.log")
    try:
        wait_for(lambda: fleet_events(app, "fleet_end"), 120, "app's fleet over")
        live = json.loads(genesis(env, "fleet", "status", "--fleet", str(fleet), "--json").stdout)
        layout = default_layout(app)
        holder = current_holder(layout.loop_lock, layout.loop_record)
        working = proc.poll() is None
    finally:
        for gate in gates.iterdir():
            gate.unlink()
        try:
            code = proc.wait(timeout=240)
        finally:
            end_all(proc, marked(tmp_path))
    assert code == exitcodes.OK, (tmp_path / "fleet.log").read_text()[-3000:]
    # A project whose fleet ended is free while another still works: a loop or a fleet may start there.
    assert working and holder is None and [p["state"] for p in live["projects"]] == ["ended", "running"]

    for project, texts in ((app, {"add the parser", "add the printer"}), (api, {"add the endpoint"})):
        # Each project's tasks came home on its own branch, ticked, its work there.
        assert {t.text for t in parse(tasks_on(project)).items if t.state == DONE} == texts
        for text in texts:
            assert git(project, "show", f"HEAD:work-{task_id(text)}.txt").strip() == text
        with fleet_ledger(project) as led:
            assert {r.state for r in led.tasks()} == {"merged"}
            (start_event,) = led.events("fleet_start")
            assert [e.detail["exit_code"] for e in led.events("fleet_end")] == [exitcodes.OK]
    with fleet_ledger(app) as a, fleet_ledger(api) as b:
        # One monitor (one process, one run) for both; max_parallel held across the projects.
        assert a.events("fleet_start")[0].detail["pid"] == b.events("fleet_start")[0].detail["pid"]
        assert a.events("fleet_start")[0].detail["run_id"] == b.events("fleet_start")[0].detail["run_id"]
        spans = sorted([(x.started, 1) for x in a.attempts() + b.attempts()] +
                       [(x.ended, -1) for x in a.attempts() + b.attempts()])
        ports = [(x.started, x.ended, launch.detail["port_base"]) for led in (a, b) for x in led.attempts()
                 for launch in led.events("launch") if launch.task_id == x.task_id and
                 launch.detail["attempt"] == x.attempt]
    running = most = 0
    for _at, step in spans:
        running += step
        most = max(most, running)
    assert most <= 2
    assert len(ports) == 3
    for one in ports:  # children of the two projects running at once never share a port range
        assert not [two for two in ports if two is not one and one[0] < two[1] and two[0] < one[1] and
                    two[2] == one[2]]

    done = genesis(env, "fleet", "status", "--fleet", str(fleet), "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["schema"] == 1 and doc["fleet_file"] == str(fleet)
    assert [p["project"] for p in doc["projects"]] == [str(app), str(api)]
    assert [p["counts"]["merged"] for p in doc["projects"]] == [2, 1]
    assert {p["state"] for p in doc["projects"]} == {"ended"}
    text = genesis(env, "fleet", "status", "--fleet", str(fleet))
    assert text.returncode == 0 and str(app) in text.stdout and str(api) in text.stdout

    page = tmp_path / "report.html"
    said = genesis(env, "report", "--fleet", str(fleet), "--html", str(page))
    assert said.returncode == 0, said.stderr
    summary = said.stdout.split("====", 1)[0]
    rows = {line.split()[0]: line.split()[1:5] for line in summary.splitlines() if line.startswith(("a", "all"))}
    assert rows["app"] == ["2", "2", "0", "0"] and rows["api"] == ["1", "1", "0", "0"]
    assert rows["all"] == ["projects", "3", "3", "0"]
    assert f"Genesis fleet report: {app}" in said.stdout and f"Genesis fleet report: {api}" in said.stdout
    html = page.read_text()
    assert str(app) in html and str(api) in html and html.count('id="p1-tasks"') == 1 and 'id="p2-kpis"' in html
    as_json = json.loads(genesis(env, "report", "--fleet", str(fleet), "--json").stdout)
    assert [p["fleet"]["project"] for p in as_json["projects"]] == [str(app), str(api)]


def test_genesis_stop_with_the_fleet_file_stops_every_projects_fleet(tmp_path):
    texts_app, texts_api = ["app one", "app two"], ["api one", "api two"]
    fleet = two_projects(tmp_path, texts_app, texts_api)
    fleet.write_text(fleet.read_text().replace("parallel = 2", "parallel = 1"))
    gates, pids = gated(tmp_path, texts_app + texts_api), tmp_path / "pids"
    env = fleet_env(GATES=str(gates), AGENT_PIDS=str(pids), HEARTBEAT_STALE="600s", **marked(tmp_path))
    proc = start(fleet, task_agent(tmp_path / "agent.sh", GATED), env, tmp_path / "fleet.log")
    try:
        wait_for(lambda: len(agents(pids)) == 2, 120, "one agent at work in each project")
        live = json.loads(genesis(env, "fleet", "status", "--fleet", str(fleet), "--json").stdout)
        assert [p["state"] for p in live["projects"]] == ["running", "running"]
        assert live["projects"][0]["monitor"]["pid"] == live["projects"][1]["monitor"]["pid"] == proc.pid
        stop = genesis(env, "stop", "--fleet", str(fleet))
        assert stop.returncode == 0, stop.stderr
        assert stop.stdout.count("starts nothing more") == 2
    finally:
        for gate in gates.iterdir():  # the phases under way finish
            gate.unlink()
        try:
            code = proc.wait(timeout=120)
        finally:
            end_all(proc, marked(tmp_path))
    assert code == exitcodes.OK, (tmp_path / "fleet.log").read_text()[-3000:]
    for project in (tmp_path / "app", tmp_path / "api"):
        with fleet_ledger(project) as led:
            assert sorted(r.state for r in led.tasks()) == ["merged", "queued"]
            assert led.events("fleet_end")[-1].detail["reason"] == "stopped by the stop flag"
    # Stopped again with nothing running: said, exit 5.
    again = genesis(env, "stop", "--fleet", str(fleet))
    assert again.returncode == exitcodes.NOT_RUNNING and "nothing runs on" in again.stdout


@pytest.mark.fault(103)
def test_fault_103_a_fleet_file_with_a_mistake_is_refused_before_anything_starts(tmp_path):
    """One mistake through the whole start; every mistake's words: tests/fleet/test_fleetfile.py."""
    fleet_project(new_repo(tmp_path / "app"), ["add the parser"])
    (tmp_path / "fleet.toml").write_text('[[project]]\npath = "app"\nparalel = 2\n')
    calls = tmp_path / "agent-calls"
    agent = task_agent(tmp_path / "agent.sh", f"#!/usr/bin/env bash\necho ran >>{calls}\n")
    proc = start(tmp_path / "fleet.toml", agent, fleet_env(), tmp_path / "fleet.log")
    assert proc.wait(timeout=60) == exitcodes.USAGE
    log = (tmp_path / "fleet.log").read_text()
    assert "unknown key 'paralel' in [[project]]; did you mean 'parallel'?" in log
    assert str(tmp_path / "fleet.toml") in log
    state = state_dir_of(tmp_path / "app")
    assert not (state / "fleet").exists() and not (state / "loop.json").exists()  # no lock taken, nothing started
    assert not calls.exists()


@pytest.mark.fault(103)
def test_a_project_that_cannot_start_stops_the_whole_start_saying_which(tmp_path):
    fleet = two_projects(tmp_path, ["add the parser"], ["add the endpoint"])
    calls = tmp_path / "agent-calls"
    agent = task_agent(tmp_path / "agent.sh", f"#!/usr/bin/env bash\necho ran >>{calls}\n")
    with lock_held(default_layout(tmp_path / "api"), "single-run"):  # a single loop works on api
        proc = start(fleet, agent, fleet_env(), tmp_path / "fleet.log")
        assert proc.wait(timeout=60) == exitcodes.LOCKED
    log = (tmp_path / "fleet.log").read_text()
    assert f"a single Genesis loop runs on {tmp_path / 'api'}" in log
    assert f"the fleet does not start: {tmp_path / 'api'} cannot" in log
    assert not (state_dir_of(tmp_path / "app") / "fleet" / "ledger.sqlite3").exists()  # app never started
    assert not (state_dir_of(tmp_path / "app") / "loop.json").exists()  # its lock let go
    assert not calls.exists()


def fleet_events(project: Path, kind: str) -> list:
    try:
        with fleet_ledger(project) as led:
            return led.events(kind)
    except FleetLedgerError:  # not made yet
        return []


@pytest.mark.parametrize("args", [["--fleet", "fleet.toml", "--parallel", "2"],
                                  ["--project", ".", "--fleet", "fleet.toml"], ["--fleet=fleet.toml", "--demo"]])
def test_fleet_is_given_alone_not_with_project_parallel_or_demo(tmp_path, args):
    done = subprocess.run(["bash", str(LOOP), *args], cwd=tmp_path, env=fleet_env(), capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == exitcodes.USAGE
    assert "--fleet runs the projects its file lists, each with its own parallel: not with --project, --parallel or " \
           "--demo" in done.stderr


@pytest.mark.fault(103)
def test_a_bad_setting_of_the_second_project_is_refused_before_any_lock_is_taken(tmp_path):
    fleet = two_projects(tmp_path, ["add the parser"], ["add the endpoint"])
    fleet.write_text(fleet.read_text().replace('GENESIS_MAX_ITERATIONS = "5"', 'GENESIS_MAX_ITERATIONS = "many"'))
    done = genesis(fleet_env(), "fleet", "run", "--fleet", str(fleet))
    assert done.returncode == exitcodes.USAGE
    assert f"{tmp_path / 'api'}: " in done.stderr and "GENESIS_MAX_ITERATIONS" in done.stderr
    assert not (state_dir_of(tmp_path / "app") / "fleet").exists()  # app, listed first, was not even locked
    neither = genesis(fleet_env(), "--project", str(tmp_path / "app"), "fleet", "run")
    assert neither.returncode == exitcodes.USAGE and "give --parallel N|auto (one project) or --fleet FILE" in \
        neither.stderr


def test_genesis_stop_with_the_fleet_file_stops_the_projects_after_one_it_cannot(tmp_path):
    fleet = two_projects(tmp_path, ["add the parser"], ["add the endpoint"])
    fleet.write_text(fleet.read_text().replace('path = "app"\nparallel = 2\n', 'path = "app"\nparallel = 2\n'
                                               '[project.settings]\nGENESIS_MAX_ITERATIONS = "many"\n'))
    api = tmp_path / "api"
    with lock_held(default_layout(api), "single-run"):  # a loop runs on api, listed after app's mistake
        done = genesis(fleet_env(), "stop", "--fleet", str(fleet))
    assert resolve(api).stop_flag.read_text() == "false\n"  # api stopped after all
    assert "stops before its next phase" in done.stdout
    assert done.returncode == exitcodes.USAGE and "GENESIS_MAX_ITERATIONS" in done.stderr
    assert f"{tmp_path / 'app'}: " in done.stderr and "1 project of" in done.stderr

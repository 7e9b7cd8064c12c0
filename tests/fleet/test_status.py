"""`genesis fleet status [--json]`: every task of a fleet with its state, attempts, agent, branch,
worktree and its running child's own phase and health; the monitor, the fleet's pauses; the
JSON document key by key against docs/reference/fleet-status-json.md; bounded for large fleets."""

from __future__ import annotations

import calendar
import fcntl
import io
import json
import os
import re
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console
from helpers.docs import linked_from
from helpers.git import git
from helpers.nights import first_hour

from genesis import exitcodes
from genesis.cli import cli
from genesis.config import default_layout
from genesis.fleet.ledger import FleetLedger, TaskRow
from genesis.fleet.status import SHOWN, document, fleet_dir_of, read, render, run_fleet_status
from genesis.ledger.store import Ledger, iso
from genesis.store.atomicio import write_json
from genesis.store.looplock import hold

DOC = Path(__file__).resolve().parents[2] / "docs" / "reference" / "fleet-status-json.md"
T0 = float(calendar.timegm((2025, 11, 21, 1, 30, 0)))
CHILD_RUN = "20251121T003000Z-777"
ROW = re.compile(r"^\| `([a-z_.\[\]]+)` \| ([a-z ]+) \| (.*) \|$")
TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool, "object": dict, "array": list}


@pytest.fixture(autouse=True)
def utc(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def documented() -> dict[str, tuple[str, bool]]:
    keys = {}
    for line in DOC.read_text().splitlines():
        found = ROW.match(line)
        if found:
            kind, nullable = found.group(2).removesuffix(" or null"), found.group(2).endswith(" or null")
            assert kind in TYPES, line
            assert nullable != found.group(3).startswith("never"), f"says both null and never: {line}"
            keys[found.group(1)] = (kind, nullable)
    return keys


def check(doc: dict) -> set[str]:
    """Every documented key is present with its type where its parent is; none is undocumented.
    Returns the keys that had a value."""
    keys, seen = documented(), set()

    def children(path: str) -> set[str]:
        prefix = f"{path}." if path else ""
        return {k[len(prefix):] for k in keys if k.startswith(prefix) and "." not in k[len(prefix):]}

    def walk(value, path: str) -> None:
        if path:
            kind, nullable = keys[path]
            if value is None:
                assert nullable, f"{path} is null"
                return
            seen.add(path)
            assert isinstance(value, TYPES[kind]) and not (kind != "boolean" and isinstance(value, bool)), \
                (path, value)
        if isinstance(value, dict):
            assert set(value) == children(path), (path, set(value) ^ children(path))
            for key, item in value.items():
                walk(item, f"{path}.{key}" if path else key)
        elif isinstance(value, list):
            shape = children(f"{path}[]")
            for item in value:
                if not shape:  # a list of plain values: lines of text
                    assert isinstance(item, str), (path, item)
                    continue
                assert isinstance(item, dict) and set(item) == shape, (path, item)
                for key, one in item.items():
                    walk(one, f"{path}[].{key}")

    walk(doc, "")
    assert doc["schema"] == 1
    for path in keys:
        if path.endswith("_epoch"):
            assert keys[path.removesuffix("_epoch")][0] == "string", path
    return seen


def ledger(project: Path) -> FleetLedger:
    return FleetLedger.open(fleet_dir_of(project) / "ledger.sqlite3")


def task(tid: str, state: str, minutes: float, **kw) -> TaskRow:
    return TaskRow(id=tid, text=f"Do {tid}", state=state, branch=f"genesis/task/{tid}",
                   created=T0 - 3600 + minutes, updated=T0 - 60, **kw)


def child_worktree(project: Path, tid: str) -> tuple[Path, int]:
    """A real worktree of the task's branch, outside the work tree, with a child loop mid-phase
    in it: its lock held, its ledger, a heartbeat and a health check. The lock's descriptor."""
    where = project.parent / "worktrees" / tid
    git(project, "worktree", "add", "-q", "-b", f"genesis/task/{tid}", str(where))
    lay = default_layout(where)
    lay.state_dir.mkdir(parents=True, exist_ok=True)
    fd = hold(lay.loop_lock, lay.loop_record, CHILD_RUN)
    with Ledger.open(lay.ledger_file) as led:
        first_hour(led, CHILD_RUN, T0)
    lay.heartbeat_dir.mkdir(parents=True, exist_ok=True)
    write_json(lay.heartbeat_file("Criticizer"), {"epoch": T0 - 5, "tool": "Bash", "event": "PreToolUse",
                                                  "run_id": CHILD_RUN})
    write_json(lay.health_file("Criticizer"), {"run_id": CHILD_RUN, "phase": "Criticizer", "iteration": 1,
                                               "at": iso(T0 - 3), "classification": "healthy", "stall_score": 0.1,
                                               "reason": "", "turns": 4})
    return where, fd


def monitor_alive(project: Path) -> int:
    """The monitor as the fleet's lock and heartbeat say: the lock held here. Its descriptor."""
    fleet = fleet_dir_of(project)
    fleet.mkdir(parents=True, exist_ok=True)
    write_json(fleet / "monitor.json", {"pid": os.getpid(), "run_id": "fleet-1", "started": T0 - 3600,
                                        "at": T0 - 2})
    fd = os.open(fleet / "lock", os.O_WRONLY | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


def night(project: Path, worktree: Path) -> None:
    """A fleet at parallel 3 an hour in: every state, a retry history, a limit and a cascade pause."""
    with ledger(project) as led:
        led.record("fleet_start", now=T0 - 3600, run_id="fleet-1", parallel=3, pid=os.getpid())
        led.upsert_task(task("build-api-aaaaaa", "running", 1, worktree=str(worktree), pid=os.getpid()))
        led.begin_attempt("build-api-aaaaaa", "start", "queued", "claude", "r-0", T0 - 3500)
        led.end_attempt("build-api-aaaaaa", 1, 1, "failed", T0 - 3000)
        led.begin_attempt("build-api-aaaaaa", "restart", "exit 1 (crashed)", "claude", CHILD_RUN, T0 - 2900)
        led.set_state("build-api-aaaaaa", "running", restarts=1)
        led.upsert_task(task("add-docs-bbbbbb", "merged", 2, merged_sha="0123456789abcdef0123"))
        led.upsert_task(task("fix-login-cccccc", "failed", 3, attempts=7, escalations=3,
                             reason="3 escalations spent: exit 3 (breaker OPEN)"))
        led.upsert_task(task("refactor-dddddd", "needs-review", 4, reason="merge conflict in app.py"))
        led.upsert_task(task("add-tests-eeeeee", "restarting", 5, not_before=T0 + 40, restarts=2))
        led.upsert_task(task("cache-ffffff", "queued", 6))
        led.upsert_task(task("metrics-gggggg", "waiting", 7, reason="free memory below the floor"))
        led.record("limit_hold", "build-api-aaaaaa", now=T0 - 600, until=T0 + 1800,
                   reason="claude: 5-hour limit")
        led.record("cascade_pause", now=T0 - 300, reason="2 of 3 children failed in 300 s")


def test_no_fleet_ever_ran_exit_5_and_a_document_of_nulls(project):
    out = io.StringIO()
    code = run_fleet_status(project, as_json=True, out=out, clock=lambda: T0)
    doc = json.loads(out.getvalue())
    check(doc)
    assert code == exitcodes.NOT_RUNNING == doc["exit_code"] and doc["state"] == "not_running"
    assert (doc["fleet"], doc["limit"], doc["cascade"], doc["tasks"]) == (None, None, None, [])
    assert doc["monitor"]["alive"] is False and set(doc["counts"].values()) == {0}
    screen = io.StringIO()
    assert run_fleet_status(project, out=screen, clock=lambda: T0) == exitcodes.NOT_RUNNING
    assert "No fleet has run on" in screen.getvalue()
    result = CliRunner().invoke(cli, ["--project", str(project), "fleet", "status"], catch_exceptions=False)
    assert result.exit_code == exitcodes.NOT_RUNNING


def test_a_running_fleet_every_task_its_childs_phase_and_health_and_the_pauses(project):
    worktree, child = child_worktree(project, "build-api-aaaaaa")
    mon = monitor_alive(project)
    try:
        night(project, worktree)
        fs = read(project, now=T0)
        doc = document(fs)
        screen = io.StringIO()
        Console(file=screen, width=200, highlight=False).print(render(fs))
    finally:
        os.close(child)
        os.close(mon)
    seen = check(doc)
    assert {"tasks[].child.health_class", "tasks[].child.heartbeat_at", "limit.until", "cascade.reason",
            "fleet.parallel", "monitor.pid", "tasks[].merged_sha", "tasks[].not_before"} <= seen
    assert (doc["state"], doc["exit_code"], doc["fleet"]["parallel"], doc["fleet"]["run_id"]) == \
        ("running", 0, 3, "fleet-1")
    assert doc["monitor"]["alive"] is True and doc["monitor"]["heartbeat_age_seconds"] == 2.0
    assert doc["counts"] == {"running": 1, "merging": 0, "restarting": 1, "escalated": 0, "waiting": 1, "queued": 1,
                             "needs_review": 1, "failed": 1, "ready": 0, "merged": 1}
    # The live ones first.
    assert [t["state"] for t in doc["tasks"]] == ["running", "restarting", "waiting", "queued", "needs-review",
                                                  "failed", "merged"]
    run = doc["tasks"][0]
    assert (run["id"], run["attempts"], run["restarts"], run["agent"], run["branch"], run["worktree"]) == \
        ("build-api-aaaaaa", 2, 1, "claude", "genesis/task/build-api-aaaaaa", str(worktree))
    assert run["started_epoch"] == T0 - 3500 and run["run_id"] == CHILD_RUN
    c = run["child"]
    assert (c["read"], c["state"], c["run_id"], c["phase"], c["iteration"], c["health_class"]) == \
        (True, "running", CHILD_RUN, "Criticizer", 1, "healthy")
    assert c["heartbeat_age_seconds"] == 5.0 and c["error"] is None
    # A task with no child has none read; a scheduled relaunch says when.
    assert all(t["child"] is None for t in doc["tasks"][1:])
    assert doc["tasks"][1]["not_before_epoch"] == T0 + 40
    assert doc["limit"] == {"kind": "limit", "state": "held", "since": iso(T0 - 600), "since_epoch": T0 - 600,
                            "until": iso(T0 + 1800), "until_epoch": T0 + 1800, "seconds_left": 1800.0,
                            "reason": "claude: 5-hour limit", "task_id": "build-api-aaaaaa"}
    assert (doc["cascade"]["state"], doc["cascade"]["reason"]) == ("paused", "2 of 3 children failed in 300 s")
    text = screen.getvalue()
    assert "fleet RUNNING" in text and "parallel 3" in text and f"monitor: pid {os.getpid()}, alive" in text
    assert "USAGE LIMIT: no child starts a phase until 02:00 UTC" in text
    assert "CASCADE PAUSE: restarts stopped since 01:25 UTC" in text
    assert "tasks: 1 running, 1 restarting, 1 waiting, 1 queued, 1 needs-review, 1 failed, 1 merged" in text
    line = next(ln for ln in text.splitlines() if ln.startswith("build-api-aaaaaa"))
    assert "running" in line and "2 (1r 0e)" in line and "Criticizer (it 1)" in line and "healthy" in line
    assert "next try 01:30:40 UTC" in text and "0123456789ab" in text
    assert "3 escalations spent: exit 3 (breaker OPEN)" in text and "free memory below the floor" in text


def test_a_child_before_its_first_iteration_is_starting_and_one_whose_loop_is_gone_not_running(project, procs):
    """Just launched: its loop has not taken its lock yet (its process lives), or holds it and
    has begun no iteration. Its phase reads "starting", not "not running"."""
    spare = [project.parent / "worktrees" / tid for tid in ("early-aaaaaa", "locked-bbbbbb", "gone-cccccc")]
    for where in spare:
        git(project, "worktree", "add", "-q", "-b", f"genesis/task/{where.name}", str(where))
    loop = procs(["sleep", "60"])  # the child loop the monitor started, before its lock
    gone = procs(["true"])
    gone.wait()
    lay = default_layout(spare[1])
    lay.state_dir.mkdir(parents=True, exist_ok=True)
    fd = hold(lay.loop_lock, lay.loop_record, CHILD_RUN)
    mon = monitor_alive(project)
    try:
        with ledger(project) as led:
            led.record("fleet_start", now=T0 - 60, run_id="fleet-1", parallel=3, pid=os.getpid())
            for n, (where, pid) in enumerate(zip(spare, (loop.pid, os.getpid(), gone.pid))):
                led.upsert_task(task(where.name, "running", n, worktree=str(where), pid=pid))
        screen = io.StringIO()
        Console(file=screen, width=200, highlight=False).print(render(read(project, now=T0)))
    finally:
        os.close(fd)
        os.close(mon)
    lines = {ln.split()[0]: ln + " " for ln in screen.getvalue().splitlines() if ln.split()[:1] and "-" in ln.split()[0]}
    assert " starting " in lines["early-aaaaaa"] and " starting " in lines["locked-bbbbbb"], screen.getvalue()
    assert " not running " in lines["gone-cccccc"], screen.getvalue()


def test_a_killed_monitor_is_stopped_an_ended_fleet_ended_and_no_pause_outlives_it(project):
    with ledger(project) as led:
        led.record("fleet_start", now=T0 - 3600, run_id="fleet-1", parallel=2, pid=1)
        led.upsert_task(task("a-aaaaaa", "merged", 1, merged_sha="abc"))
        led.record("limit_hold", now=T0 - 600, until=T0 + 1800, reason="limit")
        led.record("cascade_probe", "a-aaaaaa", now=T0 - 500)
    fleet_dir_of(project).joinpath("lock").touch()  # the monitor is gone: its lock free
    doc = document(read(project, now=T0))
    check(doc)
    assert (doc["state"], doc["exit_code"], doc["monitor"]["alive"], doc["fleet"]["ended"]) == \
        ("stopped", 0, False, None)
    assert doc["cascade"]["state"] == "probing" and doc["cascade"]["task_id"] == "a-aaaaaa"
    assert doc["limit"] is not None and document(read(project, now=T0 + 1801))["limit"] is None  # its reset passed
    with ledger(project) as led:
        led.record("fleet_end", now=T0 - 100, exit_code=0, reason="every task merged")
    doc = document(read(project, now=T0))
    assert (doc["state"], doc["fleet"]["exit_code"], doc["fleet"]["reason"]) == ("ended", 0, "every task merged")
    assert (doc["limit"], doc["cascade"]) == (None, None)


def test_thousands_of_tasks_are_listed_whole_in_json_cut_on_the_screen_and_children_read_within_a_bound(project):
    with ledger(project) as led:
        led.record("fleet_start", now=T0 - 3600, run_id="fleet-1", parallel=50, pid=1)
        for i in range(3000):
            led.upsert_task(task(f"t{i:04d}-aaaaaa", "running" if i < 50 else "queued", i,
                                 worktree=str(project.parent / "gone" / str(i))))
    fs = read(project, now=T0, bound=0.0)  # no time left to read any child
    doc = document(fs)
    assert len(doc["tasks"]) == 3000 and doc["tasks_unread"] == 50
    assert all(t["child"]["read"] is False and "time bound" in t["child"]["error"] for t in doc["tasks"][:50])
    out = io.StringIO()
    Console(file=out, width=200, highlight=False).print(render(fs))
    text = out.getvalue()
    assert f"... and {3000 - SHOWN} more task(s): `--json` lists every one" in text
    assert "50 running child(ren) not read: the time bound was spent" in text
    assert "t2999-aaaaaa" not in text and "t0199-aaaaaa" in text
    fs = read(project, now=T0)  # with time: a worktree that is gone is said, not an error of the command
    assert fs.tasks[0].child.read is False and fs.tasks[0].child.error == "its worktree is gone"


def test_a_damaged_fleet_ledger_is_a_document_with_an_error_never_a_traceback(project):
    fleet_dir_of(project).mkdir(parents=True)
    (fleet_dir_of(project) / "ledger.sqlite3").write_bytes(b"not a database" * 100)
    out = io.StringIO()
    code = run_fleet_status(project, as_json=True, out=out, clock=lambda: T0)
    doc = json.loads(out.getvalue())
    check(doc)
    assert code == exitcodes.OK and doc["state"] == "stopped"
    assert doc["error"].startswith("the fleet ledger cannot be read")


def test_not_a_git_work_tree_is_a_usage_document_and_the_cli_agrees(tmp_path, project):
    bare = tmp_path / "plain"
    bare.mkdir()
    out = io.StringIO()
    code = run_fleet_status(bare, as_json=True, out=out, clock=lambda: T0)
    doc = json.loads(out.getvalue())
    check(doc)
    assert code == exitcodes.USAGE == doc["exit_code"] and doc["project"] is None and "not" in doc["error"]
    result = CliRunner().invoke(cli, ["--project", str(bare), "fleet", "status"])
    assert result.exit_code == exitcodes.USAGE
    with ledger(project) as led:
        led.record("fleet_start", now=T0, run_id="fleet-1", parallel=1, pid=1)
    result = CliRunner().invoke(cli, ["--project", str(project), "fleet", "status", "--json"],
                                catch_exceptions=False)
    assert result.exit_code == exitcodes.OK and json.loads(result.output)["fleet"]["parallel"] == 1


def test_the_schema_is_written_down():
    keys = documented()
    assert {"tasks[].child.health_class", "counts.needs_review", "monitor.alive", "limit.until"} <= set(keys)
    assert linked_from(DOC), f"no page of the manual links {DOC.name}"


def test_fleet_status_fits_80_columns_one_line_a_task_and_shows_one_task_whole_on_demand(project):
    """Through the command, as a terminal of 80 columns renders it: no line longer than 80, one
    line per task (the id first); `--task ID` and `-v` show the whole record, wrapped, never cut."""
    import subprocess

    from helpers.loop import GENESIS, loop_env

    worktree, child = child_worktree(project, "build-api-aaaaaa")
    try:
        night(project, worktree)
        with ledger(project) as led:  # a long task, a long reason: what used to wrap a table at 200 columns
            led.upsert_task(task("a-very-long-task-name-that-goes-on-and-on-hhhhhh", "failed", 8, attempts=4,
                                 restarts=3, reason="exit 1 (the agent ended with an error) after 3 restarts; "
                                 "the ladder is spent: " + "a long explanation " * 8))
            led.record("fleet_end", now=T0 - 10, exit_code=31, reason="every task is finished")

        def status(*args: str) -> list[str]:
            done = subprocess.run([*GENESIS, "--project", str(project), "fleet", "status", *args],
                                  capture_output=True, text=True, timeout=60,
                                  env=loop_env(COLUMNS="80", LINES="50", TZ="UTC"))
            assert done.returncode == 0, done.stderr
            return done.stdout.splitlines()

        lines = status()
        verbose = status("-v")
        one = status("--task", "a-very-long")
    finally:
        os.close(child)
    for shown in (lines, verbose, one):
        assert shown and max(len(line) for line in shown) <= 80, max(shown, key=len)
    ids = ["build-api-aaaaaa", "add-tests-eeeeee", "metrics-gggggg", "cache-ffffff", "refactor-dddddd",
           "fix-login-cccccc", "a-very-long", "add-docs-bbbbbb"]
    for ident in ids:  # each task on exactly one line
        assert sum(1 for line in lines if line.startswith(ident[:10])) == 1, (ident, lines)
    assert len(lines) <= 8 + len(ids) + 2, lines  # the head, then one line a task
    # The whole record: its text, every attempt, its reason in full (wrapped, not cut).
    text = " ".join(" ".join(one).split())
    assert "task: Do a-very-long-task-name-that-goes-on-and-on-hhhhhh" in text
    assert "tries: 4 (3 restart(s), 0 escalation(s))" in text and "a long explanation " * 8 in text + " "
    assert sum(1 for line in one if line.startswith("a-very-long")) == 1 and "build-api" not in text
    assert "attempt 2: restart, claude" in " ".join(" ".join(verbose).split())


def test_each_merge_is_shown_with_its_evidence_green_red_and_dropped(project):
    """The merged tree's checks as the merge ran them (green, or red with the output's tail and
    where the task went) and a dropping merge's lost hunks: in --task, -v and the JSON."""
    red = {"kind": "project", "command": "make test", "exit_code": 2, "seconds": 3.0, "timed_out": False, "error": ""}
    with ledger(project) as led:
        led.record("fleet_start", now=T0 - 3600, run_id="fleet-1", parallel=2, pid=4242)
        led.upsert_task(task("add-health-aaaaaa", "merged", 50, attempts=2))
        led.record("merge_red", "add-health-aaaaaa", now=T0 - 1800, attempt=1, to="task",
                   reason="the project's check `make test` exited 2 (after 3s)", checks=[red],
                   tail=["FAILED tests/test_health.py::test_ok"])
        led.record("merged", "add-health-aaaaaa", now=T0 - 600, sha="1" * 40, commits=["a" * 40],
                   checks=[{**red, "exit_code": 0, "seconds": 4.0}])
        led.upsert_task(task("add-ready-bbbbbb", "needs-review", 40, attempts=1))
        led.record("needs_review", "add-ready-bbbbbb", now=T0 - 300, outcome="dropped", reason="lost",
                   lost=["app.py line 3 (added by the task 'Add /health': 'ok')"])
    doc = document(read(project, now=T0))
    check(doc)
    health, ready = sorted(doc["tasks"], key=lambda t: t["id"])
    assert [(m["result"], m["to"], m["tail"]) for m in health["merges"]] == [
        ("red", "task", ["FAILED tests/test_health.py::test_ok"]), ("green", None, [])]
    assert health["merges"][1]["checks"] == ["the project's check `make test` exited 0 (after 4s)"]
    assert [(m["result"], m["lost"]) for m in ready["merges"]] == [
        ("dropped", ["app.py line 3 (added by the task 'Add /health': 'ok')"])]
    out = io.StringIO()
    assert run_fleet_status(project, out=out, clock=lambda: T0, verbose=True) == exitcodes.OK
    text = " ".join(out.getvalue().split())
    assert "merge 01:00 UTC red, not landed (back to its task): the project's check `make test` exited 2" in text
    assert "merge 01:20 UTC green, landed: the project's check `make test` exited 0 (after 4s)" in text
    assert "merge 01:25 UTC dropped lines, not landed: app.py line 3 (added by the task 'Add /health': 'ok')" \
        in text


def test_a_temporal_fleets_task_says_the_machine_it_runs_or_last_ran_on(project):
    """The home's copy of a fleet on Temporal: a running task's reason names its machine, an
    ended attempt's end records its host; a local fleet's task has none."""
    with ledger(project) as led:
        led.record("fleet_start", now=T0 - 3600, run_id="fleet-1", parallel=2, pid=4242)
        led.upsert_task(task("run-aaaaaa", "running", 10, attempts=2, run_id="child-1",
                             reason="attempt 2 on box-b: running, pid 4242, in /srv/genesis/fleet-1/worktrees/run"))
        led.record("child_end", "run-aaaaaa", now=T0 - 1200, attempt=1, outcome="stopped", host="box-a")
        led.upsert_task(task("done-bbbbbb", "merged", 20, attempts=1))
        led.record("child_end", "done-bbbbbb", now=T0 - 900, attempt=1, outcome="verified", host="box-a")
        led.upsert_task(task("local-cccccc", "queued", 30))
    doc = document(read(project, now=T0))
    check(doc)
    assert {t["id"]: t["place"] for t in doc["tasks"]} == {"run-aaaaaa": "box-b", "done-bbbbbb": "box-a",
                                                          "local-cccccc": None}
    out = io.StringIO()
    assert run_fleet_status(project, out=out, clock=lambda: T0, task="done") == exitcodes.OK
    assert "machine: box-a" in out.getvalue()

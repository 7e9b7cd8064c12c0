"""`genesis status --json`: the document docs/reference/status-json.md describes, key by key, in every
state of the loop; a damaged ledger or state file gives a document that says so, never a
traceback, and the plain command's exit code."""

from __future__ import annotations

import calendar
import io
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from helpers.docs import linked_from
from helpers.nights import first_hour
from helpers.loop import GENESIS

from genesis import exitcodes
from genesis.ledger.store import Ledger, iso
from genesis.loop.breaker import BreakerState
from genesis.status.screen import run_status
from genesis.status.view import layout_of
from genesis.store.atomicio import write_json
from genesis.store.looplock import hold

DOC = Path(__file__).resolve().parents[2] / "docs" / "reference" / "status-json.md"
T0 = float(calendar.timegm((2025, 11, 21, 1, 30, 0)))
RUN = "20251121T003000Z-4242"
ROW = re.compile(r"^\| `([a-z_.\[\]]+)` \| ([a-z ]+) \| (.*) \|$")
TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool, "object": dict, "array": list}


def documented() -> dict[str, tuple[str, bool]]:
    """Every key docs/reference/status-json.md lists: its path -> (type, whether it may be null)."""
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
    """Every documented key is present with its type where its parent is; no key is undocumented.
    Returns the keys that had a value (not null)."""
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
        if path == "totals.phases_by_ending":
            assert all(isinstance(k, str) and isinstance(n, int) for k, n in value.items())
        elif isinstance(value, dict):
            assert set(value) == children(path), (path, set(value) ^ children(path))
            for key, item in value.items():
                walk(item, f"{path}.{key}" if path else key)
        elif isinstance(value, list):
            for item in value:
                assert isinstance(item, dict) and set(item) == children(f"{path}[]"), (path, item)
                for key, one in item.items():
                    walk(one, f"{path}[].{key}")

    walk(doc, "")
    assert doc["schema"] == 1
    for path in keys:
        if path.endswith("_epoch"):
            assert keys[path.removesuffix("_epoch")][0] == "string", path  # each time twice
    return seen


def as_json(project, now: float = T0, **kw) -> tuple[int, dict]:
    out = io.StringIO()
    code = run_status(project, out=out, clock=lambda: now, as_json=True, **kw)
    return code, json.loads(out.getvalue())


pytestmark = pytest.mark.usefixtures("utc")


def night(led: Ledger) -> None:
    rec = lambda what, minutes, **kw: led.record(RUN, what, at=T0 + minutes * 60, **kw)  # noqa: E731
    first_hour(led, RUN, T0)
    rec("incident", -15, iteration=1, phase="Criticizer", id="inc-1", kind="stuck")
    rec("phase_end", -15, iteration=1, phase="Criticizer", status="stuck", ending="stuck", duration=840.0,
        detail="sk-ant-api03-" + "x" * 40)
    rec("retry", -15, iteration=1, phase="Criticizer", count=1, reason="no heartbeat for 600s")
    rec("phase_start", -2, iteration=1, phase="Criticizer", epoch=T0 - 120, log="c.log", attempt=1)


def mid_phase(project: Path) -> int:
    """The loop in the Criticizer's retry, inside a Bash call; an OPEN breaker; TASKS.md. The lock's fd."""
    lay = layout_of(project)
    lay.state_dir.mkdir(parents=True, exist_ok=True)
    fd = hold(lay.loop_lock, lay.loop_record, RUN)
    with Ledger.open(lay.ledger_file) as led:
        night(led)
    lay.heartbeat_dir.mkdir(parents=True, exist_ok=True)
    write_json(lay.heartbeat_file("Criticizer"), {"epoch": T0 - 4, "tool": "Bash", "event": "PreToolUse",
                                                  "run_id": RUN})
    write_json(lay.health_file("Criticizer"), {
        "run_id": RUN, "phase": "Criticizer", "iteration": 1, "at": iso(T0 - 2), "classification": "slow",
        "stall_score": 0.55, "reason": "silent for half the window", "turns": 7,
        "tool_in_flight": "Bash: pytest -x (since 01:29:56)"})
    write_json(lay.config_snapshot, {"run_id": RUN, "settings": {"GENESIS_MAX_ITERATIONS": ["5", "flag"]}})
    lay.orchestrator.mkdir(exist_ok=True)
    state = BreakerState(state="OPEN", no_progress_count=3, last_iteration=1, updated_at=iso(T0 - 100),
                         opened_at=iso(T0 - 100), retry_at=iso(T0 + 900))
    lay.breaker_file.write_text(json.dumps(state.to_json()))
    (project / "TASKS.md").write_text("- [x] Add /health\n- [?] Add /ready\n- [ ] Add /metrics\n- [ ] Docs\n")
    return fd


def test_a_loop_mid_phase_is_one_document_with_every_documented_key(project):
    fd = mid_phase(project)
    try:
        code, doc = as_json(project)
    finally:
        os.close(fd)
    seen = check(doc)
    assert code == exitcodes.OK and doc["exit_code"] == code and doc["state"] == "running"
    assert (doc["error"], doc["loops"], doc["wait"]) == (None, None, None)
    assert doc["generated_at"] == "2025-11-21T01:30:00Z" and doc["generated_at_epoch"] == T0
    run = doc["run"]
    assert (run["id"], run["pid"], run["iteration"], run["max_iterations"]) == (RUN, os.getpid(), 1, 5)
    assert (run["started"], run["started_epoch"], run["duration_seconds"]) == ("2025-11-21T00:30:00Z", T0 - 3600,
                                                                                 3600.0)
    p = doc["phase"]
    assert (p["name"], p["iteration"], p["attempt"], p["started_epoch"], p["running_seconds"]) == \
        ("Criticizer", 1, 1, T0 - 120, 120.0)
    assert (p["health_class"], p["stall_score"], p["checked_at"]) == ("slow", 0.55, "2025-11-21T01:29:58Z")
    assert (p["heartbeat_age_seconds"], p["heartbeat_event"], p["heartbeat_tool"]) == (4.0, "PreToolUse", "Bash")
    assert p["tool_in_flight"] == {"name": "Bash", "text": "Bash: pytest -x (since 01:29:56)",
                                   "since": "2025-11-21T01:29:56Z", "since_epoch": T0 - 4, "seconds": 4.0}
    assert doc["breaker"]["state"] == "OPEN" and doc["breaker"]["no_progress"] == 3
    assert doc["tasks"] == {"open": 2, "awaiting_review": 1, "done": 1}
    t = doc["totals"]
    assert (t["scope"], t["run_id"], t["phases"], t["finished"], t["abnormal_phases"]) == ("this_run", RUN, 3, 1, 1)
    assert (t["incidents"], t["retries"], t["commits"], t["tasks_done"], t["input_tokens"]) == (1, 1, 1, 1, 120_000)
    assert t["cost_usd"] == 0.84 and t["phases_by_ending"] == {"finished": 1, "stuck": 1}
    assert doc["events"][-1] == {"at": "2025-11-21T01:28:00Z", "at_epoch": T0 - 120, "kind": "phase_start",
                                 "text": "iteration 1 Criticizer started (retry 1)"}
    assert "sk-ant-api03-xxxx" not in json.dumps(doc)  # redacted, as on the screen
    assert {"phase.tool_in_flight.seconds", "run.max_iterations", "totals.cost_usd", "breaker.retry_at"} <= seen


def test_a_waiting_loop_and_one_that_ended_are_documents_of_the_same_schema(project):
    fd = mid_phase(project)
    lay = layout_of(project)
    with Ledger.open(lay.ledger_file) as led:
        led.record(RUN, "phase_end", at=T0 - 60, iteration=1, phase="Criticizer", status="exited", returncode=1,
                   ending="limit", duration=60.0)
        led.record(RUN, "wait_start", at=T0 - 30, kind="limit", until=T0 + 600, seconds=630, phase="Criticizer",
                   iteration=1, reason="usage limit, resets 02:00")
    write_json(lay.wait_file, {"run_id": RUN, "kind": "limit", "until": T0 + 600, "reason": "usage limit, resets 02:00",
                               "phase": "Criticizer", "iteration": 1})
    try:
        code, doc = as_json(project)
    finally:
        os.close(fd)
    check(doc)
    assert code == exitcodes.OK and doc["state"] == "waiting" and doc["phase"] is None
    assert doc["wait"] == {"kind": "limit", "label": "usage limit", "until": "2025-11-21T01:40:00Z",
                           "until_epoch": T0 + 600, "seconds_left": 600.0, "reason": "usage limit, resets 02:00",
                           "phase": "Criticizer", "iteration": 1}

    with Ledger.open(lay.ledger_file) as led:
        led.record(RUN, "loop_end", at=T0 + 60, reason="circuit breaker OPEN", exit_code=3)
    code, doc = as_json(project, now=T0 + 120)
    check(doc)
    assert code == exitcodes.NOT_RUNNING and doc["exit_code"] == code and doc["state"] == "not_running"
    assert (doc["run"]["exit_code"], doc["run"]["reason"], doc["run"]["ended_epoch"]) == \
        (3, "circuit breaker OPEN", T0 + 60)
    assert doc["run"]["duration_seconds"] == 3660.0 and doc["run"]["max_iterations"] is None
    assert doc["totals"]["scope"] == "last_run" and doc["totals"]["until_epoch"] == T0 + 60


def test_a_project_with_no_run_is_a_document_of_nulls_not_missing_keys(project):
    code, doc = as_json(project)
    check(doc)
    assert code == exitcodes.NOT_RUNNING and doc["state"] == "not_running"
    assert (doc["run"], doc["phase"], doc["totals"], doc["events"], doc["note"]) == \
        (None, None, None, [], "no run recorded yet")
    assert doc["breaker"] == {"state": "CLOSED", "no_progress": 0, "retry_at": None, "retry_at_epoch": None,
                              "error": None}


@pytest.mark.parametrize("running", [True, False], ids=["running", "not-running"])
def test_a_damaged_ledger_gives_a_document_with_an_error_and_the_right_exit_code(project, running):
    lay = layout_of(project)
    lay.state_dir.mkdir(parents=True)
    fd = hold(lay.loop_lock, lay.loop_record, RUN) if running else None
    lay.ledger_file.write_bytes(b"this is not a database" * 100)
    try:
        told = subprocess.run(GENESIS + ["--project", str(project), "status", "--json"], capture_output=True,
                              text=True, timeout=60)
    finally:
        if fd is not None:
            os.close(fd)
    assert "Traceback" not in told.stderr
    doc = json.loads(told.stdout)
    check(doc)
    assert told.returncode == doc["exit_code"] == (exitcodes.OK if running else exitcodes.NOT_RUNNING)
    assert doc["error"].startswith("the ledger cannot be read")
    assert doc["state"] == ("running" if running else "not_running") and doc["totals"] is None
    assert lay.ledger_file.read_bytes().startswith(b"this is not")  # a reader never moves it aside


def test_damaged_state_files_are_said_in_error_and_passed_over(project):
    fd = mid_phase(project)
    lay = layout_of(project)
    lay.wait_file.write_text("{half a wait")
    lay.health_file("Criticizer").write_text("")
    lay.breaker_file.write_text('["not", "a", "breaker"]')
    try:
        code, doc = as_json(project)
    finally:
        os.close(fd)
    check(doc)
    assert code == exitcodes.OK and doc["state"] == "running"
    assert "wait.json: is not valid JSON" in doc["error"] and "Criticizer.health.json: is empty" in doc["error"]
    assert ".circuit_breaker.json is not a breaker file" in doc["error"]
    assert doc["breaker"]["state"] == "?" and doc["breaker"]["error"]
    assert doc["phase"]["health_class"] is None and doc["phase"]["heartbeat_age_seconds"] == 4.0


def test_not_a_git_work_tree_is_a_document_that_says_so(tmp_path):
    told = subprocess.run(GENESIS + ["--project", str(tmp_path), "status", "--json"], capture_output=True, text=True,
                          timeout=60)
    doc = json.loads(told.stdout)
    check(doc)
    assert told.returncode == doc["exit_code"] == exitcodes.USAGE
    assert "is not in a git work tree" in doc["error"] and doc["project"] is None


def test_json_and_watch_do_not_go_together(project):
    told = subprocess.run(GENESIS + ["--project", str(project), "status", "--json", "--watch"], capture_output=True,
                          text=True, timeout=60)
    assert told.returncode == exitcodes.USAGE and told.stdout == ""
    assert "--watch and --json: give one of them" in told.stderr


def test_the_schema_is_written_down_and_the_manual_links_it():
    keys = documented()
    assert len(keys) > 90 and "totals.abnormal_phases" in keys and "loops[].reason" in keys
    assert linked_from(DOC), f"no page of the manual links {DOC.name}"

"""The dashboard's metrics (genesis/web/metrics.py): agent runs by agent CLI, model, task and
project, over time, by retries needed, and what retries cost; read from a real loop's and a real
fleet's ledgers, and from ledgers written through their own APIs with every figure known; a
damaged ledger is its project's error alone; every document is the one docs/reference/dashboard-metrics.md
describes, key by key."""

from __future__ import annotations

import calendar
import re
import subprocess
import time
from pathlib import Path

import pytest

from helpers.docs import linked_from
from helpers.fleet import TASK_AGENT, fleet_dir, fleet_env, fleet_project, task_agent
from helpers.gate import simagent
from helpers.git import git, new_repo
from helpers.loop import LOOP, loop_env, run_loop

from genesis import exitcodes
from genesis.config import default_layout
from genesis.fleet.ledger import FleetLedger, TaskRow
from genesis.ledger.store import Ledger
from genesis.web import metrics as metrics_mod
from genesis.web.metrics import ProjectSource, metrics

DOC = Path(__file__).resolve().parents[2] / "docs" / "reference" / "dashboard-metrics.md"
ROW = re.compile(r"^\| `([a-z_.\[\]]+)` \| ([a-z ]+) \| (.*) \|$")
TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool, "object": dict, "array": list}
HOUR = 3600.0
T0 = float(calendar.timegm((2025, 11, 21, 2, 0, 0)))  # on the hour: buckets start at whole hours
RUN = "20251120T180000Z-4242"


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


def check(doc: dict) -> None:
    """Every documented key is present with its type; no key is undocumented (as tests/status/
    test_document.py checks docs/reference/status-json.md)."""
    keys = documented()

    def children(path: str) -> set[str]:
        prefix = f"{path}." if path else ""
        return {k[len(prefix):] for k in keys if k.startswith(prefix) and "." not in k[len(prefix):]}

    def walk(value, path: str) -> None:
        if path:
            kind, nullable = keys[path]
            if value is None:
                assert nullable, f"{path} is null"
                return
            assert isinstance(value, TYPES[kind]) and not isinstance(value, bool), (path, value)
        if isinstance(value, dict):
            assert set(value) == children(path), (path, set(value) ^ children(path))
            for key, item in value.items():
                walk(item, f"{path}.{key}" if path else key)
        elif isinstance(value, list):
            shape = children(f"{path}[]")
            for item in value:
                if shape:
                    assert isinstance(item, dict) and set(item) == shape, (path, item)
                    for key, one in item.items():
                        walk(one, f"{path}[].{key}")
                else:  # a list of plain values: numbers or names
                    assert isinstance(item, (int, float, str)) and not isinstance(item, bool), (path, item)

    walk(doc, "")
    assert doc["schema"] == 1


def source(project: Path, name: str | None = None) -> ProjectSource:
    layout = default_layout(project)
    ledger = layout.state_dir / "fleet" / "ledger.sqlite3"
    return ProjectSource(project.resolve(), name or project.name, layout, ledger if ledger.exists() else None)


def row(doc: dict, dim: str, key: str) -> tuple:
    (found,) = [r for r in doc["by"][dim] if r["key"] == key]
    return (found["phases"], found["succeeded"], found["failed"], found["success_rate"], found["failure_rate"],
            found["cost_usd"])


def keys(doc: dict, dim: str) -> list[str]:
    return [r["key"] for r in doc["by"][dim]]


# --- real runs ---------------------------------------------------------------------------------

@pytest.mark.whole
def test_a_real_loop_counts_its_phases_by_the_agent_and_model_each_start_recorded(project):
    """The Builder hangs (stuck after the 5 s window) and is retried with the fallback command,
    which names another model."""
    env = loop_env(GENESIS_PHASES="Builder", GENESIS_AGENT_CMD=simagent("1:Builder=hang,*:*=idle", "--model", "sim-1"),
                   GENESIS_FALLBACK_AGENT_CMD=simagent("*:*=idle", "--model", "sim-2"))
    done = run_loop(project, "--max-iterations", "1", env=env)
    assert done.returncode == exitcodes.OK, done.stderr[-3000:]

    doc = metrics([source(project, "solo")], time.time())
    check(doc)
    assert doc["error"] is None and doc["runs"] == 2
    # The stuck Builder ran sim-1 and failed; its retry ran the fallback's sim-2 and finished.
    assert row(doc, "model", "sim-1") == (1, 0, 1, 0.0, 1.0, 0.0)
    assert row(doc, "model", "sim-2") == (1, 1, 0, 1.0, 0.0, 0.0)
    assert keys(doc, "agent") == ["generic"] and row(doc, "agent", "generic") == (2, 1, 1, 0.5, 0.5, 0.0)
    assert keys(doc, "project") == ["solo"] and row(doc, "project", "solo")[:3] == (2, 1, 1)
    assert doc["by"]["task"] == []  # a single loop's phases belong to no task
    # The phase needed one retry, which switched command: an escalation.
    assert doc["retry_histogram"] == {"labels": ["0", "1", "2", "3", "4+"], "counts": [0, 1, 0, 0, 0]}
    over = doc["over_time"]
    assert over["bucket_seconds"] == 600
    assert (sum(over["restarts"]), sum(over["escalations"]), sum(over["failures"])) == (0, 1, 1)


NEVER = TASK_AGENT.replace(': "${GENESIS_TASK:?no task given}"\n', ': "${GENESIS_TASK:?no task given}"\n'
                           'if [[ ${GENESIS_TASK} == *never* ]]; then exit 1; fi\n')


@pytest.mark.whole
def test_a_real_fleet_counts_each_childs_run_by_task_and_model_with_its_escalation(project, tmp_path):
    """alpha works at once; never's agent always fails: escalated at once to the fallback (another
    model), which fails too: it fails for good."""
    fleet_project(project, ["Add alpha", "Add never"])
    agent = task_agent(tmp_path / "agent.sh", NEVER)
    env = fleet_env(GENESIS_FLEET_CHILD_ITERATIONS="1",
                    GENESIS_FLEET_MAX_TASK_RESTARTS="0", GENESIS_FLEET_MAX_FAILED_TASKS="1",
                    GENESIS_FLEET_ESCALATION="fallback", GENESIS_FALLBACK_AGENT_CMD=f"bash {agent} --model m-2")
    with open(tmp_path / "fleet.log", "wb") as log:
        proc = subprocess.run(["bash", str(LOOP), "--project", str(project), "--parallel", "2", "--agent-cmd",
                               f"bash {agent} --model m-1", "--set", "GENESIS_PHASES=Builder"], env=env,
                              stdin=subprocess.DEVNULL, stdout=log, stderr=log, timeout=240)
    assert proc.returncode == exitcodes.FLEET_TASKS_FAILED, (tmp_path / "fleet.log").read_text()[-3000:]

    src = source(project, "api")
    assert src.fleet_ledger == fleet_dir(project) / "ledger.sqlite3"
    with FleetLedger.open(src.fleet_ledger, readonly=True) as led:  # what the monitor recorded at each launch
        launched = [(e.detail["how"], e.detail["cli"], e.detail["model"]) for e in led.events("launch")]
    assert sorted(launched) == [("escalate", "generic", "m-2"), ("start", "generic", "m-1"),
                                ("start", "generic", "m-1")]
    doc = metrics([src], time.time())
    check(doc)
    assert doc["error"] is None and doc["runs"] == 3
    assert row(doc, "task", "api: Add alpha")[:5] == (1, 1, 0, 1.0, 0.0)
    assert row(doc, "task", "api: Add never")[:5] == (2, 0, 2, 0.0, 1.0)
    assert row(doc, "model", "m-1")[:5] == (2, 1, 1, 0.5, 0.5) and row(doc, "model", "m-2")[:5] == (1, 0, 1, 0.0, 1.0)
    assert row(doc, "agent", "generic")[:3] == (3, 1, 2) and row(doc, "project", "api")[:3] == (3, 1, 2)
    # Tasks by the retries they needed: alpha none, never one.
    assert doc["retry_histogram"]["counts"] == [1, 1, 0, 0, 0]
    over = doc["over_time"]
    assert (sum(over["restarts"]), sum(over["escalations"]), sum(over["failures"])) == (0, 1, 2)


# --- ledgers written through their APIs: every figure known -----------------------------------

def loop_night(project: Path) -> None:
    """A loop's run: claude/opus; a stuck Criticizer retried on codex/o3; a Planner start recorded
    before starts named their agent (its run's command counts), ended by a usage limit."""
    with Ledger.open(default_layout(project).ledger_file) as led:
        rec = lambda kind, at, **kw: led.record(RUN, kind, at=at, **kw)  # noqa: E731
        opus = {"agent": "claude", "model": "opus"}
        rec("loop_start", T0 - 8 * HOUR, project=str(project), pid=1, agent=["claude", "-p", "--model", "opus"])
        rec("phase_start", T0 - 8 * HOUR + 10, iteration=1, phase="Builder", epoch=T0 - 8 * HOUR + 10, attempt=0,
            **opus)
        rec("phase_end", T0 - 8 * HOUR + 600, iteration=1, phase="Builder", status="exited", ending="finished",
            cost_usd=0.5, attempt=0)
        rec("phase_start", T0 - 7 * HOUR, iteration=1, phase="Criticizer", epoch=T0 - 7 * HOUR, attempt=0, **opus)
        rec("phase_end", T0 - 7 * HOUR + 30, iteration=1, phase="Criticizer", status="stuck", ending="stuck",
            cost_usd=0.2, attempt=0)
        rec("retry", T0 - 7 * HOUR + 31, iteration=1, phase="Criticizer", count=1, reason="no heartbeat",
            old_cmd=["claude", "-p"], new_cmd=["codex", "exec", "-m", "o3"])
        rec("phase_start", T0 - 7 * HOUR + 60, iteration=1, phase="Criticizer", epoch=T0 - 7 * HOUR + 60, attempt=1,
            agent="codex", model="o3")
        rec("phase_end", T0 - 7 * HOUR + 900, iteration=1, phase="Criticizer", status="exited", ending="finished",
            cost_usd=0.3, attempt=1)
        rec("phase_start", T0 - 6 * HOUR, iteration=1, phase="Planner", epoch=T0 - 6 * HOUR, attempt=0)
        rec("phase_end", T0 - 6 * HOUR + 50, iteration=1, phase="Planner", status="exited", ending="limit")
        rec("phase_start", T0 - HOUR, iteration=2, phase="Builder", epoch=T0 - HOUR, attempt=0, **opus)
        rec("phase_end", T0 - HOUR + 30, iteration=2, phase="Builder", status="exited", ending="failed",
            returncode=1, cost_usd=0.1)
        rec("phase_start", T0 - 60, iteration=2, phase="Criticizer", epoch=T0 - 60, attempt=0, **opus)  # running


def fleet_night(project: Path, tmp_path: Path) -> None:
    """A fleet: alpha verified; beta failed, restarted and failed, escalated to codex/o3 and
    verified; gamma running, launched before launches named their CLI: its own ledger, in its
    worktree's git dir, says gemini and what its phases cost so far."""
    worktree = tmp_path / "wt-gamma"
    git(project, "worktree", "add", "-q", "-b", "gamma", str(worktree))
    child = project / ".git" / "worktrees" / "wt-gamma" / "genesis" / "ledger.sqlite3"
    with Ledger.open(child) as led:
        led.record("child-gamma", "phase_start", at=T0 - 1500, iteration=1, phase="Builder", epoch=T0 - 1500,
                   attempt=0, agent="gemini", model="gemini-2.5-pro")
        led.record("child-gamma", "phase_end", at=T0 - 900, iteration=1, phase="Builder", ending="finished",
                   status="exited", cost_usd=0.25)
    path = default_layout(project).state_dir / "fleet" / "ledger.sqlite3"
    with FleetLedger.open(path) as led:
        for ident, text in (("alpha", "Add alpha"), ("beta", "Add beta"), ("gamma", "Add gamma")):
            led.upsert_task(TaskRow(ident, text, "queued", created=T0 - 3 * HOUR))

        def attempt(task, kind, start, end, outcome, cost, cli="claude", model="sonnet"):
            a = led.begin_attempt(task, kind, "", "configured", "", start)
            named = {"cli": cli, "model": model} if cli else {}
            led.record("launch", task, now=start, attempt=a.attempt, how=kind, agent="configured", **named)
            if end is not None:
                led.end_attempt(task, a.attempt, 0 if outcome == "verified" else 1, outcome, end)
                led.record("child_end", task, now=end, attempt=a.attempt, run_id=f"{task}-{a.attempt}",
                           outcome=outcome, cost_usd=cost)

        attempt("alpha", "start", T0 - 2 * HOUR, T0 - 2 * HOUR + 600, "verified", 1.0)
        attempt("beta", "start", T0 - 2 * HOUR, T0 - 2 * HOUR + 300, "failed", 0.4)
        attempt("beta", "restart", T0 - 2 * HOUR + 400, T0 - 2 * HOUR + 700, "failed", 0.6)
        attempt("beta", "escalate", T0 - 2 * HOUR + 800, T0 - 1.5 * HOUR, "verified", 0.5, cli="codex", model="o3")
        attempt("gamma", "start", T0 - 1800, None, None, None, cli=None)
        led.set_state("gamma", "running", worktree=str(worktree), run_id="child-gamma")


def test_ledgers_written_through_their_apis_give_every_figure(tmp_path):
    solo, fleet = new_repo(tmp_path / "solo"), new_repo(tmp_path / "fleet")
    loop_night(solo)
    fleet_night(fleet, tmp_path)
    doc = metrics([source(solo), source(fleet)], T0)
    check(doc)
    assert (doc["generated_at"], doc["generated_at_epoch"], doc["since"]) == ("2025-11-21T02:00:00Z", T0, None)
    assert (doc["error"], doc["errors"], doc["truncated"], doc["runs"]) == (None, [], [], 11)

    # By agent: the loop's 5 claude phases (the Planner's by its run's command) and the fleet's 3.
    assert keys(doc, "agent") == ["claude", "codex", "gemini"]
    assert row(doc, "agent", "claude") == (8, 2, 4, 0.3333, 0.6667, 2.8)
    assert row(doc, "agent", "codex") == (2, 2, 0, 1.0, 0.0, 0.8)
    assert row(doc, "agent", "gemini") == (1, 0, 0, None, None, 0.25)  # running: its cost so far, no verdict
    assert keys(doc, "model") == ["opus", "sonnet", "o3", "gemini-2.5-pro"]
    assert row(doc, "model", "opus") == (5, 1, 2, 0.3333, 0.6667, 0.8)
    assert row(doc, "model", "sonnet") == (3, 1, 2, 0.3333, 0.6667, 2.0)
    assert row(doc, "model", "o3") == (2, 2, 0, 1.0, 0.0, 0.8)
    assert keys(doc, "task") == ["fleet: Add beta", "fleet: Add alpha", "fleet: Add gamma"]
    assert row(doc, "task", "fleet: Add beta") == (3, 1, 2, 0.3333, 0.6667, 1.5)
    assert row(doc, "task", "fleet: Add alpha") == (1, 1, 0, 1.0, 0.0, 1.0)
    assert row(doc, "project", "solo") == (6, 2, 2, 0.5, 0.5, 1.1)
    assert row(doc, "project", "fleet") == (5, 2, 2, 0.5, 0.5, 2.75)
    # Retries: the Criticizer's one (0.30) and beta's restart and escalation (0.60 + 0.50).
    assert (doc["retry_cost_usd"], doc["cost_usd"]) == (1.4, 3.85)
    # Units of work: the loop's 5 phases in their iterations (the Criticizer retried once), the
    # fleet's 3 tasks (beta retried twice).
    assert doc["retry_histogram"]["counts"] == [6, 1, 1, 0, 0]
    # 7 h from the first retry to now: hourly buckets. The loop's retry switched command.
    over = doc["over_time"]
    assert over["bucket_seconds"] == 3600 and over["buckets_epoch"] == [T0 - (7 - i) * HOUR for i in range(8)]
    assert over["restarts"] == [0, 0, 0, 0, 0, 1, 0, 0]
    assert over["escalations"] == [1, 0, 0, 0, 0, 1, 0, 0]
    assert over["failures"] == [1, 0, 0, 0, 0, 2, 1, 0]

    # Since 3 h ago: the loop's last two phases and every fleet attempt; 10-minute buckets.
    since = metrics([source(solo), source(fleet)], T0, since=T0 - 3 * HOUR)
    check(since)
    assert (since["since"], since["since_epoch"], since["runs"]) == ("2025-11-20T23:00:00Z", T0 - 3 * HOUR, 7)
    assert row(since, "project", "solo") == (2, 0, 1, 0.0, 1.0, 0.1)
    assert since["over_time"]["bucket_seconds"] == 600 and len(since["over_time"]["buckets_epoch"]) == 19
    assert sum(since["over_time"]["escalations"]) == 1 and sum(since["over_time"]["failures"]) == 3


def test_a_damaged_ledger_is_its_projects_error_and_the_others_still_count(tmp_path):
    good, bad = new_repo(tmp_path / "good"), new_repo(tmp_path / "bad")
    loop_night(good)
    damaged = default_layout(bad).ledger_file
    damaged.parent.mkdir(parents=True)
    damaged.write_bytes(b"this is not a database" * 100)
    doc = metrics([source(good), source(bad)], T0)
    check(doc)
    assert [e["project"] for e in doc["errors"]] == ["bad"]
    assert doc["errors"][0]["error"].startswith("its ledger cannot be read: ")
    assert doc["error"].startswith("bad: its ledger cannot be read: ")
    assert row(doc, "project", "good")[:3] == (6, 2, 2) and row(doc, "project", "bad")[:3] == (0, 0, 0)
    assert damaged.read_bytes() == b"this is not a database" * 100  # read-only: never moved aside or written
    assert sorted(p.name for p in damaged.parent.iterdir()) == ["ledger.sqlite3"]


def test_a_ledger_is_read_within_max_rows_the_newest_first(tmp_path, monkeypatch):
    solo = new_repo(tmp_path / "solo")
    with Ledger.open(default_layout(solo).ledger_file) as led:
        for i in range(1, 6):
            led.record(RUN, "phase_start", at=T0 - 600 + i, iteration=i, phase="Builder", epoch=T0 - 600 + i,
                       agent="claude", model="opus")
            led.record(RUN, "phase_end", at=T0 - 500 + i, iteration=i, phase="Builder", ending="finished",
                       cost_usd=float(i))
    monkeypatch.setattr(metrics_mod, "MAX_ROWS", 10)  # 4 of them for the phases, 4 for their starts
    doc = metrics([source(solo)], T0)
    check(doc)
    assert doc["truncated"] == ["solo"] and doc["error"] is None
    assert row(doc, "project", "solo") == (4, 4, 0, 1.0, 0.0, 14.0)  # phases 2 to 5: the newest
    assert keys(doc, "model") == ["opus"]  # each read with its start


def test_no_ledger_yet_is_no_run_and_no_error(project):
    doc = metrics([source(project, "new")], T0)
    check(doc)
    assert (doc["runs"], doc["error"], doc["cost_usd"]) == (0, None, 0.0)
    assert doc["by"]["project"] == [{"key": "new", "phases": 0, "succeeded": 0, "failed": 0, "success_rate": None,
                                     "failure_rate": None, "cost_usd": 0.0}]
    assert doc["over_time"] == {"bucket_seconds": 600, "buckets_epoch": [T0], "restarts": [0], "escalations": [0],
                                "failures": [0]}


def test_the_document_is_written_down_and_the_manual_links_it():
    found = documented()
    assert {"by.model[].failure_rate", "over_time.escalations", "retry_histogram.counts", "errors[].error"} <= \
        set(found)
    assert linked_from(DOC), f"no page of the manual links {DOC.name}"


def test_two_projects_of_one_name_are_told_apart(tmp_path):
    one, two = new_repo(tmp_path / "a" / "app"), new_repo(tmp_path / "b" / "app")
    doc = metrics([source(one), source(two)], T0)
    assert keys(doc, "project") == sorted([f"app ({one.resolve()})", f"app ({two.resolve()})"])


def test_runs_are_counted_by_the_model_the_agent_said_it_used_not_default(tmp_path):
    """A command that names no model (`default` at its start) whose agent's end names the one
    it used; a fleet child launched the same way, its own ledger saying the model."""
    project = new_repo(tmp_path / "p")
    with Ledger.open(default_layout(project).ledger_file) as led:
        led.record(RUN, "phase_start", at=T0 - 600, iteration=1, phase="Builder", epoch=T0 - 600, attempt=0,
                   agent="claude", model=None)
        led.record(RUN, "phase_end", at=T0 - 300, iteration=1, phase="Builder", ending="finished", status="exited",
                   started=T0 - 600, model_used="claude-sonnet-4-5-20250929")
        led.record(RUN, "phase_start", at=T0 - 200, iteration=1, phase="Criticizer", epoch=T0 - 200, attempt=0,
                   agent="claude", model=None)
        led.record(RUN, "phase_end", at=T0 - 100, iteration=1, phase="Criticizer", ending="failed", status="exited",
                   started=T0 - 200)  # its agent named no model: the command's, none
    worktree = tmp_path / "wt-a"
    git(project, "worktree", "add", "-q", "-b", "a", str(worktree))
    with Ledger.open(project / ".git" / "worktrees" / "wt-a" / "genesis" / "ledger.sqlite3") as led:
        led.record("child-a", "phase_start", at=T0 - 500, iteration=1, phase="Builder", epoch=T0 - 500, attempt=0,
                   agent="claude", model=None)
        led.record("child-a", "phase_end", at=T0 - 400, iteration=1, phase="Builder", ending="finished",
                   status="exited", started=T0 - 500, model_used="claude-opus-4-5")
    with FleetLedger.open(default_layout(project).state_dir / "fleet" / "ledger.sqlite3") as led:
        led.upsert_task(TaskRow("a", "Add a", "queued", created=T0 - HOUR))
        a = led.begin_attempt("a", "start", "", "configured", "", T0 - 550)
        led.record("launch", "a", now=T0 - 550, attempt=a.attempt, how="start", agent="configured", cli="claude",
                   model=None)
        led.set_state("a", "running", worktree=str(worktree), run_id="child-a")
    doc = metrics([source(project, "p")], T0)
    assert sorted(keys(doc, "model")) == ["claude-opus-4-5", "claude-sonnet-4-5-20250929", "default"]
    assert row(doc, "model", "claude-sonnet-4-5-20250929")[:3] == (1, 1, 0)
    assert row(doc, "model", "default")[:3] == (1, 0, 1)
    assert row(doc, "model", "claude-opus-4-5")[:3] == (1, 0, 0)  # the fleet child's run, still going


def test_a_merged_fleet_tasks_run_keeps_its_model_after_its_worktree_is_removed(tmp_path):
    """The monitor kept the child's `model_used` in its `child_end`: the child's own ledger went
    with its worktree, and its launch named no model."""
    project = new_repo(tmp_path / "p")
    with FleetLedger.open(default_layout(project).state_dir / "fleet" / "ledger.sqlite3") as led:
        for ident, used in (("a", "claude-opus-4-5"), ("b", None)):
            led.upsert_task(TaskRow(ident, f"Add {ident}", "queued", created=T0 - HOUR))
            a = led.begin_attempt(ident, "start", "", "configured", f"child-{ident}", T0 - 550)
            led.record("launch", ident, now=T0 - 550, attempt=a.attempt, how="start", agent="configured",
                       cli="claude", model=None)
            led.end_attempt(ident, a.attempt, 0, "verified", T0 - 100)
            led.record("child_end", ident, now=T0 - 100, run_id=f"child-{ident}", attempt=a.attempt, exit_code=0,
                       outcome="verified", cost_usd=0.01, ended_at=T0 - 100, reason="done", model_used=used)
            led.set_state(ident, "merged", worktree=str(tmp_path / f"gone-{ident}"), run_id=f"child-{ident}")
    doc = metrics([source(project, "p")], T0)
    check(doc)
    assert sorted(keys(doc, "model")) == ["claude-opus-4-5", "default"]
    assert row(doc, "model", "claude-opus-4-5")[:3] == (1, 1, 0)
    assert row(doc, "model", "default")[:3] == (1, 1, 0)  # an end that named none: the launch's

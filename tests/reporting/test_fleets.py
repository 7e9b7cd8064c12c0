"""`genesis report --fleet`: one report across the projects of a fleet file, from their fleet ledgers."""

from __future__ import annotations

import json
import time
from pathlib import Path

from helpers.git import new_repo

from genesis.fleet.ledger import FleetLedger, TaskRow
from genesis.reporting import fleets
from genesis.store.layout import private_dir, state_dir_of

NOW = time.time()
XSS = "<img src=x onerror=alert(1)>"


def fleet_of(project: Path, states: dict[str, str], cost: float | None = None) -> Path:
    """A fleet that ran on project: one task per text, in the given state, each with one attempt."""
    path = private_dir(private_dir(state_dir_of(project)) / "fleet") / "ledger.sqlite3"
    with FleetLedger.open(path) as led:
        led.record("fleet_start", run_id="fleet-x", parallel=2, pid=1, now=NOW - 600)
        for n, (text, state) in enumerate(states.items()):
            led.upsert_task(TaskRow(f"t{n}", text, state, attempts=1, created=NOW - 600 + n, updated=NOW))
            led.begin_attempt(f"t{n}", "start", "", "configured", "", NOW - 500)
            led.end_attempt(f"t{n}", 1, 0, "verified" if state == "merged" else "failed", NOW - 400)
            led.record("child_end", f"t{n}", attempt=1, exit_code=0, outcome="x", cost_usd=cost, ended_at=NOW - 400,
                       now=NOW - 400)
        led.record("fleet_end", exit_code=31, reason="done", pid=1, now=NOW - 300)
    return project


def test_the_summary_counts_each_project_and_all_then_each_fleet_follows(tmp_path):
    app = fleet_of(new_repo(tmp_path / "app"), {"one": "merged", "two": "failed", XSS: "needs-review"}, cost=0.5)
    api = fleet_of(new_repo(tmp_path / "api"), {"three": "merged"}, cost=0.25)
    idle = new_repo(tmp_path / "idle")
    reports = fleets.load([app, api, idle], NOW)
    rows = fleets.summary_rows(reports)
    assert rows == [["app", "3", "1", "1", "1", "$1.50", "ended, exit 31"],
                    ["api", "1", "1", "0", "0", "$0.25", "ended, exit 31"],
                    ["idle", "-", "-", "-", "-", "-", "no fleet has run on this project"],
                    ["all projects", "4", "2", "1", "1", "$1.75", ""]]
    text = fleets.render_text(tmp_path / "fleet.toml", reports)
    assert text.index("all projects") < text.index(f"Genesis fleet report: {app}") < \
        text.index(f"Genesis fleet report: {api}")
    doc = fleets.as_json_doc(tmp_path / "fleet.toml", reports)
    assert json.loads(json.dumps(doc, default=str))["projects"][2] == {"project": str(idle), "fleet": None,
                                                                       "error": "no fleet has run on this project"}
    page = fleets.render_html(tmp_path / "fleet.toml", reports)
    assert XSS not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert 'id="p1-tasks"' in page and 'id="p2-kpis"' in page and 'id="p3-tasks"' not in page


def test_two_projects_of_one_name_are_told_apart_by_their_paths(tmp_path):
    first = fleet_of(new_repo(tmp_path / "a" / "app"), {"one": "merged"})
    second = fleet_of(new_repo(tmp_path / "b" / "app"), {"two": "merged"})
    rows = fleets.summary_rows(fleets.load([first, second], NOW))
    assert [r[0] for r in rows] == [str(first), str(second), "all projects"]

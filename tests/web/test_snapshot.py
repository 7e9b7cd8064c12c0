"""The dashboard's document (`/api/state`): each loop and fleet task as a tile of the right
colour with its phase, health, heartbeat, tool, wait, breaker and attempts; the fleet's pauses,
retries and escalations; the last alerts; a damaged project said, the others still shown; and
a loop's state read again only when one of its files changed."""

from __future__ import annotations

import calendar
import json
import os
import time

import pytest
from helpers.dashboard import alert, beat, child_loop, fleet_running, loop_mid_phase, task

from genesis.config import default_layout
from genesis.ledger.store import Ledger
from genesis.store.looplock import hold
from genesis.web import snapshot as snapshot_module
from genesis.web.discovery import fleet_ledger_of, key_of
from genesis.web.metrics import ProjectSource
from genesis.web.snapshot import Reader, snapshot

T0 = float(calendar.timegm((2025, 11, 21, 1, 30, 0)))
RUN = "20251121T003000Z-4242"


def source(project) -> ProjectSource:
    lay = default_layout(project)
    return ProjectSource(project=project.resolve(), name=project.name, layout=lay, fleet_ledger=fleet_ledger_of(lay))


def only(doc: dict, project) -> dict:
    return next(p for p in doc["projects"] if p["key"] == key_of(project))


@pytest.mark.parametrize("health, colour", [("healthy", "green"), ("slow", "yellow"), ("stuck", "red"),
                                            ("wedged", "red")])
def test_a_running_loop_is_one_tile_coloured_by_its_health(project, health, colour):
    fd = loop_mid_phase(project, RUN, T0, health=health, tool_text="Bash: pytest -x tests/")
    try:
        doc = snapshot([source(project)], T0)
    finally:
        os.close(fd)
    p = only(doc, project)
    assert p["error"] is None and p["status"]["state"] == "running"
    [tile] = p["tiles"]
    assert (tile["key"], tile["kind"], tile["title"], tile["colour"], tile["state"]) == \
        (key_of(project), "loop", "project", colour, "running")
    assert (tile["phase"], tile["health"], tile["heartbeat_age_seconds"], tile["tool"], tile["breaker"]) == \
        ("Criticizer", health, 4.0, "Bash: pytest -x tests/", "CLOSED")
    assert tile["attempts"] == 2 and tile["href"] == f"/loop/{key_of(project)}"
    assert p["retries"] == [{"key": key_of(project), "title": "project", "attempt": 2,
                             "reason": f"the agent is {health}"}]
    assert doc["machine"]["loops_running"] == 1 and doc["schema"] == 1 and doc["generated_at_epoch"] == T0
    assert p["score"] < 100 and doc["machine"]["score"] == p["score"]  # an incident this run, at least


def test_a_killed_loop_is_red_one_that_ended_well_grey(tmp_path):
    from helpers.git import new_repo
    killed, ended = new_repo(tmp_path / "killed"), new_repo(tmp_path / "ended")
    loop_mid_phase(killed, RUN, T0, hold_lock=False)  # no lock, no end recorded: killed
    loop_mid_phase(ended, RUN, T0, hold_lock=False)
    with Ledger.open(default_layout(ended).ledger_file) as led:
        led.record(RUN, "loop_end", at=T0 - 1, reason="the work is done", exit_code=0)
    doc = snapshot([source(killed), source(ended)], T0)
    assert [t["colour"] for t in only(doc, killed)["tiles"]] == ["red"]
    assert only(doc, killed)["tiles"][0]["state"] == "stopped"
    assert [(t["colour"], t["state"]) for t in only(doc, ended)["tiles"]] == [("grey", "not_running")]
    assert doc["machine"]["loops_running"] == 0


def test_a_fleet_shows_every_task_its_child_and_its_pauses(project):
    worktree, child = child_loop(project, "build-api-aaaaaa", T0, health="stuck", tool_text="Bash: npm test")
    title = "<img src=x onerror=alert(1)>"
    mon = fleet_running(project, T0, [
        task("build-api-aaaaaa", "running", T0, worktree=str(worktree), pid=os.getpid(),
             run_id="child-build-api-aaaaaa", attempts=2, restarts=1),
        task("xss-hhhhhh", "queued", T0, text=title),
        task("add-docs-bbbbbb", "merged", T0, merged_sha="0123456789abcdef0123"),
        task("fix-login-cccccc", "failed", T0, attempts=7, escalations=3, reason="3 escalations spent"),
        task("refactor-dddddd", "needs-review", T0, reason="merge conflict in app.py"),
        task("add-tests-eeeeee", "restarting", T0, not_before=T0 + 40, restarts=2, attempts=3, reason="exit 1"),
        task("up-ffffff", "escalated", T0, escalations=1, attempts=4, reason="stuck twice"),
    ], events=(("limit_hold", "build-api-aaaaaa", {"until": T0 + 1800, "reason": "claude: 5-hour limit"}),
               ("cascade_pause", None, {"reason": "2 of 3 children failed"})))
    lay = default_layout(project)
    monitor = hold(lay.loop_lock, lay.loop_record, "fleet-1")  # the monitor holds the project's loop lock
    try:
        doc = snapshot([source(project)], T0)
    finally:
        os.close(child)
        os.close(mon)
        os.close(monitor)
    p = only(doc, project)
    assert p["error"] is None and p["fleet"]["state"] == "running"
    tiles = {t["key"].split("--")[1]: t for t in p["tiles"]}
    assert set(tiles) == {"build-api-aaaaaa", "xss-hhhhhh", "add-docs-bbbbbb", "fix-login-cccccc", "refactor-dddddd",
                          "add-tests-eeeeee", "up-ffffff"}  # the project's own loop never ran: no tile of its own
    colours = {k: t["colour"] for k, t in tiles.items()}
    assert colours == {"build-api-aaaaaa": "red", "xss-hhhhhh": "yellow", "add-docs-bbbbbb": "grey",
                       "fix-login-cccccc": "red", "refactor-dddddd": "red", "add-tests-eeeeee": "yellow",
                       "up-ffffff": "yellow"}
    run = tiles["build-api-aaaaaa"]
    assert (run["kind"], run["phase"], run["health"], run["tool"], run["attempts"], run["heartbeat_age_seconds"]) == \
        ("task", "Criticizer", "stuck", "Bash: npm test", 2, 4.0)
    assert run["href"] == f"/loop/{key_of(project)}--build-api-aaaaaa"
    assert tiles["xss-hhhhhh"]["title"] == title  # data as it is: the page sets it with textContent
    assert tiles["add-tests-eeeeee"]["wait"] == {"kind": "retry", "until_epoch": T0 + 40, "reason": "exit 1"}
    # The fleet document carries the child as read here (the score reads its health from it).
    child_doc = next(t for t in p["fleet"]["tasks"] if t["id"] == "build-api-aaaaaa")["child"]
    assert (child_doc["read"], child_doc["health_class"], child_doc["phase"]) == (True, "stuck", "Criticizer")
    assert p["fleet"]["tasks_unread"] == 0
    assert {(x["kind"], x["reason"]) for x in p["pauses"]} == {("limit", "claude: 5-hour limit"),
                                                               ("cascade", "2 of 3 children failed")}
    assert {r["key"].split("--")[1] for r in p["retries"]} == {"build-api-aaaaaa", "add-tests-eeeeee"}
    assert [e["title"] for e in p["escalations"]] == ["Do up-ffffff"]
    assert any("stuck" in r["why"] for r in p["reasons"]) and p["score"] <= 50
    assert doc["machine"]["loops_running"] == 1


def test_the_last_alerts_newest_first_and_redacted(project):
    loop_mid_phase(project, RUN, T0, hold_lock=False)
    for i in range(12):
        alert(project, RUN, T0 - 100 + i, f"Builder stuck #{i}")
    secret = "sk-ant-api03-" + "Z" * 40
    alert(project, RUN, T0 - 1, f"Criticizer leaked {secret}")
    doc = snapshot([source(project)], T0)
    alerts = only(doc, project)["alerts"]
    assert len(alerts) == 10 and alerts == doc["alerts"]
    assert alerts[0]["at_epoch"] == T0 - 1 and alerts[1]["title"] == "Builder stuck #11"
    assert (alerts[1]["severity"], alerts[1]["decision"], alerts[1]["project"]) == ("high", "intervene", "project")
    assert secret not in json.dumps(doc) and "[redacted]" in alerts[0]["title"]


def test_a_damaged_ledger_is_that_projects_error_and_the_others_still_show(tmp_path):
    from helpers.git import new_repo
    bad, good = new_repo(tmp_path / "bad"), new_repo(tmp_path / "good")
    fd = loop_mid_phase(good, RUN, T0)
    lay = default_layout(bad)
    lay.state_dir.mkdir(parents=True)
    lay.ledger_file.write_bytes(b"this is not a database" * 100)
    fleet = lay.state_dir / "fleet"
    fleet.mkdir()
    (fleet / "ledger.sqlite3").write_bytes(b"nor is this" * 100)
    try:
        doc = snapshot([source(bad), source(good)], T0)
    finally:
        os.close(fd)
    b, g = only(doc, bad), only(doc, good)
    assert b["fleet"]["error"] and "cannot be read" in b["fleet"]["error"]
    assert b["status"]["error"] and b["score"] < 100
    assert g["error"] is None and [t["colour"] for t in g["tiles"]] == ["green"]


def test_a_loops_state_is_read_again_only_when_its_files_change(project, monkeypatch):
    builds = []
    real = snapshot_module.build

    def counted(layout, **kw):
        builds.append(layout.project)
        return real(layout, **kw)

    monkeypatch.setattr(snapshot_module, "build", counted)
    fd = loop_mid_phase(project, RUN, T0)
    clock = [100.0]
    reader = Reader(clock=lambda: clock[0])
    try:
        first = snapshot([source(project)], T0, reader)
        again = snapshot([source(project)], T0 + 3, reader)
        assert len(builds) == 1, "nothing changed: the last read is reused"
        assert again["projects"][0]["tiles"][0]["heartbeat_age_seconds"] == 7.0  # with the new time
        beat(project, "Criticizer", RUN, T0 + 2.5, tool="Edit")
        moved = snapshot([source(project)], T0 + 3, reader)
        assert len(builds) == 2 and moved["projects"][0]["tiles"][0]["heartbeat_age_seconds"] == 0.5
        clock[0] += 5.0  # still nothing changed, but a read is never older than REFRESH
        snapshot([source(project)], T0 + 3, reader)
        assert len(builds) == 3
    finally:
        os.close(fd)
    os_closed = snapshot([source(project)], T0 + 4, reader)  # the lock released: read again, at once
    assert len(builds) == 4 and os_closed["projects"][0]["tiles"][0]["colour"] == "red"
    assert first["projects"][0]["tiles"][0]["colour"] == "green"


def test_no_project_is_an_empty_machine_of_full_health():
    doc = snapshot([], time.time())
    assert doc["projects"] == [] and doc["alerts"] == [] and doc["machine"]["score"] == 100
    assert doc["machine"]["loops_running"] == 0


@pytest.mark.parametrize("code, colour", [(0, "grey"), (20, "grey"), (24, "grey"), (143, "grey"), (3, "red"),
                                          (26, "red"), (1, "red")])
def test_an_ended_loops_colour_is_how_it_ended_as_the_score_judges_it(project, code, colour):
    loop_mid_phase(project, RUN, T0, hold_lock=False)
    with Ledger.open(default_layout(project).ledger_file) as led:
        led.record(RUN, "loop_end", at=T0 - 1, reason="it ended", exit_code=code)
    [tile] = only(snapshot([source(project)], T0), project)["tiles"]
    assert (tile["colour"], tile["state"]) == (colour, "not_running")


def test_a_task_killed_as_stuck_stays_red_while_its_retry_starts_then_turns_green(project):
    """The watcher's verdict lasts until the phase ends, a second: the retry starts healthy. The
    tile stays red for STUCK_RED seconds after the kill, so a page that looks twice a second sees it."""
    worktree, child = child_loop(project, "t-stuck1", T0)  # its retry: healthy, in its tool call
    with Ledger.open(default_layout(worktree).ledger_file) as led:
        led.record("child-t-stuck1", "incident", at=T0 - 3, iteration=1, phase="Criticizer", id="inc-9",
                   kind="stuck", reason="no heartbeat for 600s")
    mon = fleet_running(project, T0, [task("t-stuck1", "running", T0, worktree=str(worktree), pid=os.getpid())])
    try:
        first = only(snapshot([source(project)], T0), project)
        second = only(snapshot([source(project)], T0 + 60), project)  # STUCK_RED later
    finally:
        os.close(child)
        os.close(mon)
    just_after, later = first["tiles"], second["tiles"]
    assert [(t["colour"], t["health"]) for t in just_after] == [("red", "healthy")]
    assert [t.get("stuck_at_epoch") for t in just_after] == [T0 - 3]
    assert [(t["colour"], t.get("stuck_at_epoch")) for t in later] == [("green", None)]
    # The score says why the tile is red while its health says healthy, and forgets it with the red.
    killed = [r for r in first["reasons"] if "killed as stuck" in r["why"]]
    assert [r["points"] for r in killed] == [-15] and first["score"] == second["score"] - 15, (first, second)


def test_a_path_under_home_is_shown_from_the_tilde_the_api_keeps_it_whole(project, monkeypatch):
    monkeypatch.setenv("HOME", str(project.parent))
    p = only(snapshot([source(project)], T0), project)
    assert (p["shown_path"], p["path"]) == ("~/project", str(project.resolve()))

"""Each merge's evidence (and a Temporal task's machine) on the dashboard, in a real headless Chromium at 1400 and 400 px: a task
whose first merge was red (its check's tail kept) and whose second landed green, and one whose
merge dropped another task's line. The tiles say the last merge; a task's page lists each, with
the checks as run on the merged tree, the red one's tail and the lost hunk. /api/state and the
task's /api/loop say the same."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import httpx
from helpers.browser import needs_browser, open_browser
from helpers.dashboard import first_line

from genesis.fleet.ledger import FleetLedger, TaskRow
from genesis.fleet.status import fleet_dir_of
from genesis.web.discovery import key_of

GENESIS = [sys.executable, "-m", "genesis"]
RED = {"kind": "project", "command": "make test", "exit_code": 2, "seconds": 3.0, "timed_out": False, "error": ""}
TAIL = "FAILED tests/test_health.py::test_ok"
LOST = "app.py line 3 (added by the task 'Add /health': 'ok')"


def merged_fleet(project: Path, now: float) -> None:
    fleet = fleet_dir_of(project)
    fleet.mkdir(parents=True, exist_ok=True)
    with FleetLedger.open(fleet / "ledger.sqlite3") as led:
        led.record("fleet_start", now=now - 3600, run_id="fleet-1", parallel=2, pid=1)
        led.upsert_task(TaskRow("add-health-aaaaaa", "Add /health", "merged", attempts=2, merged_sha="1" * 40,
                                created=now - 3600, updated=now - 600))
        led.record("merge_red", "add-health-aaaaaa", now=now - 1800, attempt=1, to="task",
                   reason="the project's check `make test` exited 2 (after 3s)", checks=[RED], tail=[TAIL])
        led.record("child_end", "add-health-aaaaaa", now=now - 700, attempt=2, outcome="verified", host="box-a")
        led.record("merged", "add-health-aaaaaa", now=now - 600, sha="1" * 40, commits=["a" * 40],
                   checks=[{**RED, "exit_code": 0, "seconds": 4.0}])
        led.upsert_task(TaskRow("add-ready-bbbbbb", "Add /ready", "needs-review", attempts=1, reason="lost a line",
                                created=now - 3599, updated=now - 300))
        led.record("needs_review", "add-ready-bbbbbb", now=now - 300, outcome="dropped", reason="lost", lost=[LOST])
        led.record("fleet_end", now=now - 200, exit_code=31, reason="every task is finished")


@pytest.mark.whole
@needs_browser
def test_each_merge_shows_its_evidence_on_the_tiles_and_the_tasks_page(project, tmp_path):
    now = time.time()
    merged_fleet(project, now)
    server = subprocess.Popen([*GENESIS, "serve", "--port", "0", "--project", str(project)], stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                              start_new_session=True)
    pkey = key_of(project)
    try:
        first = first_line(server)
        assert first.startswith("genesis serve: http://127.0.0.1:"), first
        url = first.split(": ", 1)[1].strip()
        state = httpx.get(url + "api/state", timeout=30).json()
        mine = next(p for p in state["projects"] if p["key"] == pkey)
        merges = {t["title"]: t["merge"] for t in mine["tiles"]}
        assert merges["Add /health"]["result"] == "green" and merges["Add /ready"] == {
            "result": "dropped", "at_epoch": round(now - 300, 3), "said": LOST}
        task = httpx.get(f"{url}api/loop/{pkey}--add-health-aaaaaa", timeout=30).json()["task"]
        assert [(m["result"], m["tail"], m["to"]) for m in task["merges"]] == [("red", [TAIL], "task"),
                                                                              ("green", [], None)]
        with open_browser() as browser:
            for width in (1400, 400):
                page = browser.page(url, width, 900)
                page.wait("document.querySelectorAll('article.tile .tile-merge').length >= 2",
                          f"the merges on the tiles at {width} px")
                said = page.value("Object.fromEntries([...document.querySelectorAll('article.tile')].map(t => "
                                  "[t.querySelector('.tile-title').textContent, "
                                  "(t.querySelector('.tile-merge .v') || {}).textContent]))")
                assert said["Add /health"] == "green, landed" and said["Add /ready"] == "dropped lines, not landed"
                # A fleet on Temporal: the machine its task ran on is its place, on its tile.
                places = page.value("[...document.querySelectorAll('article.tile .tile-place .v')]"
                                    ".map(v => v.textContent)")
                assert places == ["box-a"], places
                fit = page.value("[document.documentElement.scrollWidth, window.innerWidth]")
                assert fit[0] <= fit[1], (width, fit)
                for tid, count in (("add-health-aaaaaa", 2), ("add-ready-bbbbbb", 1)):
                    one = browser.page(f"{url}loop/{pkey}--{tid}", width, 900)
                    one.wait(f"document.querySelectorAll('#merges details').length === {count}",
                             f"{tid}'s merges at {width} px")
                    shown = one.value("[...document.querySelectorAll('#merges details')].map(d => "
                                      "[d.querySelector('summary').textContent, "
                                      "(d.querySelector('pre') || {}).textContent || ''])")
                    if tid == "add-health-aaaaaa":
                        (red, red_tail), (green, _) = shown
                        assert "red, not landed (back to its task): the project's check `make test` exited 2" \
                            in red and red_tail == TAIL, shown
                        assert "green, landed: the project's check `make test` exited 0 (after 4s)" in green, shown
                    else:
                        assert shown[0][0].endswith("dropped lines, not landed: " + LOST), shown
                    fit = one.value("[document.documentElement.scrollWidth, window.innerWidth]")
                    assert fit[0] <= fit[1], (tid, width, fit)
            assert browser.errors() == []
    finally:
        server.send_signal(signal.SIGTERM)
        server.communicate(timeout=30)

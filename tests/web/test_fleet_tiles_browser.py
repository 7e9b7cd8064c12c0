"""A fleet's tiles tell the truth, in a real headless Chromium at 1400 and 400 px: a fleet that
ended with one task home and one failed for good. Its cost is the children's (not "–"), a
failed task is red with its reason and its page lists every attempt, the score is not green,
every alert of the fleet and its children is listed, and times carry the user's zone.
`genesis serve` is started as a user starts it; /api/state says the same."""

from __future__ import annotations

import re
import signal
import sys
import subprocess
import time
from pathlib import Path

import pytest

import httpx
from helpers.browser import needs_browser, open_browser
from helpers.dashboard import alert, first_line
from helpers.git import git

from genesis.config import default_layout
from genesis.fleet.ledger import FleetLedger, TaskRow
from genesis.fleet.status import fleet_dir_of
from genesis.web.discovery import key_of

GENESIS = [sys.executable, "-m", "genesis"]
WHY = "the ladder is spent: exit 1 (the agent ended with an error) after 3 restarts"


def ended_fleet(project: Path, now: float) -> None:
    """A fleet that ended (exit 31): `add-parser` home on its first attempt ($0.0048), `never-works`
    failed for good after 4 attempts ($0.0005 each), its worktree kept."""
    git(project, "config", "user.name", "Agent")
    git(project, "config", "user.email", "agent@example.invalid")
    kept = project.parent / "worktrees" / "never-works-bbbbbb"
    git(project, "worktree", "add", "-q", "-b", "genesis/task/never-works-bbbbbb", str(kept))
    default_layout(kept).state_dir.mkdir(parents=True, exist_ok=True)
    fleet = fleet_dir_of(project)
    fleet.mkdir(parents=True, exist_ok=True)
    (fleet / "lock").touch()
    with FleetLedger.open(fleet / "ledger.sqlite3") as led:
        led.record("fleet_start", now=now - 1800, run_id="fleet-1", parallel=2, pid=1)
        led.upsert_task(TaskRow("add-parser-aaaaaa", "add the parser", "merged", attempts=1, merged_sha="a" * 40,
                                created=now - 1800, updated=now - 1200))
        a = led.begin_attempt("add-parser-aaaaaa", "start", "", "claude", "child-a", now - 1790)
        led.end_attempt("add-parser-aaaaaa", a.attempt, 0, "verified", now - 1300)
        led.record("child_end", "add-parser-aaaaaa", now=now - 1300, run_id="child-a", attempt=1, exit_code=0,
                   outcome="verified", cost_usd=0.0048, reason="")
        led.upsert_task(TaskRow("never-works-bbbbbb", "never works", "failed", attempts=4, restarts=3,
                                reason=WHY, worktree=str(kept), branch="genesis/task/never-works-bbbbbb",
                                created=now - 1799, updated=now - 600))
        for n, kind in enumerate(("start", "restart", "restart", "restart")):
            a = led.begin_attempt("never-works-bbbbbb", kind, "", "claude", f"child-b{n}", now - 1700 + n * 200)
            led.end_attempt("never-works-bbbbbb", a.attempt, 1, "failed", now - 1600 + n * 200)
            led.record("child_end", "never-works-bbbbbb", now=now - 1600 + n * 200, run_id=f"child-b{n}",
                       attempt=a.attempt, exit_code=1, outcome="failed", cost_usd=0.0005,
                       reason=f"attempt {a.attempt}: the agent ended with an error")
        led.record("failed_permanently", "never-works-bbbbbb", now=now - 600, reason=WHY)
        led.record("fleet_end", now=now - 590, exit_code=31, reason="every task is finished")
    # Its alerts, the fleet's and its children's, where their deliverers record them.
    alert(project, "child-b0", now - 1600, "task never-works-bbbbbb: Builder stuck after 0 retries, gave up")
    alert(project, "fleet-1", now - 600, "task failed permanently: never works", severity="critical")
    alert(project, "fleet-1", now - 590, "fleet ended: every task is finished", severity="high")


@pytest.mark.whole
@needs_browser
def test_a_failed_task_is_red_with_its_reason_and_every_attempt_and_the_fleet_has_its_cost(project, tmp_path):
    now = time.time()
    ended_fleet(project, now)
    server = subprocess.Popen([*GENESIS, "serve", "--port", "0", "--project", str(project)], stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                              start_new_session=True)
    try:
        first = first_line(server)
        assert first.startswith("genesis serve: http://127.0.0.1:"), first
        url = first.split(": ", 1)[1].strip()
        state = httpx.get(url + "api/state", timeout=30).json()
        mine = next(p for p in state["projects"] if p["key"] == key_of(project))
        assert mine["cost_usd"] == 0.0068  # 0.0048 + 4 x 0.0005: the ended attempts'
        assert mine["score"] < 80 and any("task failed permanently: never works" in r["why"] for r in mine["reasons"])
        failed = next(t for t in mine["tiles"] if t["title"] == "never works")
        assert (failed["colour"], failed["reason"], failed["attempts"]) == ("red", WHY, 4)
        assert len(mine["alerts"]) == 3
        assert {a["project"] for a in state["alerts"]} >= {mine["name"]}
        with open_browser() as browser:
            for width in (1400, 400):
                page = browser.page(url, width, 900)
                page.wait("document.querySelectorAll('article.tile').length >= 2", f"the tiles at {width} px")
                section = f"document.querySelector('section.project[data-key=\"{key_of(project)}\"]')"
                assert page.value(f"{section}.querySelector('.project-cost').textContent") == "$0.0068"
                assert "good" not in page.value(f"{section}.querySelector('.score-badge').className")
                red = page.value(f"[...{section}.querySelectorAll('article.tile')].filter(t => "
                                 f"t.querySelector('.tile-title').textContent === 'never works')"
                                 f".map(t => [t.dataset.colour, (t.querySelector('.tile-reason .v') || {{}})"
                                 f".textContent])")
                assert red == [["red", WHY]], red
                times = page.value("[...document.querySelectorAll('#alerts .when')].map(n => n.textContent)")  # other loops of this machine may add theirs
                assert len(times) >= 3 and all(re.search(r"\d\d:\d\d:\d\d\s*\S*[A-Za-z]", t) for t in times), times
                fit = page.value("[document.documentElement.scrollWidth, window.innerWidth]")
                assert fit[0] <= fit[1], (width, fit)
                href = page.value(f"[...{section}.querySelectorAll('article.tile a')].find(a => a.textContent === "
                                  f"'never works').getAttribute('href')")
                task = browser.page(url.rstrip("/") + href, width, 900)
                task.wait("document.querySelectorAll('#attempts li').length === 4", f"the task's attempts at {width} px")
                shown = task.value("[...document.querySelectorAll('#attempts li')].map(li => li.textContent)")
                assert [s.split(" (")[0] for s in shown] == ["start", "restart", "restart", "restart"], shown
                assert all("exit 1, failed" in s and "$0.0005" in s for s in shown), shown
                assert shown[3].endswith("attempt 4: the agent ended with an error"), shown
                assert WHY in task.value("document.querySelector('#task-reason').textContent")
                fit = task.value("[document.documentElement.scrollWidth, window.innerWidth]")
                assert fit[0] <= fit[1], (width, fit)
            assert browser.errors() == []
    finally:
        server.send_signal(signal.SIGTERM)
        server.communicate(timeout=30)

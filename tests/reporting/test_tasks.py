"""Each TASKS.md item over a run, read from the project's real git history: built, reviewed (or
sent back), verified, how many builds, and the time and cost of the phases that moved it."""

from __future__ import annotations

import dataclasses
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers.git import git
from helpers.nights import M, T0, at
from helpers.state import state_of

from genesis.cli import cli
from genesis.ledger.store import Ledger
from genesis.reporting.model import CommitRow, IterationRow, Night, PhaseRow
from genesis.reporting.tasks import MAX_ROWS, short_lines, task_history

pytestmark = pytest.mark.usefixtures("utc")

LIST = ["- [{a}] Add a /health endpoint", "- [{b}] Rate-limit the login form", "- [{c}] Paginate the order history"]


def commit_tasks(project: Path, boxes: str, subject: str) -> str:
    """TASKS.md with the three items' boxes (one character each), committed; its short sha."""
    a, b, c = boxes
    (project / "TASKS.md").write_text("# Tasks\n\n" + "\n".join(LIST).format(a=a, b=b, c=c) + "\n")
    git(project, "add", "TASKS.md")
    git(project, "commit", "-qm", subject)
    return git(project, "rev-parse", "--short", "HEAD").strip()


def a_night(project: Path, commits: list[CommitRow], phases: list[PhaseRow]) -> Night:
    return Night(run_id="r", project=str(project), started=T0, ended=at(200), reason="done", exit_code=0,
                 running=False, iterations=(IterationRow(1, T0, at(200), True, "CLOSED", 0, tuple(phases)),),
                 commits=tuple(commits))


@pytest.fixture
def history(tmp_path) -> tuple[Path, list[CommitRow], list[PhaseRow]]:
    """A run: Builder builds item 1, Criticizer sends it back, a stuck Builder and its retry build it
    again with item 2, Criticizer accepts both; item 3 is never touched."""
    project = tmp_path / "shop"
    project.mkdir()
    git(project, "init", "-q")
    commit_tasks(project, "   ", "the list before the run")
    plan = [("?  ", 1, "Builder", 0, 10), ("   ", 1, "Criticizer", 10, 20), ("?? ", 2, "Builder", 20, 60),
            ("xx ", 2, "Criticizer", 60, 70)]
    commits, phases = [], []
    for boxes, iteration, phase, start, end in plan:
        sha = commit_tasks(project, boxes, f"genesis: iteration {iteration} {phase}")
        commits.append(CommitRow(sha, at(end), f"genesis: iteration {iteration} {phase}", iteration, phase))
        phases.append(PhaseRow(iteration, phase, 0, at(start), at(end), "finished", 0, "finished", cost_usd=1.0))
    # The Builder of iteration 2 was stuck once and retried: both attempts are the items' time and cost.
    stuck = PhaseRow(2, "Builder", 0, at(20), at(30), "stuck", None, "no heartbeat", cost_usd=0.5)
    phases[2] = dataclasses.replace(phases[2], attempt=1, started=at(30))
    phases.insert(2, stuck)
    return project, commits, phases


def test_each_item_built_reviewed_and_verified_from_the_commits(history):
    project, commits, phases = history
    rows = task_history(a_night(project, commits, phases))
    assert [(r.text, r.state) for r in rows] == [("Add a /health endpoint", "done"),
                                                 ("Rate-limit the login form", "done"),
                                                 ("Paginate the order history", "open")]
    health, login, orders = rows
    assert [(s.iteration, s.phase, s.before, s.after) for s in health.steps] == [
        (1, "Builder", "open", "review"), (1, "Criticizer", "review", "open"), (2, "Builder", "open", "review"),
        (2, "Criticizer", "review", "done")]
    assert health.attempts == 2                                  # built twice: sent back once
    assert (health.built.iteration, health.built.phase, health.built.at) == (2, "Builder", at(60))
    assert (health.reviewed.phase, health.verified.phase, health.verified.at) == ("Criticizer", "Criticizer", at(70))
    # Its phases: Builder 1 (10m), Criticizer 1 (10m), Builder 2 stuck (10m) and retried (30m), Criticizer 2 (10m).
    assert health.seconds == 70 * M
    # Each phase's cost shared among the items it moved: Builder 2 and Criticizer 2 moved two.
    assert health.cost_usd == pytest.approx(1.0 + 1.0 + (0.5 + 1.0) / 2 + 1.0 / 2)
    assert login.attempts == 1 and login.seconds == 50 * M and login.cost_usd == pytest.approx(0.75 + 0.5)
    assert orders.steps == () and orders.built is None and orders.seconds is None and orders.cost_usd is None
    assert short_lines(rows) == [
        "[x] Add a /health endpoint (built 2 times; last moved by iteration 2 Criticizer)",
        "[x] Rate-limit the login form (built 1 time; last moved by iteration 2 Criticizer)"]


def test_no_history_no_rows(tmp_path, history):
    project, commits, phases = history
    assert task_history(a_night(project, [], phases)) == ()                   # a run without commits
    assert task_history(a_night(tmp_path / "gone", commits, phases)) == ()   # the project is gone
    plain = tmp_path / "plain"
    plain.mkdir()
    assert task_history(a_night(plain, commits, phases)) == ()               # not a repository
    unknown = [dataclasses.replace(c, sha="0123456789") for c in commits]
    assert task_history(a_night(project, unknown, phases)) == ()             # commits it does not have


def test_a_huge_list_is_bounded(tmp_path):
    project = tmp_path / "big"
    project.mkdir()
    git(project, "init", "-q")
    (project / "TASKS.md").write_text("".join(f"- [ ] task {i}\n" for i in range(3 * MAX_ROWS)))
    git(project, "add", "TASKS.md")
    git(project, "commit", "-qm", "list")
    (project / "TASKS.md").write_text("".join(f"- [x] task {i}\n" for i in range(3 * MAX_ROWS)))
    git(project, "commit", "-qam", "all done")
    sha = git(project, "rev-parse", "--short", "HEAD").strip()
    rows = task_history(a_night(project, [CommitRow(sha, at(5), "all done", 1, "Builder")], []))
    assert len(rows) == MAX_ROWS and all(r.state == "done" and r.attempts == 1 for r in rows)


def test_the_report_command_puts_the_task_view_on_its_page(project, tmp_path):
    """`genesis report --html` reads the run's commits from the ledger and TASKS.md from git."""
    start = time.time() - 3600
    with Ledger.open(state_of(project) / "ledger.sqlite3") as led:
        led.record("run-t", "loop_start", at=start, project=str(project), pid=4242)
        led.record("run-t", "iteration_start", at=start + 1, iteration=1)
        for n, (phase, boxes) in enumerate((("Builder", "?  "), ("Criticizer", "x  "))):
            sha = commit_tasks(project, boxes, f"genesis: iteration 1 {phase}")
            led.record("run-t", "phase_start", at=start + 10 + 100 * n, iteration=1, phase=phase,
                       epoch=start + 10 + 100 * n, attempt=0)
            led.record("run-t", "phase_end", at=start + 90 + 100 * n, iteration=1, phase=phase, status="exited",
                       ending="finished", returncode=0, detail="finished", cost_usd=0.5)
            led.record("run-t", "phase_work", at=start + 91 + 100 * n, iteration=1, phase=phase, files_changed=1,
                       commits=[{"sha": sha, "at": start + 89 + 100 * n, "subject": phase}])
        led.record("run-t", "iteration_end", at=start + 300, iteration=1, progress=True, breaker="CLOSED",
                   no_progress=0)
        led.record("run-t", "loop_end", at=start + 301, reason="done", exit_code=0)
    page = tmp_path / "night.html"
    result = CliRunner().invoke(cli, ["--project", str(project), "report", "--html", str(page)],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output

    class Cells(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.inside, self.cells = False, []

        def handle_starttag(self, tag, attrs):
            self.inside = self.inside or dict(attrs).get("id") == "tasks"
            if self.inside and tag == "td":
                self.cells.append("")

        def handle_endtag(self, tag):
            self.inside = self.inside and tag != "section"

        def handle_data(self, data):
            if self.inside and self.cells:
                self.cells[-1] += data

    parsed = Cells()
    parsed.feed(page.read_text())
    cells = [" ".join(c.split()) for c in parsed.cells]
    assert cells[:2] == ["Add a /health endpoint", "done"] and "iteration 1 Builder" in cells[2]
    assert "iteration 1 Criticizer" in cells[3] and cells[5:8] == ["1", "2m40s", "$1.00"]
    assert cells[8:10] == ["Rate-limit the login form", "open"]

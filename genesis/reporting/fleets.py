"""`genesis report --fleet FILE`: one morning report across the projects of a fleet file.

First a summary over all of them (per project: tasks, merged, failed, needing review, cost,
how its fleet ended), then each project's own fleet report (reporting/fleet.py) as
`genesis --project P report` gives it. A project where no fleet ran, or whose fleet ledger
cannot be read, is said so in its row; the others are reported all the same.
"""

from __future__ import annotations

import io
import json
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from rich.console import Console
from rich.table import Table

from genesis.config import default_layout
from genesis.fleet.status import lock_held
from genesis.ledger.store import LedgerError
from genesis.redact import redact, redact_all
from genesis.reporting.fleet import COMPLETE, FleetReport, fleet_ledger_of
from genesis.reporting.fleet import load as load_one
from genesis.reporting.fleet import plain, render_text as one_text, sections
from genesis.reporting.command import PageNotWritten
from genesis.reporting.html import CSP, CSS, _e, _section, _table
from genesis.store.atomicio import write_text
from genesis.words import money, one_line, sanitize

__all__ = ["ProjectReport", "load", "render_text", "render_html", "as_json_doc", "summary_rows", "report"]


@dataclass(frozen=True)
class ProjectReport:
    project: Path
    report: FleetReport | None      # None: no fleet ran there, or its ledger cannot be read
    error: str = ""


def load(projects: Sequence[Path], now: float | None = None) -> list[ProjectReport]:
    now = time.time() if now is None else now
    out = []
    for project in projects:
        try:
            layout = default_layout(project)
            path = fleet_ledger_of(layout.state_dir)
            if not path.is_file() or path.is_symlink():
                out.append(ProjectReport(project, None, "no fleet has run on this project"))
                continue
            out.append(ProjectReport(project, load_one(path, layout.project, lock_held(path.parent / "lock"), now)))
        except (LedgerError, sqlite3.Error, OSError, ValueError) as exc:
            out.append(ProjectReport(project, None, f"its fleet ledger cannot be read: {exc}"))
    return out


def _count(r: FleetReport, states: frozenset[str] | set[str]) -> int:
    return sum(1 for t in r.listed if t.state in states)


def summary_rows(reports: Sequence[ProjectReport]) -> list[list[str]]:
    """project (its folder's name, its path when two share one), tasks, merged, failed, needs review,
    cost, how its fleet is (one row each, then the total)."""
    rows, totals, costs = [], [0, 0, 0, 0], []
    names = [p.project.name for p in reports]
    for p in reports:
        r = p.report
        name = p.project.name if names.count(p.project.name) == 1 else str(p.project)  # the sections say the path
        if r is None:
            rows.append([name, "-", "-", "-", "-", "-", p.error])
            continue
        counts = [len(r.listed), _count(r, COMPLETE), _count(r, {"failed"}), _count(r, {"needs-review"})]
        totals = [a + b for a, b in zip(totals, counts)]
        if r.cost_usd is not None:
            costs.append(r.cost_usd)
        state = "running" if r.running else (f"ended, exit {r.exit_code if r.exit_code is not None else '?'}"
                                             if r.ended is not None else "no end recorded")
        rows.append([name, *map(str, counts), money(r.cost_usd) if r.cost_usd is not None else "-", state])
    rows.append(["all projects", *map(str, totals), money(sum(costs)) if costs else "-", ""])
    return rows


HEADERS = ["project", "tasks", "merged", "failed", "needs review", "cost", "fleet"]


def render_text(fleet_file: Path, reports: Sequence[ProjectReport], width: int = 120) -> str:
    console = Console(width=width, record=True, file=io.StringIO(), highlight=False)
    console.print(f"Genesis fleet report: {fleet_file} ({len(reports)} project(s))", soft_wrap=True)
    console.print()
    grid = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for name in HEADERS:
        grid.add_column(name, overflow="fold")
    for row in summary_rows(reports):
        grid.add_row(*(one_line(redact(cell), 200) for cell in row))
    console.print(grid)
    text = console.export_text(styles=False)
    out = "".join(sanitize(line, None).rstrip() + "\n" for line in text.splitlines())
    for p in reports:
        if p.report is not None:
            out += "\n" + "=" * 12 + f" {p.project} " + "=" * 12 + "\n\n" + one_text(p.report, width)
    return out


def render_html(fleet_file: Path, reports: Sequence[ProjectReport]) -> str:
    """One self-contained page: the summary, then each project's fleet (the night's page's style)."""
    head = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>Genesis fleets · {_e(fleet_file.name)}</title>", f"<style>{CSS}</style>", "</head><body>",
            f"<p>{_e(f'Genesis fleet report: {fleet_file} ({len(reports)} project(s))')}</p>"]
    rows = [[_e(one_line(redact(cell), 300)) for cell in row] for row in summary_rows(reports)]
    body = [_section("summary", "All projects", _table(HEADERS, rows, numeric=(1, 2, 3, 4, 5), text=(0, 6)))]
    for number, p in enumerate(reports, 1):
        if p.report is not None:
            body.append(f'<section id="project-{number}"><h2>{_e(str(p.project))}</h2>')
            body.extend(sections(p.report, prefix=f"p{number}-"))
            body.append("</section>")
    return "\n".join([*head, *body, "</body></html>\n"])


def as_json_doc(fleet_file: Path, reports: Sequence[ProjectReport]) -> dict[str, Any]:
    return {"fleet_file": str(fleet_file),
            "summary": [dict(zip(HEADERS, row)) for row in summary_rows(reports)],
            "projects": [{"project": str(p.project), "error": p.error or None,
                          "fleet": redact_all(plain(p.report)) if p.report is not None else None}
                         for p in reports]}


def report(fleet_file: Path, projects: Sequence[Path], *, as_json: bool, html_file: Path | None,
           echo: Callable[[str], None], now: float | None = None) -> None:
    """`genesis report --fleet FILE`: the text (or JSON), and the page when asked."""
    reports = load(projects, now)
    if html_file is not None:  # first: a page that cannot be written is said before any report
        try:
            html_file.parent.mkdir(parents=True, exist_ok=True)
            write_text(html_file, render_html(fleet_file, reports))
        except OSError as exc:
            raise PageNotWritten(f"cannot write the HTML report to {html_file}: {exc.strerror or exc}; choose "
                                 f"another file") from None
    if as_json:
        echo(json.dumps(as_json_doc(fleet_file, reports), indent=1, default=str))
        return
    echo(render_text(fleet_file, reports).rstrip("\n"))
    if html_file is not None:
        echo(f"HTML report: {html_file}")

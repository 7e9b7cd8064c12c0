"""`genesis report`: pick the runs, read them from the ledger, print them (text or JSON) and
write the HTML page.

A project whose latest night was a fleet's gets the fleet's report (reporting/fleet.py).
"""

from __future__ import annotations

import dataclasses
import json
import re
import sqlite3
import time
from pathlib import Path
from typing import Any, Callable

from genesis.fleet.ledger import FleetLedger
from genesis.fleet.status import lock_held
from genesis.ledger.store import LedgerError
from genesis.redact import redact_all
from genesis.reporting.fleet import fleet_ledger_of
from genesis.reporting.fleet import load as fleet_report
from genesis.reporting.fleet import plain as fleet_plain
from genesis.reporting.fleet import render_html as fleet_html
from genesis.reporting.fleet import render_text as fleet_text
from genesis.reporting.html import render_pages
from genesis.reporting.load import UnknownRun, night, open_view, pick_run
from genesis.reporting.tasks import task_history
from genesis.reporting.text import render_text, run_heading
from genesis.store.atomicio import write_text
from genesis.store.layout import Layout
from genesis.store.looplock import current_holder
from genesis.when import stamp
from genesis.words import duration

__all__ = ["report", "since_epoch", "PageNotWritten"]

AGO_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([mhd])\s*$")
UNITS = {"m": 60, "h": 3600, "d": 86400}
FORMATS = ("%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d")


def since_epoch(text: str, now: float) -> float:
    """--since: a duration back from now (90m, 12h, 2d) or a local date and time; ValueError
    says what it accepts."""
    found = AGO_RE.match(text.lower())
    if found:
        return now - float(found.group(1)) * UNITS[found.group(2)]
    for fmt in FORMATS:
        try:
            return time.mktime(time.strptime(text.strip(), fmt))
        except ValueError:
            continue
    raise ValueError(f"--since {text!r}: expected a duration back (90m, 12h, 2d) or a local date and time "
                     f"(2026-11-20 or '2026-11-20 22:00')")


def report(layout: Layout, *, run_id: str | None, since: str | None, list_runs: bool, as_json: bool,
           html_file: Path | None, echo: Callable[[str], None], now: float | None = None) -> None:
    now = time.time() if now is None else now
    after = since_epoch(since, now) if since else None
    if run_id is None and after is None and not list_runs and _fleet_is_latest(layout):
        _fleet(layout, as_json=as_json, html_file=html_file, echo=echo, now=now)
        return
    holder = current_holder(layout.loop_lock, layout.loop_record)
    with open_view(layout) as led:
        if list_runs:
            runs = led.runs(after)
            if not runs:
                raise UnknownRun(f"no Genesis run recorded in {led.path}" + (" since then" if after else ""))
            for r in runs:
                end = (f"{duration(r.ended - r.started)}, exit {r.exit_code}: {r.reason}" if r.ended is not None
                       else "running" if holder is not None and holder.run_id == r.run_id else "no end recorded")
                phases = led.query("SELECT COUNT(*), SUM(ending = 'finished') FROM phases WHERE run_id = ?",
                                   (r.run_id,))[0]
                echo(f"{r.run_id}  started {stamp(r.started)}  "
                     f"{phases[0]} phase(s), {phases[1] or 0} finished  {end}")
            return
        if run_id is None and after is not None:
            chosen = [r.run_id for r in led.runs(after)]
            if not chosen:
                raise UnknownRun(f"no Genesis run started since {stamp(after)}")
        else:
            chosen = [pick_run(led, run_id, project=layout.project)]
        # Redacted whole before any rendering: transcript tails and incidents are read from files,
        # and a ledger written by an older Genesis kept its events as they came.
        nights = [redact_all(night(led, rid, running=holder is not None and holder.run_id == rid,
                                   incidents_dir=layout.incidents_dir, now=now)) for rid in chosen]
        if html_file is not None:  # first: a page that cannot be written is said before any report
            _write_page(html_file, [(n, redact_all(task_history(n, layout.project))) for n in nights], now)
        if as_json:
            echo(json.dumps({"runs": [{**_plain(n), "events": redact_all(led.events(n.run_id))} for n in nights]},
                            indent=1, default=str))
        elif len(nights) == 1:
            echo(render_text(nights[0]).rstrip("\n"))
        else:  # each run under a heading of its own, a blank line between them
            for number, n in enumerate(nights, 1):
                echo(("\n" if number > 1 else "") + run_heading(n, number, len(nights)) + "\n")
                echo(render_text(n).rstrip("\n"))
    if html_file is not None and not as_json:
        echo(f"HTML report: {html_file}")


def _fleet_is_latest(layout: Layout) -> bool:
    """The project's latest night was a fleet's (`--parallel`): its fleet ledger holds a fleet
    that started no earlier than the project's own latest loop run (if any)."""
    path = fleet_ledger_of(layout.state_dir)
    if not path.is_file() or path.is_symlink():
        return False
    try:
        with FleetLedger.open(path, readonly=True) as fleet:
            start = fleet.last_event("fleet_start")
    except (LedgerError, sqlite3.Error, OSError):
        return True  # a fleet ran here: its report says why its ledger cannot be read
    if start is None or not layout.ledger_file.is_file():
        return True
    try:
        with open_view(layout) as led:
            runs = led.runs()
    except (UnknownRun, LedgerError, sqlite3.Error):
        return True
    return not runs or start.at >= runs[-1].started


def _fleet(layout: Layout, *, as_json: bool, html_file: Path | None, echo: Callable[[str], None],
           now: float) -> None:
    """The fleet's report: every task and the fleet's KPIs (reporting/fleet.py)."""
    r = fleet_report(fleet_ledger_of(layout.state_dir), layout.project,
                     running=lock_held(layout.state_dir / "fleet" / "lock"), now=now)
    if html_file is not None:
        try:
            html_file.parent.mkdir(parents=True, exist_ok=True)
            write_text(html_file, fleet_html(r))
        except OSError as exc:
            raise PageNotWritten(f"cannot write the HTML report to {html_file}: {exc.strerror or exc}; choose "
                                 f"another file") from None
    if as_json:
        echo(json.dumps({"fleet": redact_all(fleet_plain(r))}, indent=1, default=str))
        return
    echo(fleet_text(r).rstrip("\n"))
    if html_file is not None:
        echo(f"HTML report: {html_file}")


class PageNotWritten(RuntimeError):
    """The --html file cannot be written; the message says why."""


def _write_page(path: Path, nights: list, now: float) -> None:
    """The page, written atomically; its folder made if it is missing."""

    page = render_pages(nights, now)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, page)
    except OSError as exc:
        raise PageNotWritten(f"cannot write the HTML report to {path}: {exc.strerror or exc}; choose another "
                             f"file") from None


def _plain(n: Any) -> dict:
    data = dataclasses.asdict(n)
    cost_in, cost_out = n.tokens
    data.update(cost_usd=n.cost_usd, input_tokens=cost_in, output_tokens=cost_out,
                abnormal=len(n.abnormal), tasks_done=list(n.tasks_done),
                refuted=[{"iteration": i, "phase": p, "task": t} for i, p, t in sorted(n.refuted, key=str)],
                cost_by_iteration=[{"iteration": i, "cost_usd": cost} for i, cost in n.cost_by_iteration])
    return data

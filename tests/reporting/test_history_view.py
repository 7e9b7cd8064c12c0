"""What phases did to history, in the morning report (text and HTML) and read back from the
ledger: each change with its safety ref and whether the loop stopped; commits made off the
phase's branch called orphaned, never plain commits."""

from __future__ import annotations

import dataclasses

import pytest
from helpers.nights import T0, typical_night

from genesis.ledger.store import Ledger
from genesis.reporting.html import render_html
from genesis.reporting.load import night
from genesis.reporting.model import HistoryRow
from genesis.reporting.text import render_text

pytestmark = pytest.mark.usefixtures("utc")

TOLD = ("branch main was rewritten (now at 1234abc): 2 commit(s) no longer on it (aaaa111, bbbb222); kept by "
        "refs/genesis/phases/R/0002-Builder/heads/main")


def changed_night():
    base = typical_night()
    commits = (dataclasses.replace(base.commits[0], orphaned=True),)
    return dataclasses.replace(base, commits=commits,
                               history=(HistoryRow(T0, 2, "Builder", "rewritten", TOLD, False),))


def test_the_text_report_names_each_change_and_the_orphaned_commits():
    text = render_text(changed_night())
    assert "1 commit (1 orphaned)" in text and "1 change to history" in text
    flat = " ".join(text.split())
    assert "iteration 2 Builder: rewritten (the loop stopped)" in flat and TOLD in flat
    assert "restore" in flat and "ORPHANED" in flat


def test_the_html_report_too():
    page = render_html(changed_night())
    assert "History changed (1)" in page and "refs/genesis/phases/R/0002-Builder/heads/main" in page
    assert "<strong>orphaned</strong>" in page


def test_read_back_from_the_ledger(tmp_path):
    change = {"kind": "switched", "branch": "main", "lost": [], "lost_count": 0, "ref": "refs/genesis/phases/R/x/HEAD",
              "now": "feature"}
    with Ledger.open(tmp_path / "ledger.sqlite3") as led:
        led.record("R", "loop_start", project="/p")
        led.record("R", "phase_start", iteration=1, phase="Builder", epoch=T0)
        led.record("R", "phase_end", iteration=1, phase="Builder", status="exited", ending="finished")
        led.record("R", "phase_work", iteration=1, phase="Builder", orphaned=True,
                   commits=[{"sha": "abc1234", "at": T0, "subject": "genesis: Builder"}])
        led.record("R", "history_rewritten", iteration=1, phase="Builder", allowed=True, changes=[change])
        read = night(led, "R")
    assert read.orphaned and read.orphaned[0].sha == "abc1234"
    (row,) = read.history
    assert (row.kind, row.allowed, row.iteration) == ("switched", True, 1)
    assert "HEAD was switched from branch main to feature" in row.text

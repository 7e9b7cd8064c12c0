"""The alert's action links end to end: an alert about a fleet's task reaches a local ntfy-style
receiver with ntfy's `Actions` header and a webhook receiver with the links in its payload; each
link, used against a real `genesis serve`, acts on exactly that task once; used again it says so
and does nothing."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

import httpx
from helpers.dashboard import first_line
from helpers.git import git
from helpers.receiver import Receiver

from actions.helpers_fleet import reviewed_fleet
from genesis.alerts.notify import tell
from genesis.alerts.settings import AlertSettings
from genesis.alerts.tickets import Ticket
from genesis.config import default_layout
from genesis.fleet.ledger import FleetLedger

GENESIS = Path(sys.executable).parent / "genesis"
READY, OTHER = "add the parser", "add the printer"


def ticket(project: Path, task: str) -> Ticket:
    return Ticket(ticket_id="cd" * 16, created_at="2026-11-21T03:14:00Z", run_id="fleet-1", iteration=None,
                  phase=None, project=str(project), severity="high", cause="task needs review",
                  reasoning="a conflict the Merger could not resolve", suggested_action="approve or send it back",
                  evidence="conflict in parser.py", steps_since_success=None, stall_minutes=None, kind="fleet",
                  final=False, task=task)


def state_of(project: Path, tid: str) -> str:
    with FleetLedger.open(default_layout(project).state_dir / "fleet" / "ledger.sqlite3", readonly=True) as led:
        return led.task(tid).state


def serve(project: Path) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([str(GENESIS), "serve", "--port", "0", "--project", str(project)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    line = first_line(proc)
    found = re.search(r"(http://127\.0\.0\.1:\d+)/", line)
    assert found, line
    return proc, found.group(1)


@pytest.mark.whole
def test_ntfy_buttons_and_webhook_links_act_once_on_exactly_their_task(tmp_path):
    project, ids, _ = reviewed_fleet(tmp_path, {READY: "ready", OTHER: "ready"})
    proc, base = serve(project)
    try:
        with Receiver() as ntfy, Receiver() as hook:
            settings = AlertSettings(desktop="false", ntfy=ntfy.url + "/genesis", webhook=hook.url,
                                     actions_url=base + "/", retries=0)
            told = tell(ticket(project, ids[READY]), settings, time.monotonic() + 20)
            assert sorted(told.delivered) == ["ntfy", "webhook"], told
            [pushed], [posted] = ntfy.wait_for(1), hook.wait_for(1)
        buttons = [b.split(", ") for b in pushed.headers["Actions"].split("; ")]
        assert [(b[0], b[1], b[3], b[4]) for b in buttons] == [("http", "Approve", "method=POST", "clear=true"),
                                                               ("http", "Skip", "method=POST", "clear=true")]
        approve, skip = buttons[0][2], buttons[1][2]
        assert approve.startswith(base + "/act/") and skip.startswith(base + "/act/")
        sent = posted.json["genesis"]["actions"]
        assert [(a["action"], a["url"].startswith(base + "/act/")) for a in sent] == [("approve", True), ("skip", True)]
        assert posted.json["blocks"][-1]["type"] == "actions"
        assert {a["url"] for a in sent}.isdisjoint({approve, skip})   # each channel's links are its own

        # The phone's tap: ntfy POSTs the button's URL.
        done = httpx.post(approve, timeout=30)
        assert done.status_code == 200 and done.text.startswith(f"done: approved {READY!r}"), done.text
        assert state_of(project, ids[READY]) == "merged" and state_of(project, ids[OTHER]) == "ready"
        assert f"- [x] {READY}" in git(project, "show", "HEAD:TASKS.md")
        again = httpx.post(approve, timeout=30)
        assert again.status_code == 410 and "used already" in again.text
        # The webhook's link opens a page first (a look acts on nothing), its button then POSTs it.
        page = httpx.get(sent[1]["url"], timeout=30)
        assert page.status_code == 200 and "Skip" in page.text and state_of(project, ids[READY]) == "merged"
        late = httpx.post(sent[1]["url"], timeout=30)
        assert late.status_code == 409 and "nothing to skip" in late.text   # it was approved meanwhile
        assert state_of(project, ids[READY]) == "merged"
        # A link changed to name the other task is not one Genesis signed.
        forged = approve.replace(approve.rsplit("/", 1)[1][:12], "A" * 12)
        assert httpx.post(forged, timeout=30).status_code == 403
        assert state_of(project, ids[OTHER]) == "ready"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def test_no_links_without_the_dashboards_address_nor_for_the_loops_end(tmp_path):
    project, ids, _ = reviewed_fleet(tmp_path, {READY: "ready"})
    with Receiver() as ntfy:
        settings = AlertSettings(desktop="false", ntfy=ntfy.url, retries=0)
        tell(ticket(project, ids[READY]), settings, time.monotonic() + 20)
        tell(replace(ticket(project, ids[READY]), final=True), replace(settings, actions_url="http://127.0.0.1:1/"),
             time.monotonic() + 20)
        pushed = ntfy.wait_for(2)
    assert all("Actions" not in p.headers for p in pushed)

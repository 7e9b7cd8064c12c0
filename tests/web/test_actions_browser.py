"""The dashboard's buttons in a real headless Chromium, over a fleet with tasks waiting for review
and in the queue: without the write key the page shows none; opened once with the link `genesis
serve` prints, a click approves a branch (after a confirmation), sends one back with its note
(asked for), skips one (a dismissed confirmation does nothing) and pauses the fleet's launches,
each recorded as the dashboard's. A form on another site posting to the dashboard is refused."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from helpers.browser import needs_browser, open_browser
from helpers.dashboard import first_line, loop_mid_phase
from helpers.git import git

from actions.helpers_fleet import reviewed_fleet
from genesis.actions import inbox
from genesis.config import default_layout, resolve
from genesis.fleet.ledger import FleetLedger
from genesis.ledger.store import Ledger
from genesis.store.atomicio import write_json
from genesis.web.discovery import key_of

GENESIS = [sys.executable, "-m", "genesis"]
HOME, BACK, SKIP, KEEP = "add the parser", "add the printer", "add the cache", "add the docs"


def states(project: Path) -> dict[str, str]:
    with FleetLedger.open(default_layout(project).state_dir / "fleet" / "ledger.sqlite3", readonly=True) as led:
        return {r.text: r.state for r in led.tasks()}


def recorded(project: Path) -> list[tuple[str, str]]:
    lay = default_layout(project)
    if not lay.ledger_file.exists():
        return []
    with Ledger.open(lay.ledger_file, readonly=True) as led:
        return [(e["action"], e["source"]) for e in led.events(kinds=("action",))]


class Evil:
    """Another site: one page whose form posts an action to the dashboard as soon as it loads."""

    def __init__(self, target: str):
        page = (f'<!doctype html><form id="f" method="POST" action="{target}api/act" enctype="text/plain">'
                f'<input name=\'{{"key": "x", "action": "stop", "pad": "\' value=\'"}}\'></form>'
                f'<script>document.getElementById("f").submit()</script>').encode()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        # localhost, not 127.0.0.1: another site (a cookie of 127.0.0.1 is never this host's)
        self.url = f"http://localhost:{self.server.server_address[1]}/"


def button(key: str, action: str) -> str:
    return f'article.tile[data-key="{key}"] button[data-action="{action}"]'


@pytest.mark.whole
@needs_browser
def test_the_buttons_act_with_the_key_confirm_what_cannot_be_undone_and_a_foreign_form_is_refused(tmp_path):
    project, ids, fd = reviewed_fleet(tmp_path, {HOME: "ready", BACK: "needs-review", SKIP: "queued", KEEP: "queued"},
                                      monitor=True)
    pkey = key_of(project)
    server = subprocess.Popen([*GENESIS, "serve", "--port", "0", "--project", str(project)], stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                              start_new_session=True)
    evil = None
    try:
        url = first_line(server).split(": ", 1)[1].strip()
        act_line = first_line(server)
        assert "open once:" in act_line, act_line
        act_url = act_line.split("open once: ", 1)[1].split(" ", 1)[0]
        assert act_url.startswith(url + "?key=")
        with open_browser() as browser:
            page = browser.page(url)
            mine = f'section.project[data-key="{pkey}"]'   # (the machine's other loops are shown too)
            page.wait(f"document.querySelectorAll('{mine} article.tile').length === 4", "the four task tiles")
            assert page.value("document.body.dataset.act") == "no"
            assert page.value("document.querySelectorAll('button.act').length") == 0   # reading only

            page.page.goto(act_url, wait_until="load")
            assert page.value("location.search") == ""       # the key left the address bar (a cookie now)
            page.wait("document.body.dataset.act === 'yes'", "the write key's cookie")
            page.wait(f"document.querySelector('{button(pkey + '--' + ids[HOME], 'approve')}')", "Approve")
            answers: list[str | None] = []
            asked: list[str] = []

            def on_dialog(dialog):
                asked.append(f"{dialog.type}: {dialog.message}")
                answer = answers.pop(0)
                dialog.accept(answer) if answer is not None else dialog.dismiss()

            page.page.on("dialog", on_dialog)

            answers.append("")   # confirm: accepted
            page.page.click(button(pkey + "--" + ids[HOME], "approve"))
            page.wait("(document.getElementById('act-result').textContent || '').startsWith('approved')", "approved")
            assert asked[-1].startswith("confirm: Approve?")
            assert states(project)[HOME] == "merged" and f"- [x] {HOME}" in git(project, "show", "HEAD:TASKS.md")

            answers.append("use the stdlib tokenizer")   # prompt: the note
            page.page.click(button(pkey + "--" + ids[BACK], "send-back"))
            page.wait("(document.getElementById('act-result').textContent || '').startsWith('sent')", "sent back")
            assert asked[-1].startswith("prompt: Send back")
            assert states(project)[BACK] == "restarting"
            where = tmp_path / "worktrees" / ids[BACK]
            assert "  note: use the stdlib tokenizer\n" in git(where, "show", "HEAD:TASKS.md")

            answers.append(None)   # confirm: dismissed
            page.page.click(button(pkey + "--" + ids[SKIP], "skip"))
            assert asked[-1].startswith("confirm: Skip?") and states(project)[SKIP] == "queued"
            answers.append("")
            page.page.click(button(pkey + "--" + ids[SKIP], "skip"))
            page.wait("(document.getElementById('act-result').textContent || '').startsWith('skipped')", "skipped")
            assert states(project)[SKIP] == "failed" and states(project)[KEEP] == "queued"

            page.page.click(f'section.project[data-key="{pkey}"] > .actions button[data-action="pause"]')
            page.wait("(document.getElementById('act-result').textContent || '').includes('no more children')",
                      "paused")
            [pause] = inbox.take(default_layout(project).state_dir / "fleet" / inbox.FOLDER)
            assert (pause.action, pause.source) == ("pause", "dashboard")

            assert not browser.errors()

            # Another site's form, in the same browser: its POST goes without the SameSite=Strict cookie.
            evil = Evil(url)
            page.page.goto(evil.url, wait_until="load")
            page.wait("document.body && document.body.innerText.includes('no write key')", "the dashboard's refusal")
            assert page.value("location.href") == url + "api/act"
            assert [e.split(": error: ")[1] for e in browser.errors()] == [
                "Failed to load resource: the server responded with a status of 403 (Forbidden)"]
            assert recorded(project) == [("approve", "dashboard"), ("send-back", "dashboard"), ("skip", "dashboard"),
                                         ("pause", "dashboard")]
    finally:
        if evil is not None:
            evil.server.shutdown()
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
        os.close(fd)


@pytest.mark.whole
@needs_browser
def test_a_loops_page_stops_it_and_ends_its_wait(project, tmp_path):
    fd = loop_mid_phase(project, "run-1", time.time())
    lay = default_layout(project)
    write_json(lay.wait_file, {"run_id": "run-1", "kind": "limit", "until": time.time() + 3600, "reason": "5-hour"})
    server = subprocess.Popen([*GENESIS, "serve", "--port", "0", "--project", str(project)], stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                              start_new_session=True)
    try:
        url = first_line(server).split(": ", 1)[1].strip()
        act_url = first_line(server).split("open once: ", 1)[1].split(" ", 1)[0]
        with open_browser() as browser:
            page = browser.page(act_url)
            page.page.goto(f"{url}loop/{key_of(project)}", wait_until="load")
            page.wait("document.querySelector('#loop-actions button[data-action=\"wait-end\"]')", "End the wait")
            page.page.click('#loop-actions button[data-action="wait-end"]')
            page.wait("(document.getElementById('act-result').textContent || '').includes('end its')", "wait ended")
            page.page.click('#loop-actions button[data-action="stop"]')
            page.wait("(document.getElementById('act-result').textContent || '').includes('stop flag')", "stopped")
            assert not browser.errors()
        [asked] = inbox.take(lay.state_dir / inbox.FOLDER)
        assert (asked.action, asked.source) == ("wait-end", "dashboard")
        assert resolve(project).stop_flag.read_text() == "false\n"
        assert recorded(project) == [("wait-end", "dashboard"), ("stop", "dashboard")]
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
        os.close(fd)

"""How every view says things: one label for each way a phase can end, and one sanitizer for
the untrusted text an agent writes, whichever view shows it."""

from __future__ import annotations

import ast
import html
import io
import os
import re
import time
from pathlib import Path

from click.testing import CliRunner
from helpers.nights import at, typical_night
from helpers.state import state_of

from genesis.alerts.message import ntfy_headers, slack_payload, text, title
from genesis.alerts.tickets import ticket_for
from genesis.cli import cli
from genesis.console import say
from genesis.health.capture import Incident
from genesis.health.incidents import read_incident, write
from genesis.ledger.store import Ledger, iso
from genesis.reporting.html import render_html
from genesis.reporting.text import render_text
from genesis.status.screen import run_status
from genesis.status.view import layout_of
from genesis.store.atomicio import write_json
from genesis.store.looplock import hold
from genesis.when import zone
from genesis.words import LABELS, details, one_line, sanitize

PACKAGE = Path(__file__).resolve().parents[1] / "genesis"
NASTY = "\x1b[31mred\x1b[0m \u200eRLM\u2028next \u061c"
BIDI = "\u061c\u200e\u200f\u2028\u2029\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
RUN = "20251121T013000Z-4242"


def recorded_endings() -> set[str]:
    """Every phase-end status or ending the watcher and the loop can record, read from their
    source (whatever file it moves to): the status an End or Outcome is made with, the status
    or ending a phase_end event is given, what how_it_ended returns, and what the ledger's
    projection writes on its own."""
    found: set[str] = set()
    for path in [*(PACKAGE / "watch").rglob("*.py"), *(PACKAGE / "loop").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                given = [kw.value for kw in node.keywords if kw.arg in ("status", "ending")]
                if name in ("End", "Outcome"):
                    given += node.args[:1]
                elif not (name == "event" and node.args and getattr(node.args[0], "value", None) == "phase_end"):
                    given = []
                found |= {v.value for v in given if isinstance(v, ast.Constant) and isinstance(v.value, str)}
            if isinstance(node, ast.FunctionDef) and node.name == "how_it_ended":
                found |= {r.value.value for r in ast.walk(node) if isinstance(r, ast.Return)
                          and isinstance(r.value, ast.Constant)}
                found |= {v.value for r in ast.walk(node) if isinstance(r, ast.Return) and isinstance(r.value, ast.IfExp)
                          for v in (r.value.body, r.value.orelse) if isinstance(v, ast.Constant)}
    tables = (PACKAGE / "ledger" / "tables.py").read_text()
    found |= set(re.findall(r"ending = '(\w+)'", tables)) | set(re.findall(r"\?, '(\w+)', \?\)", tables))
    return found


def test_every_ending_the_watcher_or_the_loop_can_record_has_a_label():
    endings = recorded_endings()
    # The scan sees them all (were it blind, the check below would pass on nothing).
    assert {"exited", "stuck", "wedged", "overtime", "api_fatal", "interrupted", "not_started", "watcher_lost",
            "finished", "failed", "limit", "outage", "fatal", "running"} <= endings, endings
    assert endings <= set(LABELS), endings - set(LABELS)
    assert "stale" not in endings and "stalled" not in endings  # the state's one word is stuck


def assert_safe(shown: str) -> None:
    """The agent's words are there; nothing a terminal or a browser would act on is."""
    assert "red" in shown and "RLM" in shown and "next" in shown, shown
    assert "\x1b" not in shown and "\x9b" not in shown
    assert "[31m" not in shown and "[0m" not in shown  # no debris of the escape code either
    assert not set(shown) & set(BIDI), [hex(ord(c)) for c in set(shown) & set(BIDI)]


def test_the_sanitizer_keeps_the_text_and_drops_the_controls():
    for made in (sanitize(NASTY), one_line(NASTY), one_line(f"first line\n{NASTY}\r\nlast")):
        assert_safe(made)
    assert one_line(NASTY) == "red RLM next"
    assert one_line("a\n\tb  c\u2029d") == "a b c d"
    assert sanitize("progress 10%\rprogress 100%") == "progress 100%"  # what a terminal shows last
    assert sanitize("\x1b]0;a title\x07x") == "x" and sanitize("x" * 10, 5) == "xxxx\u2026"


def test_the_report_text_and_page_show_untrusted_text_safely(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    night = typical_night(reason=NASTY)
    assert_safe(render_text(night))
    page = render_html(night)
    assert_safe(page)
    assert_safe(html.unescape(page))


def test_status_shows_untrusted_text_safely(project):
    lay = layout_of(project)
    lay.state_dir.mkdir(parents=True, exist_ok=True)
    fd = hold(lay.loop_lock, lay.loop_record, RUN)
    try:
        with Ledger.open(lay.ledger_file) as led:
            led.record(RUN, "loop_start", at=at(0), project=str(project), pid=os.getpid())
            led.record(RUN, "iteration_start", at=at(0), iteration=1)
            led.record(RUN, "phase_start", at=at(1), iteration=1, phase="Builder", epoch=at(1), log="b.log")
            led.record(RUN, "health", at=at(5), iteration=1, phase="Builder", classification="stuck", reason=NASTY)
            led.record(RUN, "phase_end", at=at(10), iteration=1, phase="Builder", status="stuck", ending="stuck",
                       duration=540.0, detail=NASTY)
            led.record(RUN, "phase_start", at=at(11), iteration=1, phase="Builder", epoch=at(11), log="b.log",
                       attempt=1)
        lay.heartbeat_dir.mkdir(parents=True, exist_ok=True)
        write_json(lay.health_file("Builder"), {
            "run_id": RUN, "phase": "Builder", "iteration": 1, "at": iso(at(12)), "classification": "slow",
            "stall_score": 0.5, "reason": NASTY, "tool_in_flight": NASTY, "last_event": "PreToolUse Bash"})
        out = io.StringIO()
        run_status(project, out=out, clock=lambda: at(12))
    finally:
        os.close(fd)
    shown = out.getvalue()
    assert "Builder: stuck after 9m00s: red RLM next" in shown
    assert_safe(shown)


def test_incidents_show_untrusted_text_safely(project):
    directory = state_of(project) / "incidents"
    inc = Incident(at=at(10), kind="stuck", reason=NASTY, phase="Builder", iteration=1, run_id=RUN,
                   project=str(project), processes=(), ports=(), tool_in_flight={"tool": "Bash", "cmd": NASTY},
                   tool_calls=(), heartbeat=None, transcript=(NASTY,), git_status=())
    ident = write(inc, directory).stem
    assert_safe(read_incident(directory, ident))
    # An incident an older version wrote says stale: listed in today's word.
    write_json(directory / "20251121T020000Z-Criticizer-i1.json",
               {"at": at(30), "kind": "stale", "phase": "Criticizer", "iteration": 1, "reason": NASTY})
    listed = CliRunner().invoke(cli, ["--project", str(project), "incidents"], catch_exceptions=False).output
    assert_safe(listed)
    assert [line.split("  ")[2] for line in listed.splitlines()] == ["stuck", "stuck"]


def test_alerts_say_untrusted_text_safely():
    event = {"event": "phase_failed", "run_id": RUN, "at": iso(at(10)), "iteration": 1, "phase": "Builder",
             "kind": "stuck", "reason": NASTY, "retries": 1}
    ticket = ticket_for(event, f"/src/{NASTY}", env={})
    assert_safe(ticket.evidence)
    assert_safe(text(ticket, env={}))
    payload = slack_payload(ticket, env={})
    assert_safe(str(payload))
    assert_safe(title(ticket, env={}) + str(ntfy_headers(ticket, env={})))


def test_console_lines_that_quote_an_agent_are_safe(tmp_path):
    out, copy = io.StringIO(), tmp_path / "console.log"
    say(f"Builder: stuck: the tool in flight: {NASTY}", "error", stream=out, copy_to=(copy,))
    assert_safe(out.getvalue())
    assert_safe(copy.read_text())


def test_an_events_details_read_as_words_not_as_a_python_dict():
    started = 1_700_000_000.25
    said = details({"iteration": 1, "phase": "Builder", "returncode": 0, "killed": 0, "duration": 75.2,
                    "started": started, "said_done": False, "num_turns": None, "would_kill": [], "cost_usd": 0.25,
                    "commits": [{"sha": "b45aa55"}], "limit": {"kind": "five_hour", "resets_at": started},
                    "detail": f"the agent said {NASTY}"})
    clock = time.strftime("%H:%M:%S", time.localtime(started)) + " " + zone(started)  # the zone said
    assert said == (f"iteration 1, phase Builder, returncode 0, duration 1m15s, started {clock}, cost usd $0.25, "
                    f"commits 1, limit (kind five_hour, resets at {clock}), detail the agent said "
                    f"{one_line('x ' + NASTY)[2:]}")
    assert_safe(said)
    assert len(details({"text": "y" * 1000})) == len("text ") + 120  # each text cut, then the whole line
    assert len(details({f"text{n}": "y" * 200 for n in range(5)})) == 300

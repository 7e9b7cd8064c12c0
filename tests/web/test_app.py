"""The dashboard's pages and API: the shells carry the DOM contract the page script fills; the
state, a loop's page (its timeline, transcript tail and incidents, of a project's own loop and
of a fleet task's child), the metrics; and the real `genesis serve` as a user starts it: its
first line says where, `/api/state` answers over HTTP, the event stream sends a new state within
a second of a heartbeat, and SIGTERM ends it with 0."""

from __future__ import annotations

import calendar
import json
import os
import signal
import subprocess
import time
import warnings
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx
from helpers.dashboard import first_line, beat, child_loop, fleet_running, loop_mid_phase, task
from helpers.loop import GENESIS

from genesis import exitcodes
from genesis.config import default_layout
from genesis.ledger import store as ledger_store
from genesis.ledger.store import Ledger
from genesis.web import loopview
from genesis.web import server as server_module
from genesis.web.app import POLL, Hub, Settings, guarded
from genesis.web.discovery import key_of
from genesis.web.loopview import TAIL_LINES

with warnings.catch_warnings():  # the TestClient's note about httpx's next name
    warnings.simplefilter("ignore")
    from starlette.applications import Starlette
    from starlette.testclient import TestClient

T0 = float(calendar.timegm((2025, 11, 21, 1, 30, 0)))
RUN = "20251121T003000Z-4242"
PORT = 8765


def client(project: Path, now: float = T0) -> TestClient:
    return TestClient(guarded(Settings(port=PORT, projects=(project,), scan_machine=False, clock=lambda: now)),
                      base_url=f"http://127.0.0.1:{PORT}")


def test_the_pages_are_shells_with_the_dom_contract(project):
    with client(project) as c:
        overview, loop = c.get("/"), c.get(f"/loop/{key_of(project)}")
        metrics = c.get("/metrics", headers={"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"})
        assert c.get("/loop/not-a-key").status_code == 404
        assert c.get("/static/vendor/chart.umd.min.js").text.startswith("/*!\n * Chart.js v4.6.1")
        assert "MIT" in c.get("/static/vendor/LICENSE.chartjs").text
    for page in (overview, metrics, loop):
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert '<script src="/static/app.js" defer></script>' in page.text and 'data-live="no"' in page.text
    assert all(f in overview.text for f in ('id="machine-score"', 'id="alerts"', 'data-page="overview"'))
    assert all(f'id="{i}"' in loop.text for i in ("timeline", "transcript", "incidents", "evidence", "network"))
    assert f'data-key="{key_of(project)}"' in loop.text and '<pre id="transcript"' in loop.text
    for chart in ("by-agent", "by-model", "by-task", "by-project", "over-time", "retries", "retry-cost"):
        assert f'<canvas id="chart-{chart}">' in metrics.text
    assert metrics.text.index("vendor/chart.umd.min.js") < metrics.text.index("/static/app.js")


def test_a_loops_page_has_its_timeline_transcript_tail_and_incidents(project):
    lines = [f"line {i}: \x1b[1mworking\x1b[0m" for i in range(TAIL_LINES + 50)]
    fd = loop_mid_phase(project, RUN, T0, transcript="\n".join(lines) + "\n")
    try:
        with client(project) as c:
            doc = c.get(f"/api/loop/{key_of(project)}").json()
            missing = c.get(f"/api/loop/{key_of(project)}--no-such-task")
            unknown = c.get("/api/loop/p-000000000000")
    finally:
        os.close(fd)
    assert missing.status_code == 404 and unknown.status_code == 404
    assert (doc["key"], doc["title"], doc["run_id"], doc["error"]) == (key_of(project), "project", RUN, None)
    assert doc["status"]["state"] == "running" and doc["status"]["phase"]["name"] == "Criticizer"
    svg = doc["timeline"]
    assert svg.startswith('<svg class="timeline"') and 'data-phase="Criticizer"' in svg and "ending-running" in svg
    assert " style=" not in svg  # the CSP allows no style attribute: the stripes come from app.css
    assert len(doc["tail"]) == TAIL_LINES and doc["tail"][-1] == f"line {TAIL_LINES + 49}: working"
    assert doc["tail_file"].endswith(f"{RUN}/iter-0001-Criticizer.log")
    assert [(i["id"], i["kind"], i["phase"]) for i in doc["incidents"]] == [("inc-1", "stuck", "Criticizer")]


def test_a_loops_page_has_each_tasks_evidence_and_what_the_network_refused(project):
    fd = loop_mid_phase(project, RUN, T0)
    try:
        with Ledger.open(default_layout(project).ledger_file) as led:
            led.record(RUN, "task_evidence", at=T0 - 60, iteration=1, phase="Builder", task="add /health",
                       outcome="failed", why="`make test` exited 2 (after 1s)", back_to="open",
                       checks=[{"kind": "task", "command": "make test", "exit_code": 2, "seconds": 1.2}],
                       tail=["\x1b[31mFAILED\x1b[0m test_health"])
            led.record(RUN, "task_reopened", at=T0 - 59, iteration=1, phase="Builder", task="add /health", to="open")
            led.record(RUN, "network_refused", at=T0 - 58, iteration=1, phase="Builder", total=2,
                       refused=[["example.com", 443, 2]])
        with client(project) as c:
            doc = c.get(f"/api/loop/{key_of(project)}").json()
    finally:
        os.close(fd)
    assert doc["evidence"] == [{"task": "add /health", "outcome": "check failed", "command": "make test",
                                "exit_code": 2, "seconds": 1.2, "at_epoch": T0 - 60, "iteration": 1,
                                "phase": "Builder", "reopened": 1, "tail": ["FAILED test_health"]}]
    # and what the box's network refused the agent, one line
    assert doc["network"] == "network: 2 connections refused (example.com:443 x2); GENESIS_NETWORK_ALLOW adds a host"


def test_a_fleet_tasks_page_is_its_child_loops(project):
    worktree, child = child_loop(project, "t-aaaaaa", T0, transcript="child says hello\n")
    mon = fleet_running(project, T0, [task("t-aaaaaa", "running", T0, text="Add the /ready endpoint",
                                           worktree=str(worktree), pid=os.getpid())])
    try:
        with client(project) as c:
            state = c.get("/api/state").json()
            doc = c.get(f"/api/loop/{key_of(project)}--t-aaaaaa").json()
    finally:
        os.close(child)
        os.close(mon)
    assert [t["key"] for t in state["projects"][0]["tiles"]] == [f"{key_of(project)}--t-aaaaaa"]
    assert (doc["title"], doc["run_id"], doc["tail"]) == ("Add the /ready endpoint", "child-t-aaaaaa",
                                                         ["child says hello"])
    assert doc["status"]["project"] == str(worktree.resolve())


def test_the_metrics_answer_is_the_metrics_document(project):
    loop_mid_phase(project, RUN, T0, hold_lock=False)
    with client(project) as c:
        doc = c.get("/api/metrics").json()
    assert doc["schema"] == 1 and {"by", "over_time", "retry_histogram", "retry_cost_usd"} <= set(doc)
    assert [r["key"] for r in doc["by"]["project"]] == ["project"]


def _events(response: httpx.Response):
    """(event, data) of a server-sent event stream, as they come."""
    kind, data = None, []
    for line in response.iter_lines():
        if line.startswith("event: "):
            kind = line[7:]
        elif line.startswith("data: "):
            data.append(line[6:])
        elif line == "" and kind is not None:
            yield kind, json.loads("\n".join(data))
            kind, data = None, []


def test_genesis_serve_answers_over_http_streams_each_change_and_ends_on_sigterm(project, tmp_path):
    now = time.time()
    fd = loop_mid_phase(project, RUN, now)
    server = subprocess.Popen([*GENESIS, "serve", "--port", "0", "--project", str(project)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        first = first_line(server)
        assert first.startswith("genesis serve: http://127.0.0.1:") and first.endswith("/\n"), first
        url = first.split(": ", 1)[1].strip()
        with httpx.Client(base_url=url, timeout=20) as http:
            state = http.get("/api/state").json()
            assert [t["colour"] for t in state["projects"][0]["tiles"]] == ["green"]
            assert http.get("/api/state", headers={"Host": "evil.example"}).status_code == 421
            with http.stream("GET", "/api/events") as stream:
                assert stream.headers["content-type"].startswith("text/event-stream")
                events = _events(stream)
                kind, doc = next(events)
                assert kind == "state" and doc["projects"][0]["key"] == key_of(project)
                written = time.time()
                beat(project, "Criticizer", RUN, written, tool="Edit")  # the next tool call
                # The next state sent carries it, or one soon after: the server also shows the other
                # loops of this machine, and each of their moves is a state of its own.
                deadline = time.monotonic() + 60
                for kind, doc in events:
                    mine = next(p for p in doc["projects"] if p["key"] == key_of(project))
                    phase = mine["status"]["phase"]
                    if phase["heartbeat_at_epoch"] == round(written, 3) or time.monotonic() > deadline:
                        break
                assert kind == "state" and phase["heartbeat_at_epoch"] == round(written, 3)
                assert phase["heartbeat_tool"] == "Edit" and doc["generated_at_epoch"] >= written
    finally:
        os.close(fd)
        server.send_signal(signal.SIGTERM)
        out, err = server.communicate(timeout=30)
    assert server.returncode == exitcodes.OK, err
    assert "Traceback" not in err


def test_without_the_web_extra_serve_says_how_to_install_it_exit_2(tmp_path):
    hide = ("import sys; sys.modules['starlette'] = None; sys.modules['uvicorn'] = None; "
            "from genesis.cli import main; sys.argv = ['genesis', 'serve']; main()")
    result = subprocess.run([GENESIS[0], "-c", hide], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert result.returncode == exitcodes.USAGE, result.stderr
    assert "genesis serve needs the web extra: pip install 'genesis-loop[web]'" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_failure_to_read_the_machine_is_said_on_the_page_and_the_server_goes_on(project, monkeypatch):
    with client(project) as c:
        assert c.get("/api/state").json()["problems"] == []
        hub = c.app.app.state.hub

        def broken():
            raise PermissionError("no access to /proc")

        monkeypatch.setattr(hub.discovery, "sources", broken)
        hub.built = 0.0  # the document is old: the next request builds a new one
        doc = c.get("/api/state").json()
        assert doc["problems"] == ["the dashboard could not read this machine's loops: PermissionError: "
                                   "no access to /proc"]
        assert [p["key"] for p in doc["projects"]] == [key_of(project)]  # the last good one, still shown


def test_sigterm_with_a_page_open_ends_its_stream_and_the_server_cleanly(project, tmp_path):
    """A page left open must not turn a stop into tracebacks (uvicorn cancelling the stream)."""
    server = subprocess.Popen([*GENESIS, "serve", "--port", "0", "--project", str(project)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        first = first_line(server)
        assert first.startswith("genesis serve: http://127.0.0.1:"), first
        with httpx.Client(base_url=first.split(": ", 1)[1].strip(), timeout=20) as http:
            with http.stream("GET", "/api/events") as stream:
                events = _events(stream)
                kind, _doc = next(events)
                assert kind == "state"
                server.send_signal(signal.SIGTERM)  # the page still open
                for _ in events:  # until the server ends the stream
                    pass
                out, err = server.communicate(timeout=30)
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    assert server.returncode == exitcodes.OK, err
    assert "Traceback" not in err and "Cancel" not in err and "Exception in ASGI" not in err, err


def test_a_failed_start_is_exit_33_not_0(project, monkeypatch):
    @asynccontextmanager
    async def broken(_app):
        raise OSError("no access to /proc")
        yield

    monkeypatch.setattr(server_module, "guarded", lambda settings, hub=None: Starlette(lifespan=broken))
    code = server_module.serve(Settings(port=0, projects=(project,), scan_machine=False), echo=lambda _: None)
    assert code == exitcodes.SERVE_FAILED


def test_the_poller_survives_a_failed_refresh(project, capsys):
    """Anything raised while refreshing is said once; the next tick tries again."""
    hub = Hub(Settings(port=PORT, projects=(project,), scan_machine=False))
    calls = []

    async def refresh():
        calls.append(1)
        if len(calls) <= 2:
            raise RuntimeError("the disk went away")
        return {}

    hub.refresh = refresh
    hub.listeners = 1

    async def main():
        with anyio.move_on_after(POLL * 6):
            await hub.poll()

    anyio.run(main)
    assert len(calls) >= 4
    assert capsys.readouterr().err.count("the disk went away") == 1


def test_a_transcript_the_ledger_names_outside_the_log_folder_is_not_read(project, tmp_path):
    fd = loop_mid_phase(project, RUN, T0, transcript="the loop's own words\n")
    elsewhere = tmp_path / "private.txt"
    elsewhere.write_text("someone else's file\n")
    try:
        with client(project) as c:
            assert c.get(f"/api/loop/{key_of(project)}").json()["tail"] == ["the loop's own words"]
            with Ledger.open(default_layout(project).ledger_file) as led:
                led.record(RUN, "phase_start", at=T0 - 10, iteration=2, phase="Builder", epoch=T0 - 10,
                           log=str(elsewhere), attempt=0)
            assert c.get(f"/api/loop/{key_of(project)}").json()["tail"] == []
    finally:
        os.close(fd)


def test_a_secret_in_a_reason_is_redacted_in_the_timeline_and_the_loop_page(project, monkeypatch):
    """A ledger written by an older Genesis kept its events as they came: the page redacts them."""
    secret = "sk-ant-api03-" + "W" * 44
    fd = loop_mid_phase(project, RUN, T0)
    monkeypatch.setattr(ledger_store, "redact_all", lambda detail: detail)
    with Ledger.open(default_layout(project).ledger_file) as led:
        led.record(RUN, "incident", at=T0 - 60, iteration=1, phase="Criticizer", id="inc-2", kind="wedged",
                   reason=f"the agent printed {secret}")
    monkeypatch.undo()
    try:
        with client(project) as c:
            answer = c.get(f"/api/loop/{key_of(project)}")
            page = c.get(f"/loop/{key_of(project)}")
    finally:
        os.close(fd)
    assert "inc-2" in [i["id"] for i in answer.json()["incidents"]]
    assert "[redacted]" in answer.json()["timeline"]
    for text in (answer.text, page.text):
        assert secret not in text and "WWWWWWWWWWWW" not in text


def test_a_loop_page_is_read_again_only_when_its_files_changed(project, monkeypatch):
    """Each open loop page asks every second: its ledger and timeline are read once per change."""
    fd = loop_mid_phase(project, RUN, T0, transcript="one\n")
    reads = []
    real = loopview.night
    monkeypatch.setattr(loopview, "night", lambda *a, **kw: reads.append(1) or real(*a, **kw))
    try:
        with client(project) as c:
            for _ in range(3):
                assert c.get(f"/api/loop/{key_of(project)}").json()["tail"] == ["one"]
            assert len(reads) == 1
            log = default_layout(project).run_dir(RUN) / "iter-0001-Criticizer.log"
            with log.open("a") as f:
                f.write("two\n")
            assert c.get(f"/api/loop/{key_of(project)}").json()["tail"] == ["one", "two"]  # the tail: always
            beat(project, "Criticizer", RUN, T0 - 1, tool="Edit")
            c.get(f"/api/loop/{key_of(project)}")
            assert len(reads) == 2
    finally:
        os.close(fd)

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
from pathlib import Path

import httpx
from helpers.dashboard import beat, child_loop, fleet_running, loop_mid_phase, task
from helpers.loop import GENESIS

from genesis import exitcodes
from genesis.web.app import Settings, guarded
from genesis.web.discovery import key_of
from genesis.web.loopview import TAIL_LINES

with warnings.catch_warnings():  # the TestClient's note about httpx's next name
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

T0 = float(calendar.timegm((2025, 11, 21, 1, 30, 0)))
RUN = "20251121T003000Z-4242"
PORT = 8765


def client(project: Path, now: float = T0) -> TestClient:
    return TestClient(guarded(Settings(port=PORT, projects=(project,), scan_machine=False, clock=lambda: now)),
                      base_url=f"http://127.0.0.1:{PORT}")


def test_the_pages_are_shells_with_the_dom_contract(project):
    with client(project) as c:
        overview, metrics, loop = c.get("/"), c.get("/metrics"), c.get(f"/loop/{key_of(project)}")
        assert c.get("/loop/not-a-key").status_code == 404
        assert c.get("/static/vendor/chart.umd.min.js").text.startswith("/*!\n * Chart.js v4.6.1")
        assert "MIT" in c.get("/static/vendor/LICENSE.chartjs").text
    for page in (overview, metrics, loop):
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert '<script src="/static/app.js" defer></script>' in page.text and 'data-live="no"' in page.text
    assert all(f in overview.text for f in ('id="machine-score"', 'id="alerts"', 'data-page="overview"'))
    assert all(f'id="{i}"' in loop.text for i in ("timeline", "transcript", "incidents"))
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
    assert doc["tail_file"].endswith("project-c.log")
    assert [(i["id"], i["kind"], i["phase"]) for i in doc["incidents"]] == [("inc-1", "stuck", "Criticizer")]


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
        first = server.stdout.readline()
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
                for _ in range(5):  # the next state sent carries it (or one soon after, if something else moved)
                    kind, doc = next(events)
                    phase = doc["projects"][0]["status"]["phase"]
                    if phase["heartbeat_at_epoch"] == round(written, 3):
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

"""`/metrics` in Prometheus's text format (genesis/web/prometheus.py): a loop's and a fleet's
ledgers written through their own APIs, scraped through the dashboard's app and read back with
the official client's own parser; the Host check guards it as it guards every page; and a real
Prometheus server scrapes a real `genesis serve` where Debian's package is installed."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.parse
import warnings
from pathlib import Path

import httpx
import pytest
from helpers.dashboard import first_line
from helpers.git import new_repo
from helpers.loop import GENESIS
from prometheus_client.parser import text_string_to_metric_families

from genesis.web.app import Settings, guarded
from web.test_metrics import T0, fleet_night, loop_night

with warnings.catch_warnings():  # the TestClient's note about httpx's next name
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

PORT = 8765
SCRAPER = "text/plain;version=0.0.4;q=0.9,*/*;q=0.1"  # what a Prometheus server asks for, in part


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition, by name and labels, parsed by the client library."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(found: dict, name: str, **labels: str) -> float:
    return found[(name, tuple(sorted(labels.items())))]


def scrape(projects: list[Path], host: str = f"127.0.0.1:{PORT}") -> httpx.Response:
    settings = Settings(port=PORT, projects=tuple(projects), scan_machine=False, clock=lambda: T0)
    with TestClient(guarded(settings), base_url=f"http://127.0.0.1:{PORT}") as c:
        return c.get("/metrics", headers={"Accept": SCRAPER, "Host": host})


def test_a_loop_and_a_fleet_are_exposed_per_project_in_prometheus_text_format(tmp_path):
    solo, fleet = new_repo(tmp_path / "solo"), new_repo(tmp_path / "fleetproj")
    loop_night(solo)
    fleet_night(fleet, tmp_path)
    answer = scrape([solo, fleet])
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain; version=")
    found = samples(answer.text)

    # The loop: a stuck Criticizer (a stall, its agent killed), a failed Builder, a limit, 4 ended phases.
    assert value(found, "genesis_loop_stalls_total", project="solo") == 1
    assert value(found, "genesis_loop_kills_total", project="solo") == 1
    assert value(found, "genesis_loop_phases_total", project="solo", ending="finished") == 2
    assert value(found, "genesis_loop_phases_total", project="solo", ending="failed") == 1
    assert value(found, "genesis_loop_phases_total", project="solo", ending="running") == 1
    assert value(found, "genesis_loop_cost_usd_total", project="solo") == pytest.approx(1.1)
    assert value(found, "genesis_ledger_read_error", project="solo") == 0
    # The fleet: tasks by state, attempts by kind and outcome, its running child's own ledger read.
    assert value(found, "genesis_fleet_tasks", project="fleetproj", state="running") == 1
    assert value(found, "genesis_fleet_tasks", project="fleetproj", state="queued") == 2
    assert value(found, "genesis_fleet_attempts_total", project="fleetproj", kind="start", outcome="failed") == 1
    assert value(found, "genesis_fleet_attempts_total", project="fleetproj", kind="escalate",
                 outcome="verified") == 1
    assert value(found, "genesis_fleet_attempts_total", project="fleetproj", kind="start", outcome="running") == 1
    assert value(found, "genesis_fleet_task_attempts", project="fleetproj", task="beta") == 3
    assert value(found, "genesis_fleet_children_total", project="fleetproj", what="kills") == 0
    # The ledger's figures the metrics page shows: by the model each run named, what retries cost.
    assert value(found, "genesis_runs_by_model_total", model="o3", verdict="succeeded") == 2
    assert value(found, "genesis_runs_by_model_total", model="opus", verdict="failed") == 2
    assert value(found, "genesis_runs_cost_usd_by_project_total", project="fleetproj") == pytest.approx(2.75)
    assert value(found, "genesis_retries_total", kind="escalations") == 2
    assert value(found, "genesis_retry_cost_usd_total") == pytest.approx(1.4)
    assert "default" not in {dict(k[1]).get("model") for k in found}


DOC = Path(__file__).resolve().parents[2] / "docs" / "reference" / "dashboard-metrics.md"


def test_every_metric_exposed_is_documented_and_every_documented_one_exposed(tmp_path):
    solo = new_repo(tmp_path / "solo")
    loop_night(solo)
    exposed = {f.name + ("_total" if f.type == "counter" else "")
               for f in text_string_to_metric_families(scrape([solo]).text)}
    documented = set(re.findall(r"^\| `(genesis_[a-z_]+)` \|", DOC.read_text(), re.MULTILINE))
    assert exposed == documented, exposed ^ documented


def test_a_browser_gets_the_page_and_a_foreign_host_gets_nothing(tmp_path):
    solo = new_repo(tmp_path / "solo")
    loop_night(solo)
    assert scrape([solo], host="evil.example").status_code == 421
    settings = Settings(port=PORT, projects=(solo,), scan_machine=False, clock=lambda: T0)
    with TestClient(guarded(settings), base_url=f"http://127.0.0.1:{PORT}") as c:
        page = c.get("/metrics", headers={"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"})
        plain = c.get("/metrics")  # curl's */*: the exposition
    assert page.headers["content-type"].startswith("text/html") and 'data-page="metrics"' in page.text
    assert plain.headers["content-type"].startswith("text/plain") and "genesis_loop_stalls_total" in plain.text


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


PROMETHEUS = shutil.which("prometheus")


@pytest.mark.whole
@pytest.mark.skipif(PROMETHEUS is None, reason="Prometheus is not installed (Debian: apt-get install prometheus)")
def test_a_real_prometheus_scrapes_genesis_serve(tmp_path):
    solo = new_repo(tmp_path / "scraped-solo")  # a name no other test's loop has
    loop_night(solo)
    server = subprocess.Popen([*GENESIS, "serve", "--port", "0", "--project", str(solo)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    prom = None
    try:
        url = first_line(server).split(": ", 1)[1].strip()
        target = urllib.parse.urlsplit(url).netloc
        (tmp_path / "prometheus.yml").write_text(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: genesis\n"
            f"    static_configs:\n      - targets: ['{target}']\n")
        port = _free_port()
        with open(tmp_path / "prometheus.log", "wb") as log:
            prom = subprocess.Popen([PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}",
                                     f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                     f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=log)
        query = 'genesis_loop_stalls_total{project="scraped-solo"}'  # serve shows every loop on the machine
        result, deadline = [], time.monotonic() + 90
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
            while not result and time.monotonic() < deadline:
                try:
                    result = http.get("/api/v1/query", params={"query": query}).json()["data"]["result"]
                except (httpx.HTTPError, ValueError, KeyError):
                    result = []
                if not result:
                    time.sleep(1)
            targets = http.get("/api/v1/targets").json()["data"]["activeTargets"]
        assert result, (json.dumps(targets), (tmp_path / "prometheus.log").read_text()[-2000:])
        assert [(r["metric"]["project"], r["value"][1]) for r in result] == [("scraped-solo", "1")]
        assert [t["health"] for t in targets] == ["up"]
    finally:
        for proc in (prom, server):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=30)
        if server.stdout:
            server.stdout.close()
            server.stderr.close()


def test_two_projects_of_one_name_are_two_series_told_apart_by_their_path(tmp_path):
    """One label set twice would fail Prometheus's whole scrape: as the metrics' by.project does."""
    one, two = new_repo(tmp_path / "a" / "app"), new_repo(tmp_path / "b" / "app")
    loop_night(one)
    loop_night(two)
    found = samples(scrape([one, two]).text)
    stalls = {dict(labels)["project"] for name, labels in found if name == "genesis_loop_stalls_total"}
    assert stalls == {f"app ({one.resolve()})", f"app ({two.resolve()})"}, stalls
    scores = [dict(labels)["project"] for name, labels in found if name == "genesis_project_score"]
    assert sorted(scores) == sorted(stalls)

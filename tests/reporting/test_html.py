"""The HTML morning report: structure by parsing, escaping of hostile text, then the page in real headless Chromium."""

from __future__ import annotations

import dataclasses
import re
import struct
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest
from helpers.chromium import INSTALL_HINT, find_chromium, render
from helpers.nights import (HOSTILE, T0, at, many_night, midnight_night, midnight_tasks, running_night,
                           typical_night)

from genesis.reporting.html import CSP, FORENSICS_LIMIT, LEGEND, MAX_TICKS, MIN_BAR, render_html, render_pages
from genesis.reporting.model import IncidentRow, Night

pytestmark = pytest.mark.usefixtures("utc")

# Read at import: the suite's autouse fixture clears GENESIS_* before each test runs.
CHROMIUM = find_chromium()
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason=f"no headless Chromium found, browser checks skipped: "
                                                             f"{INSTALL_HINT}")
VOID = {"meta", "br", "hr", "img", "input", "link", "source", "wbr", "col", "area", "base", "embed", "track"}


@dataclasses.dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    parent: Node | None = dataclasses.field(default=None, repr=False, compare=False)
    content: list[Node | str] = dataclasses.field(default_factory=list)   # children and text, in order

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def walk(self):
        yield self
        for child in self.content:
            if isinstance(child, Node):
                yield from child.walk()

    def all(self, selector: str) -> list[Node]:
        """Elements matching `tag`, `.class` or `tag.class`."""
        tag, _, cls = selector.partition(".")
        return [n for n in self.walk() if (not tag or n.tag == tag) and (not cls or cls in n.classes)]

    def one(self, selector: str) -> Node:
        found = self.all(selector)
        assert len(found) == 1, f"{len(found)} elements match {selector}"
        return found[0]

    def text(self) -> str:
        return "".join(c.text() if isinstance(c, Node) else c for c in self.content)

    def words(self) -> str:
        return " ".join(self.text().split())


class Tree(HTMLParser):
    """A small DOM: enough to count elements and read their attributes and text."""

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.root = self.node = Node("#document", {})
        self.feed(page)
        self.close()

    def handle_starttag(self, tag, attrs):
        node = Node(tag, {k: v or "" for k, v in attrs}, self.node)
        self.node.content.append(node)
        if tag not in VOID:
            self.node = node

    def handle_startendtag(self, tag, attrs):
        self.node.content.append(Node(tag, {k: v or "" for k, v in attrs}, self.node))

    def handle_endtag(self, tag):
        node = self.node
        while node is not None and node.tag != tag:
            node = node.parent
        if node is not None and node.parent is not None:
            self.node = node.parent

    def handle_data(self, data):
        self.node.content.append(data)


def parse(page: str) -> Node:
    return Tree(page).root


def section(doc: Node, ident: str) -> Node:
    return next(n for n in doc.all("section") if n.attrs.get("id") == ident)


def rows(table: Node) -> list[list[str]]:
    return [[td.words() for td in tr.all("td")] for tr in table.one("tbody").all("tr")]


def test_the_page_is_self_contained_under_a_strict_csp():
    page = render_html(typical_night())
    doc = parse(page)
    csp = [m for m in doc.all("meta") if m.attrs.get("http-equiv") == "Content-Security-Policy"]
    assert [m.attrs["content"] for m in csp] == [CSP]
    assert CSP == "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
    assert not doc.all("script") and not doc.all("link") and not doc.all("img") and not doc.all("iframe")
    for node in doc.walk():
        for name, value in node.attrs.items():
            if name != "xmlns":
                assert "//" not in value, (node.tag, name, value)
    assert all(ref.startswith("#") for ref in re.findall(r"url\(([^)]*)\)", page))
    assert "@import" not in page


def test_one_bar_per_phase_in_its_row_coloured_by_its_ending():
    night = typical_night()
    doc = parse(render_html(night))
    svg = doc.one("svg.timeline")
    bars = svg.all("rect.phase")
    assert [(b.attrs["data-phase"], int(b.attrs["data-iteration"]), int(b.attrs["data-attempt"])) for b in bars] == \
        [(p.phase, p.iteration, p.attempt) for p in night.phases]
    assert [f"ending-{p.ending}" in b.classes for b, p in zip(bars, night.phases)] == [True] * len(bars)
    rows_y = {}
    for b in bars:
        rows_y.setdefault(b.attrs["data-phase"], set()).add(b.attrs["y"])
    assert all(len(ys) == 1 for ys in rows_y.values()) and len({y for ys in rows_y.values() for y in ys}) == 3
    stuck = bars[1]
    assert stuck.one("title").text() == ("iteration 1 Criticizer: stuck, 01:52-02:02 UTC (10m00s); $0.21: "
                                         "no heartbeat for 600s (last tool: Bash pytest -x)")
    # Time runs left to right: each bar starts where the one before it in the night ended, or later.
    xs = [float(b.attrs["x"]) for b in bars]
    assert xs == sorted(xs)


def test_waits_incidents_and_breaker_changes_are_on_the_timeline():
    doc = parse(render_html(typical_night()))
    svg = doc.one("svg.timeline")
    wait = svg.one("rect.wait")
    assert "wait-limit" in wait.classes
    assert wait.one("title").text().startswith("usage limit 02:08-05:13 UTC (3h05m): You've hit your 5-hour limit")
    builder_limit, builder_rerun = [b for b in svg.all("rect.phase") if b.attrs["data-iteration"] == "2"
                                    and b.attrs["data-phase"] == "Builder"]
    # The band spans from the limit to the rerun.
    left, right = float(wait.attrs["x"]), float(wait.attrs["x"]) + float(wait.attrs["width"])
    assert left == pytest.approx(float(builder_limit.attrs["x"]) + float(builder_limit.attrs["width"]), abs=0.11)
    assert right == pytest.approx(float(builder_rerun.attrs["x"]), abs=0.11)
    incident = svg.one("path.incident")
    assert "inc-0001" in incident.one("title").text()
    breaker = svg.one("g.breaker")
    assert "breaker-half_open" in breaker.classes and breaker.one("text").text() == "HALF_OPEN"
    assert "CLOSED → HALF_OPEN" in breaker.one("title").text()


def test_hostile_text_is_escaped_everywhere_it_shows():
    night = typical_night(reason=HOSTILE)
    evil = 'Builder" onmouseover="alert(2)'
    first = night.iterations[0]
    night = dataclasses.replace(night, project="<img src=x onerror=alert(3)>", iterations=(
        dataclasses.replace(first, phases=(dataclasses.replace(first.phases[0], phase=evil),) + first.phases[1:]),
        *night.iterations[1:]))
    page = render_html(night)
    assert "<script>alert(1)</script>" not in page and "<script" not in page
    assert "<img src=x" not in page
    doc = parse(page)
    assert not doc.all("script") and not doc.all("img")
    assert all(not name.startswith("on") for n in doc.walk() for name in n.attrs)
    assert doc.one("svg.timeline").all("rect.phase")[0].attrs["data-phase"] == evil
    # Shown, not dropped: the reader sees exactly what the agent said (escape codes aside).
    abnormal = rows(section(doc, "abnormal").one("table"))
    assert abnormal[0][4].startswith(
        '<script>alert(1)</script> [bold red]not markup[/bold red] red & "quotes"')
    assert doc.one("h1").words() == "Night of 2025-11-21 · <img src=x onerror=alert(3)>"


def test_a_running_phase_ends_at_now():
    for minutes, so_far in ((50, "14m00s"), (120, "1h24m")):
        doc = parse(render_html(running_night(), now=at(minutes)))
        svg = doc.one("svg.timeline")
        running = [b for b in svg.all("rect.phase") if "ending-running" in b.classes]
        assert len(running) == 1
        right = float(running[0].attrs["x"]) + float(running[0].attrs["width"])
        assert right == pytest.approx(float(svg.one("line.axis").attrs["x2"]), abs=0.11)
        assert float(svg.attrs["data-end"]) == at(minutes)
        assert f"({so_far}, so far)" in running[0].one("title").text()
        assert "still running" in doc.one("header").words()


def test_incident_forensics_are_in_details_escaped_and_capped():
    doc = parse(render_html(typical_night()))
    details = section(doc, "incidents").one("details")
    assert details.one("pre").text() == "process tree:\n  1234 claude\n    1240 pytest -x  <- no output for 600s\n"
    assert f"--project {typical_night().project} incidents show inc-0001" in details.words()
    huge = "</pre><script>alert(1)</script>" + "x" * 100_000
    night = dataclasses.replace(typical_night(), incidents=(IncidentRow("inc-9", at(32), 1, "Criticizer", "stuck", "r",
                                                                        forensics=huge),))
    page = render_html(night)
    assert "<script" not in page
    details = section(parse(page), "incidents").one("details")
    assert details.one("pre").text() == huge[:FORENSICS_LIMIT]
    assert f"cut: {len(huge) - FORENSICS_LIMIT:,} more characters; " in details.words()
    assert f"--project {night.project} incidents show inc-9 prints it all" in details.words()


def test_the_tables_match_the_text_report():
    doc = parse(render_html(typical_night()))
    iterations = rows(section(doc, "iterations").one("table"))
    assert iterations == [["1", "finished", "stuck finished", "skipped", "35m00s", "yes", "CLOSED", "1", "1", "$1.15"],
                          ["2", "usage limit finished", "finished", "skipped", "3h40m", "no", "CLOSED (1)", "-", "-",
                           "$0.63"],
                          ["3", "exit 2", "finished", "finished", "23m00s", "no", "HALF_OPEN (2)", "-", "-", "$0.0500"]]
    abnormal = rows(section(doc, "abnormal").one("table"))
    assert [r[:4] for r in abnormal] == [["1", "Criticizer", "stuck", "10m00s"],
                                         ["2", "Builder", "usage limit", "2m00s"],
                                         ["3", "Builder", "exited with an error (exit 2)", "13m00s"]]
    assert abnormal[0][4] == "no heartbeat for 600s (last tool: Bash pytest -x); 3 processes ended"
    assert rows(section(doc, "commits").one("table")) == [["a1b2c3d", "01:51 UTC", "Add /health endpoint",
                                                          "iteration 1 Builder"]]
    assert ["total", "$1.83"] in rows(section(doc, "cost").one("table"))
    assert rows(section(doc, "waits").one("table"))[0][:3] == ["usage limit", "02:08-05:13 UTC (3h05m)",
                                                               "iteration 2 Builder"]
    assert rows(section(doc, "breaker").one("table")) == [["06:10 UTC", "iteration 3", "CLOSED → HALF_OPEN", "2"]]
    assert rows(section(doc, "alerts").one("table"))[0][:4] == ["T-0001", "02:03 UTC", "medium", "dismiss"]
    tiles = {t.one("div.name").words(): t.one("div.value").words() for t in section(doc, "kpis").all("div.tile")}
    assert tiles == {"MTTD": "10m20s", "MTTR": "3m00s", "false-positive rate": "n/a", "retries per phase": "0.12",
                     "escalation rate": "0%"}
    assert all(t.one("div.why").words() for t in section(doc, "kpis").all("div.tile"))


def test_empty_sections_are_left_out():
    doc = parse(render_html(many_night(2)))
    assert [s.attrs["id"] for s in doc.all("section")] == ["timeline", "iterations", "cost", "kpis"]
    assert "not reported" in section(doc, "cost").words()


def test_a_night_without_phases_still_renders():
    night = Night(run_id="r", project="p", started=T0, ended=None, reason="", exit_code=None, running=True,
                  iterations=())
    doc = parse(render_html(night, now=at(5)))
    assert doc.one("svg.timeline").all("rect.phase") == []
    assert [s.attrs["id"] for s in doc.all("section")] == ["timeline", "iterations", "kpis"]


def five_hundred_phases() -> Night:
    return many_night(250, phases=("Builder", "Criticizer"))


def test_five_hundred_phases_get_thin_bars_that_stay_inside_the_plot():
    night = five_hundred_phases()
    assert len(night.phases) == 500
    page = render_html(night)
    svg = parse(page).one("svg.timeline")
    bars = svg.all("rect.phase")
    assert len(bars) == 500
    axis = svg.one("line.axis")
    left, right = float(axis.attrs["x1"]), float(axis.attrs["x2"])
    for b in bars:
        assert float(b.attrs["width"]) >= MIN_BAR
        assert left <= float(b.attrs["x"]) and float(b.attrs["x"]) + float(b.attrs["width"]) <= right + MIN_BAR
    assert len(page) < 1_000_000


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()[:24]
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", "not a PNG"
    return struct.unpack(">II", data[16:24])


@needs_chromium
@pytest.mark.parametrize("night", [typical_night(), running_night(), five_hundred_phases()],
                         ids=["typical", "running", "500-phases"])
def test_chromium_renders_the_page_without_console_errors(tmp_path, night):
    page = tmp_path / "report.html"
    page.write_text(render_html(night, now=at(50)), encoding="utf-8")
    shown = render(page, binary=CHROMIUM)
    assert shown.console == []
    dom = parse(shown.dom)
    assert len(dom.one("svg.timeline").all("rect.phase")) == len(night.phases)
    assert dom.one("h1").words().startswith("Night of 2025-11-21")


@needs_chromium
def test_chromium_screenshot_of_the_report(tmp_path):
    page = tmp_path / "report.html"
    page.write_text(render_html(typical_night()), encoding="utf-8")
    shot = tmp_path / "report.png"
    shown = render(page, screenshot=shot, binary=CHROMIUM)
    assert shown.console == []
    assert png_size(shot) == (1400, 1800)
    # A blank page of that size is about 12 KB; the report's text, bars and tiles make it far larger.
    assert 60_000 < shot.stat().st_size < 5_000_000


@needs_chromium
def test_the_console_check_catches_an_outside_reference(tmp_path):
    """The no-console-errors assertions above can fail: one outside reference is refused and logged."""
    page = tmp_path / "report.html"
    page.write_text(render_html(typical_night()).replace(
        "</body>", '<img src="https://example.invalid/pixel.png" alt=""></body>'), encoding="utf-8")
    shown = render(page, binary=CHROMIUM)
    assert len(shown.console) == 1
    assert "https://example.invalid/pixel.png" in shown.console[0]
    assert "Content Security Policy" in shown.console[0]


def test_a_phase_without_an_end_in_a_killed_loop_ends_with_the_night_not_now():
    night = running_night()
    killed = dataclasses.replace(night, running=False)
    svg = parse(render_html(killed, now=at(600))).one("svg.timeline")
    assert float(svg.attrs["data-end"]) == at(36)   # the start of the phase that never ended: the last thing known
    assert not svg.all("line.now")
    unfinished = [b for b in svg.all("rect.phase") if b.attrs["data-iteration"] == "2"]
    assert len(unfinished) == 1 and "ending-running" in unfinished[0].classes
    assert unfinished[0].one("title").text() == "iteration 2 Builder: running, 02:06-02:06 UTC (0s, no end recorded)"


def test_breaker_changes_close_in_time_put_their_states_on_two_lines():
    from genesis.reporting.model import BreakerChange

    night = typical_night()
    close = dataclasses.replace(night, breaker_changes=(BreakerChange(at(280), 3, "CLOSED", "HALF_OPEN", 2),
                                                        BreakerChange(at(280) + 1, 3, "HALF_OPEN", "OPEN", 3)))
    labels = re.findall(r'<g class="breaker breaker-(\w+)">.*?<text x="[^"]+" y="([^"]+)"', render_html(close))
    assert [state for state, _ in labels] == ["half_open", "open"]
    assert labels[0][1] != labels[1][1]  # one above the other, not over each other
    apart = dataclasses.replace(close, breaker_changes=(close.breaker_changes[0],
                                                        dataclasses.replace(close.breaker_changes[1], at=at(280) + 7200)))
    ys = re.findall(r'<g class="breaker breaker-\w+">.*?<text x="[^"]+" y="([^"]+)"', render_html(apart))
    assert len(ys) == 2 and ys[0] == ys[1]  # far apart: the same line


def test_the_legend_names_every_mark_the_timeline_draws():
    doc = parse(render_html(midnight_night()))
    svg = doc.one("svg.timeline")
    drawn = {c for n in svg.walk() for c in n.classes if c.startswith(("ending-", "wait-"))}
    drawn |= {"incident"} if svg.all("path.incident") else set()
    drawn |= {"breaker"} if svg.all("g.breaker") else set()
    legend = {c for n in doc.one("ul.legend").all("span.swatch") for c in n.classes} - {"swatch", "wait"}
    assert drawn - {"wait-label"} <= legend, drawn - legend
    assert {"wait-retry", "wait-limit", "wait-outage", "wait-cooldown", "incident", "breaker"} <= legend
    words = doc.one("ul.legend").words()
    assert "wait: retry of a stuck phase" in words and "wait: usage limit" in words
    # Every ending the model knows has its colour in the legend.
    endings = {"finished", "failed", "stuck", "limit", "outage", "interrupted", "not_started", "watcher_lost", "running"}
    assert {f"ending-{e}" for e in endings} <= {cls for cls, _ in LEGEND}


@pytest.mark.parametrize("minutes, step", [(1.1, 10), (3, 30), (8, 60), (40, 300), (150, 900), (283, 1800), (600, 3600),
                                           (16 * 60, 7200)])
def test_axis_ticks_fall_on_whole_steps_of_the_readers_clock(minutes, step):

    night = Night(run_id="r", project="p", started=T0, ended=at(minutes), reason="done", exit_code=0, running=False,
                  iterations=())
    svg = parse(render_html(night)).one("svg.timeline")
    # At least two ticks, however short the night (a compressed one lasts minutes), and no crowd.
    assert 3 <= len(svg.all("g.tick")) <= MAX_TICKS + 1
    assert int(svg.attrs["data-tick-step"]) == step
    ticks = [float(g.attrs["data-at"]) for g in svg.all("g.tick")]
    assert all(t % step == 0 for t in ticks) and ticks == sorted(ticks)
    assert all(b - a == step for a, b in zip(ticks, ticks[1:]))
    assert svg.one("text.zone").words() == "UTC"
    labels = [g.one("text").words() for g in svg.all("g.tick")]
    assert labels == [time.strftime("%H:%M:%S" if step < 60 else "%H:%M", time.gmtime(t)) for t in ticks]


def test_a_night_across_midnight_labels_the_new_day_in_the_readers_zone(monkeypatch):
    svg = parse(render_html(midnight_night())).one("svg.timeline")
    labels = [g.one("text").words() for g in svg.all("g.tick")]
    assert labels[:4] == ["22:30", "23:00", "23:30", "21 Nov"] and labels[-1] == "03:00"
    assert [g.one("text").words() for g in svg.all("g.day")] == ["21 Nov"]
    # In another reader's zone the same night reads in that zone, and the day moves with it.
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    svg = parse(render_html(midnight_night())).one("svg.timeline")
    labels = [g.one("text").words() for g in svg.all("g.tick")]
    assert labels[0] == "04:00" and "21 Nov" not in labels
    assert svg.one("text.zone").words() == "IST"


def test_each_abnormal_phase_shows_its_own_tail_its_log_and_its_alerts_why():
    night = midnight_night()
    doc = parse(render_html(night))
    blocks = section(doc, "abnormal").all("div.evidence")
    assert [b.one("h3").words() for b in blocks] == ["iteration 1 Criticizer: stuck", "iteration 2 Builder: usage limit",
                                                      "iteration 3 Builder: exited with an error (exit 2)"]
    stuck = blocks[0]
    assert stuck.one("pre").text() == ("Running the test suite to check the /health endpoint\ntool: Bash pytest -x\n"
                                       "tests/test_health.py::test_health ")
    assert "transcript: /srv/shop/.genesis/logs/20251120-223000-4f2a/001-Criticizer.log" in stuck.words()
    assert stuck.one("p.alert").words() == ("alert T-0001 (medium, dismiss): Genesis is retrying it: 1 retry left "
                                            "tonight")
    assert not blocks[1].all("p.alert") and not blocks[2].all("p.alert")  # the loop's end is no phase's alert
    assert "npm ERR! missing script: lint" in blocks[2].one("pre").text()
    alerts = rows(section(doc, "alerts").one("table"))
    assert [r[5] for r in alerts] == ["Genesis is retrying it: 1 retry left tonight", "it resolves a stall that was told",
                                      "a normal end"]
    # A ticket that names no phase, or one of another attempt, is no phase's.
    elsewhere = dataclasses.replace(night, alerts=(dataclasses.replace(night.alerts[0], phase=None),
                                                   dataclasses.replace(night.alerts[0], at=night.alerts[0].at + 120)))
    assert not section(parse(render_html(elsewhere)), "abnormal").all("p.alert")


def test_hostile_tail_and_log_are_escaped():
    night = typical_night()
    first = night.iterations[0]
    stuck = dataclasses.replace(first.phases[1], tail=(HOSTILE, "</pre><script>x</script>"), log=HOSTILE)
    night = dataclasses.replace(night, iterations=(dataclasses.replace(first, phases=(
        first.phases[0], stuck, first.phases[2])), *night.iterations[1:]))
    page = render_html(night)
    assert "<script" not in page
    block = section(parse(page), "abnormal").one("div.evidence")
    assert block.one("pre").text().startswith("<script>alert(1)</script> [bold red]not markup[/bold red] red")


def test_the_task_view_shows_each_item_built_reviewed_verified_with_time_and_cost():
    doc = parse(render_html(midnight_night(), tasks=midnight_tasks()))
    table = rows(section(doc, "tasks").one("table"))
    assert table == [
        ["Add a /health endpoint with a test", "done", "22:51 UTC iteration 1 Builder",
         "23:08 UTC iteration 1 Criticizer", "23:08 UTC iteration 1 Criticizer", "1", "37m00s", "$1.15"],
        ["Rate-limit the login form", "done", "01:49 UTC iteration 2 Builder", "01:58 UTC iteration 2 Criticizer",
         "01:58 UTC iteration 2 Criticizer", "1", "38m00s", "$0.63"],
        ["Paginate the order history", "awaiting review", "03:04 UTC iteration 4 Builder", "-", "-", "1", "35m00s",
         "$0.92"],
        ["Send a receipt by mail after checkout", "open", "-", "-", "-", "0", "-", "-"]]
    # An item's text is the project's, untrusted: shown escaped.
    page = render_html(midnight_night(), tasks=(dataclasses.replace(midnight_tasks()[0], text=HOSTILE),))
    assert "<script" not in page
    assert rows(section(parse(page), "tasks").one("table"))[0][0].startswith("<script>alert(1)</script>")
    # Without the git history, the list of ticked items stays.
    doc = parse(render_html(midnight_night()))
    assert section(doc, "tasks").one("ul.tasks")


def test_several_runs_on_one_page_each_its_own_section_and_ids_unique():
    page = render_pages([(typical_night(), ()), (midnight_night(), ())], now=at(400))
    doc = parse(page)
    runs = [s for s in doc.all("section") if "run" in s.classes]
    assert [r.attrs["id"] for r in runs] == ["run-20251121-013000-4f2a", "run-20251120-223000-4f2a"]
    assert [r.one("h1").words()[:19] for r in runs] == ["Night of 2025-11-21", "Night of 2025-11-20"]
    ids = [n.attrs["id"] for n in doc.walk() if "id" in n.attrs]
    assert len(ids) == len(set(ids))
    assert "20251121-013000-4f2a-incident-inc-0001" in ids and "20251120-223000-4f2a-incident-inc-0001" in ids
    # Each timeline's running pattern is its own.
    assert {p.attrs["id"] for p in doc.all("pattern")} == {"20251121-013000-4f2a-running", "20251120-223000-4f2a-running"}
    assert page.count("<!DOCTYPE html>") == 1 and page.count("<style>") == 1
    # One run: the page is that run's page.
    assert render_pages([(typical_night(), ())], now=at(400)) == render_html(typical_night(), now=at(400))


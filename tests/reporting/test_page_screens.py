"""The HTML report on a phone (400 px) and a desktop (1400 px), light and dark, measured in real
headless Chromium: nothing wider than the screen, a timeline whose text stays readable, dark
colours under a dark system theme, no console errors, ids unique on a page of several runs."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from helpers.chromium import INSTALL_HINT, find_chromium, measure, render
from helpers.nights import midnight_night, midnight_tasks, typical_night

from genesis.reporting.html import render_html, render_pages

pytestmark = [pytest.mark.usefixtures("utc"), pytest.mark.fault(91)]

# Read at import: the suite's autouse fixture clears GENESIS_* before each test runs.
CHROMIUM = find_chromium()
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason=f"no headless Chromium found: {INSTALL_HINT}")

# Laid out, what a reader would see: any horizontal scroll of the page, the smallest timeline
# text on screen, the narrowest cell of free text, the page's colours, every id in the DOM.
PROBE = """(() => {
  const root = document.documentElement;
  const heights = [...document.querySelectorAll('svg.timeline text')]
    .map(t => t.getBoundingClientRect().height).filter(h => h > 0);
  const cells = [...document.querySelectorAll('td.text')].filter(c => c.textContent.trim())
    .map(c => c.getBoundingClientRect().width);
  const sticking = [...document.querySelectorAll('body *')]
    .filter(e => !e.closest('.scroll, .timeline-box') && e.getBoundingClientRect().right > root.clientWidth + 0.5)
    .map(e => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '')).slice(0, 8);
  return {scroll: root.scrollWidth, client: root.clientWidth, inner: innerWidth, sticking: sticking,
          smallest_text: heights.length ? Math.min(...heights) : null,
          narrowest_text_cell: cells.length ? Math.min(...cells) : null,
          background: getComputedStyle(document.body).backgroundColor, ink: getComputedStyle(document.body).color,
          ids: [...document.querySelectorAll('[id]')].map(e => e.id)};
})()"""


def luminance(css: str) -> float:
    """0 (black) to 1 (white), from `rgb(r, g, b)`."""
    r, g, b = (int(v) / 255 for v in css[css.index("(") + 1:css.index(")")].split(",")[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def page_of(tmp_path: Path) -> Path:
    page = tmp_path / "report.html"
    page.write_text(render_html(midnight_night(), tasks=midnight_tasks()), encoding="utf-8")
    return page


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()[:24]
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", "not a PNG"
    return struct.unpack(">II", data[16:24])


@pytest.mark.whole
@needs_chromium
def test_the_page_fits_a_phone_and_a_desktop_and_its_timeline_stays_readable(tmp_path):
    page = page_of(tmp_path)
    for width in (400, 1400):
        seen = measure(page, PROBE, binary=CHROMIUM, window=f"{width},900")
        assert seen["inner"] == width
        # Nothing makes the page scroll sideways: wide tables reflow, the timeline scrolls in its own box.
        assert seen["scroll"] <= seen["client"], (width, seen)
        assert seen["sticking"] == [], (width, seen)
        # The timeline's labels keep a readable size (about 11 px type or more), whatever the width.
        assert seen["smallest_text"] is not None and seen["smallest_text"] >= 12, (width, seen)
        # Free text (a reason, a subject) is never squeezed into a sliver that makes its row a tall
        # column of single words beside empty space.
        assert seen["narrowest_text_cell"] is not None and seen["narrowest_text_cell"] >= 200, (width, seen)
        # The page itself (no measuring script) logs nothing, and its screenshot is the page.
        shot = tmp_path / f"report-{width}.png"
        assert render(page, screenshot=shot, binary=CHROMIUM, window=f"{width},1600").console == []
        assert png_size(shot) == (width, 1600) and shot.stat().st_size > 40_000   # a blank page is a few KB


@pytest.mark.whole
@needs_chromium
def test_a_dark_system_theme_gets_a_dark_page(tmp_path):
    page = page_of(tmp_path)
    light = measure(page, PROBE, binary=CHROMIUM, window="400,900")
    assert luminance(light["background"]) > 0.9 and luminance(light["ink"]) < 0.3
    for width in (400, 1400):
        dark = measure(page, PROBE, binary=CHROMIUM, window=f"{width},900", dark=True)
        assert luminance(dark["background"]) < 0.1 and luminance(dark["ink"]) > 0.7, (width, dark)
        assert dark["scroll"] <= dark["client"]
        assert render(page, binary=CHROMIUM, window=f"{width},900", dark=True).console == []


@pytest.mark.whole
@needs_chromium
def test_several_runs_on_one_page_keep_every_id_unique(tmp_path):
    page = tmp_path / "runs.html"
    page.write_text(render_pages([(typical_night(), ()), (midnight_night(), midnight_tasks())]), encoding="utf-8")
    assert render(page, binary=CHROMIUM, window="400,900").console == []
    seen = measure(page, PROBE, binary=CHROMIUM, window="400,900")
    ids = seen["ids"]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
    assert "run-20251121-013000-4f2a" in ids and "run-20251120-223000-4f2a" in ids
    assert "20251120-223000-4f2a-timeline" in ids and "20251121-013000-4f2a-timeline" in ids
    assert seen["scroll"] <= seen["client"]

"""Times on the dashboard are said in the reader's zone, in a real headless Chromium at 1400 and
400 px: the server runs in UTC, the browser in India's zone (+05:30, a zone no tick of UTC falls
on the hour of). A loop's timeline, drawn by the server, has its ticks and its zone said again
in the browser's zone; the alerts say theirs; the metrics' time axis names its zone."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import time
from zoneinfo import ZoneInfo

import pytest

from helpers.browser import needs_browser, open_browser
from helpers.dashboard import alert, first_line, loop_mid_phase

from genesis.web.discovery import key_of

GENESIS = [sys.executable, "-m", "genesis"]
ZONE = "Asia/Kolkata"
RUN = "20251121T003000Z-4242"


def label(epoch: float, seconds: bool) -> str:
    """A tick's label as the reader in ZONE reads it."""
    at = dt.datetime.fromtimestamp(epoch, ZoneInfo(ZONE))
    if (at.hour, at.minute, at.second) == (0, 0, 0):
        return f"{at.day} {at.strftime('%b')}"
    return at.strftime("%H:%M:%S" if seconds else "%H:%M")


@pytest.mark.whole
@needs_browser
def test_the_pages_say_times_in_the_browsers_zone_not_the_servers(project, tmp_path):
    now = time.time()
    # A loop that ran the hour up to twenty minutes past the reader's last midnight: its timeline
    # always has a day's tick (said "29 Nov", as the server says it) beside its times.
    midnight = dt.datetime.now(ZoneInfo(ZONE)).replace(hour=0, minute=0, second=0, microsecond=0).timestamp()
    ran_until = midnight + 20 * 60 if midnight + 20 * 60 < now else midnight - 24 * 3600 + 20 * 60
    fd = loop_mid_phase(project, RUN, ran_until, hold_lock=False)
    alert(project, RUN, now - 120, "Builder stuck")
    server = subprocess.Popen([*GENESIS, "serve", "--port", "0", "--project", str(project)], stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                              env={**os.environ, "TZ": "UTC"}, start_new_session=True)
    try:
        first = first_line(server)
        assert first.startswith("genesis serve: http://127.0.0.1:"), first
        url = first.split(": ", 1)[1].strip()
        with open_browser() as browser:
            for width in (1400, 400):
                page = browser.page(f"{url}loop/{key_of(project)}", width, 900, zone=ZONE)
                page.wait("document.querySelectorAll('#timeline g.tick').length >= 2", f"the timeline at {width} px")
                svg = "document.querySelector('#timeline svg')"
                seconds = page.value(f"Number({svg}.getAttribute('data-tick-step')) < 60")
                ticks = page.value(f"[...{svg}.querySelectorAll('g.tick')].map(g => "
                                   "[Number(g.getAttribute('data-at')), g.querySelector('text').textContent])")
                assert ticks and [text for _, text in ticks] == [label(at, seconds) for at, _ in ticks], ticks
                assert any(" " in text for _, text in ticks), ticks   # the day's tick among them
                assert page.value(f"{svg}.querySelector('text.zone').textContent") == "GMT+5:30"
                fit = page.value("[document.documentElement.scrollWidth, window.innerWidth]")
                assert fit[0] <= fit[1], (width, fit)

                overview = browser.page(url, width, 900, zone=ZONE)
                overview.wait("document.querySelectorAll('#alerts .when').length >= 1", f"the alerts at {width} px")
                when = overview.value("[...document.querySelectorAll('#alerts .when')].map(n => n.textContent)")
                said = dt.datetime.fromtimestamp(now - 120, ZoneInfo(ZONE))  # as the browser's locale writes it
                assert any(w.endswith(" GMT+5:30") and (said.strftime("%H:%M:%S") in w or said.strftime("%I:%M:%S")
                                                        in w) for w in when), when

                metrics = browser.page(f"{url}metrics", width, 900, zone=ZONE)
                axis = metrics.wait("window.Chart && Chart.getChart('chart-over-time') && "
                                    "Chart.getChart('chart-over-time').options.scales.x.title.text",
                                    f"the metrics' time axis at {width} px")
                assert axis == "time (GMT+5:30)", axis
            assert browser.errors() == []
    finally:
        if fd is not None:
            os.close(fd)
        server.send_signal(signal.SIGTERM)
        server.communicate(timeout=30)

"""A live page in the real headless Chromium, driven by Playwright's sync API.

Playwright is only the driver here: the browser is Debian's headless Chromium
(helpers/chromium.py's find_chromium()), never one Playwright downloads.

  needs_browser                      skip mark: no Chromium or no playwright, with the install hint
  open_browser()                     a context manager giving a Browser; closes every page and the browser
  Browser.page(url, width, height, zone)   a Page at that viewport size (and zone), its console and errors
  Page.wait(js, what, timeout)       the value of a JavaScript expression once it is truthy, or fail saying what
  Page.value(js)                     a JavaScript expression's value now
  Page.shot(path)                    a PNG of the viewport (full_page=True: the whole page)
  Page.errors()                      every console error and uncaught page error so far
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import pytest
from helpers.chromium import INSTALL_HINT, find_chromium

try:
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import sync_playwright
except ImportError:  # the test extra is not installed
    sync_playwright = None
    PlaywrightError = Exception

__all__ = ["Browser", "Page", "needs_browser", "open_browser", "CHROMIUM", "FLAGS"]

CHROMIUM = find_chromium()
FLAGS = ("--no-sandbox", "--disable-gpu", "--hide-scrollbars")
POLL = 0.1
LAUNCH_TIMEOUT_MS = 60_000

needs_browser = pytest.mark.skipif(
    CHROMIUM is None or sync_playwright is None,
    reason=("no headless Chromium found: " + INSTALL_HINT if CHROMIUM is None
            else "playwright is not installed: pip install -e '.[test]' (the driver only; never `playwright install`)"))


@dataclass
class Page:
    """One tab: the Playwright page and what it said on its console."""
    page: Any
    console: list[str] = field(default_factory=list)        # "type: text" of every console message
    page_errors: list[str] = field(default_factory=list)    # uncaught exceptions

    def value(self, js: str) -> Any:
        return self.page.evaluate(js)

    def wait(self, js: str, what: str, timeout: float = 15.0) -> Any:
        """The value of `js` once it is truthy, polled until `timeout` seconds have passed."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while True:
            try:
                last = self.page.evaluate(js)
                if last:
                    return last
            except PlaywrightError as exc:  # a navigation under way: look again
                last = exc
            if time.monotonic() >= deadline:
                raise AssertionError(f"waited {timeout:g}s for {what}: `{js}` was {last!r}; "
                                     f"console: {self.console[-10:]}; page errors: {self.page_errors[-5:]}")
            time.sleep(POLL)

    def shot(self, path: Path, full_page: bool = False) -> Path:
        self.page.screenshot(path=str(path), full_page=full_page)
        return path

    def errors(self) -> list[str]:
        return [c for c in self.console if c.startswith("error:")] + [f"pageerror: {e}" for e in self.page_errors]


class Browser:
    def __init__(self, browser: Any):
        self.browser = browser
        self.pages: list[Page] = []

    def page(self, url: str, width: int = 1280, height: int = 900, zone: str | None = None) -> Page:
        """A new tab at `url` with a viewport of width x height CSS pixels (in the time zone
        `zone`, an IANA name, else the machine's), loaded."""
        raw = self.browser.new_page(viewport={"width": width, "height": height},
                                    **({"timezone_id": zone} if zone else {}))
        seen = Page(raw)
        raw.on("console", lambda m: seen.console.append(f"{m.type}: {m.text}"))
        raw.on("pageerror", lambda e: seen.page_errors.append(str(e)))
        raw.goto(url, wait_until="load")
        self.pages.append(seen)
        return seen

    def errors(self) -> list[str]:
        """Every console error and page error of every page opened."""
        return [f"{p.page.url}: {e}" for p in self.pages for e in p.errors()]


@contextmanager
def open_browser() -> Iterator[Browser]:
    """Debian's headless Chromium under Playwright; closed (every process of it) on the way out."""
    if CHROMIUM is None or sync_playwright is None:
        pytest.skip(f"no headless Chromium or no playwright: {INSTALL_HINT}")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=list(FLAGS), timeout=LAUNCH_TIMEOUT_MS)
        try:
            yield Browser(browser)
        finally:
            browser.close()

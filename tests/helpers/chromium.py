"""Headless Chromium for the tests: load a page, return its DOM and every console message it logged.

Chromium logs console messages to stderr, CSP violations included, as
    [pid:tid/time:INFO:CONSOLE:3] "message", source: file:///page.html (3)
so a page that references anything outside itself under a strict CSP shows up here.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Rendered", "find_chromium", "render", "measure", "INSTALL_HINT", "NAMES", "DARK"]

NAMES = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")
INSTALL_HINT = "apt-get install chromium-headless-shell (or set GENESIS_CHROMIUM to a Chromium binary)"
TIMEOUT = 60.0
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0")
WINDOW = "1400,1800"
DARK = "--blink-settings=preferredColorScheme=0"   # the page is seen as under a dark system theme
# What measure() writes into the DOM: the script runs after the page laid out, under a CSP that allows it.
_MEASURED = re.compile(r'<meta name="genesis-measured" content="([^"]*)">')
# A message may span lines; it ends at the `", source: ` Chromium appends.
_CONSOLE = re.compile(r'^\[[^\]\n]*:CONSOLE[^\]\n]*\] "(.*?)", source: ', re.S | re.M)


@dataclass(frozen=True)
class Rendered:
    dom: str
    console: list[str]


def find_chromium() -> str | None:
    """GENESIS_CHROMIUM when set (a name on PATH or a path), else the first of NAMES on PATH."""
    chosen = os.environ.get("GENESIS_CHROMIUM")
    if chosen:
        return shutil.which(chosen)
    return next((path for path in map(shutil.which, NAMES) if path), None)


def console_messages(stderr: str) -> list[str]:
    return _CONSOLE.findall(stderr)


def _run(argv: list[str], home: str, timeout: float) -> tuple[str, str]:
    """Run Chromium in its own session so a hang ends with every process it started."""
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, env={**os.environ, "HOME": home})
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[0]} exited with {proc.returncode}: {err[-2000:]}")
    return out, err


def render(page: Path, screenshot: Path | None = None, binary: str | None = None,
           timeout: float = TIMEOUT, window: str = WINDOW, dark: bool = False) -> Rendered:
    """The page's DOM after loading and its console messages; with `screenshot`, a PNG of it too.

    `binary` defaults to find_chromium(); pass the one found at import where a fixture clears the environment.
    `window`: "width,height" of the window (and of the screenshot); `dark`: a dark system theme.
    """
    binary = binary or find_chromium()
    if binary is None:
        raise FileNotFoundError(f"no Chromium found: {INSTALL_HINT}")
    url = page.resolve().as_uri()
    with tempfile.TemporaryDirectory(prefix="genesis-chromium-") as scratch:
        base = [binary, *FLAGS, f"--user-data-dir={scratch}/profile", f"--window-size={window}",
                *([DARK] if dark else [])]
        dom, err = _run([*base, "--dump-dom", url], scratch, timeout)
        console = console_messages(err)
        if screenshot is not None:
            _, err = _run([*base, f"--screenshot={screenshot}", "--hide-scrollbars", url], scratch, timeout)
            console += console_messages(err)
    return Rendered(dom, console)


def measure(page: Path, script: str, binary: str | None = None, window: str = WINDOW, dark: bool = False,
            timeout: float = TIMEOUT) -> object:
    """What `script` (a JavaScript expression) evaluates to in the laid-out page, as JSON.

    The page's own CSP refuses every script, so a copy of it is measured: the same page with
    `script-src 'unsafe-inline'` added and one script at its end that writes the value into the DOM.
    Check console errors on the page itself (render), not on this copy.
    """
    text = page.read_text(encoding="utf-8")
    if "default-src 'none';" not in text or "</body>" not in text:
        raise ValueError(f"{page}: not a page with a CSP and a body to measure")
    probe = ("<script>(function(){var m=document.createElement('meta');m.name='genesis-measured';"
             f"m.content=JSON.stringify(({script}));document.head.appendChild(m);}})();</script>")
    copy = page.with_name(page.stem + ".measured.html")
    copy.write_text(text.replace("default-src 'none';", "default-src 'none'; script-src 'unsafe-inline';", 1)
                    .replace("</body>", probe + "</body>", 1), encoding="utf-8")
    try:
        shown = render(copy, binary=binary, window=window, dark=dark, timeout=timeout)
    finally:
        copy.unlink()
    found = _MEASURED.search(shown.dom)
    if found is None:
        raise RuntimeError(f"the measuring script wrote nothing; console: {shown.console}")
    return json.loads(html.unescape(found.group(1)))

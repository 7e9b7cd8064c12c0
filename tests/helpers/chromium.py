"""Headless Chromium for the tests: load a page, return its DOM and every console message it logged.

Chromium logs console messages to stderr, CSP violations included, as
    [pid:tid/time:INFO:CONSOLE:3] "message", source: file:///page.html (3)
so a page that references anything outside itself under a strict CSP shows up here.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Rendered", "find_chromium", "render", "INSTALL_HINT", "NAMES"]

NAMES = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")
INSTALL_HINT = "apt-get install chromium-headless-shell (or set GENESIS_CHROMIUM to a Chromium binary)"
TIMEOUT = 60.0
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0")
WINDOW = "1400,1800"
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
           timeout: float = TIMEOUT) -> Rendered:
    """The page's DOM after loading and its console messages; with `screenshot`, a PNG of it too.

    `binary` defaults to find_chromium(); pass the one found at import where a fixture clears the environment.
    """
    binary = binary or find_chromium()
    if binary is None:
        raise FileNotFoundError(f"no Chromium found: {INSTALL_HINT}")
    url = page.resolve().as_uri()
    with tempfile.TemporaryDirectory(prefix="genesis-chromium-") as scratch:
        base = [binary, *FLAGS, f"--user-data-dir={scratch}/profile"]
        dom, err = _run([*base, "--dump-dom", url], scratch, timeout)
        console = console_messages(err)
        if screenshot is not None:
            _, err = _run([*base, f"--screenshot={screenshot}", f"--window-size={WINDOW}", "--hide-scrollbars", url],
                          scratch, timeout)
            console += console_messages(err)
    return Rendered(dom, console)

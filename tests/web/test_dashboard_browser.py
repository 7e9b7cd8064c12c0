"""The served dashboard in a real headless Chromium, over a running fleet on two projects.

`genesis serve --port 0 --fleet fleet.toml` is started as a user starts it (its URL from its
first line) while `start-multi-agent-loop.sh --fleet fleet.toml` runs two projects' tasks
under one monitor: real child loops (bash loop, companion, watcher, the default box) with a
scripted agent (helpers/fleet.py's, extended). Each task's agent prints a line and fires the
real heartbeat hook with a Bash command every half second while GATES/<task id> exists; the
agent of "hang forever" ignores SIGTERM and hangs silent, so its watcher kills it as stuck (a
5 s window, a 3 s grace) on every attempt. The page is read through the DOM contract:
`article.tile[data-colour]` in `section.project[data-key]`, `body[data-live]`, `#transcript`,
`body[data-charts]`.

With GENESIS_DASHBOARD_SCREENSHOT=PATH the overview's screenshots are kept: PATH (1280 px
wide) and PATH's name with `-phone` (400 px), as docs/dashboard.png and docs/dashboard-phone.png.
"""

from __future__ import annotations

import hashlib
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest
from helpers.browser import Browser, Page, needs_browser, open_browser
from helpers.fleet import fleet_env, fleet_project, task_agent
from helpers.git import new_repo
from helpers.loop import LOOP
from helpers.waits import wait_for

from genesis import exitcodes
from genesis.fleet.taskref import task_id
from genesis.health.heartbeat import hook_script
from genesis.ledger.store import Ledger, LedgerError
from genesis.store.layout import state_dir_of

SCREENSHOT = os.environ.get("GENESIS_DASHBOARD_SCREENSHOT")  # where to keep the overview's screenshots (docs/)
GENESIS = Path(sys.executable).parent / "genesis"
XSS = "<img src=x onerror=window.__pwned=1>"
HANG = "hang forever"
DONE_SOON = "add the parser"
ALPHA = [DONE_SOON, HANG, XSS]                                  # parallel = 3: all three run
BETA = ["add the printer", "add the cache", "add the docs"]     # parallel = 2: the third waits its turn

# Works on $GENESIS_TASK while its gate is there: a line of output and a heartbeat naming a Bash
# command (the task's own text) every half second; then its file and its task ticked. The agent
# of HANG hangs instead, deaf to SIGTERM and silent: stuck, and killed as such.
AGENT = r"""#!/usr/bin/env bash
set -euo pipefail
if [[ ${GENESIS_TASK} == "hang forever" ]]; then
  trap '' TERM
  sleep 300
fi
n=0
while [[ -e ${GATES}/${GENESIS_TASK_ID} ]]; do
  n=$((n + 1))
  printf 'step %d: %s\n' "${n}" "${GENESIS_TASK}"
  printf '{"hook_event_name":"PreToolUse","tool_name":"Bash","session_id":"s-%s","tool_input":{"command":"%s"}}' \
    "${n}" "${GENESIS_TASK}" | bash "${BEAT_HOOK}"
  sleep 0.5
done
printf '%s\n' "${GENESIS_TASK}" >"work-${GENESIS_TASK_ID}.txt"
"${PY}" - <<'PY'
import os
text = os.environ["GENESIS_TASK"]
lines = open("TASKS.md").read().splitlines(keepends=True)
out = [line.replace("[ ]", "[x]", 1) if line.rstrip("\n").endswith(text) and "[ ]" in line else line for line in lines]
open("TASKS.md", "w").write("".join(out))
PY
"""

# Set once the overview has loaded: every colour each tile took (a MutationObserver, so a red
# between two looks is not missed) and a marker a reload or a navigation would lose.
WATCH = """() => {
  window.__loaded = 'marker-' + Math.random();
  window.__colours = {};
  const note = () => {
    for (const tile of document.querySelectorAll('article.tile')) {
      const key = tile.dataset.key, colour = tile.dataset.colour;
      const seen = window.__colours[key] || (window.__colours[key] = []);
      if (!seen.length || seen[seen.length - 1][0] !== colour) seen.push([colour, Date.now() / 1000]);
    }
  };
  note();
  new MutationObserver(note).observe(document.body, {subtree: true, childList: true, attributes: true,
                                                      attributeFilter: ['data-colour']});
  return window.__loaded;
}"""
# Every canvas of the metrics page: its id and how many of its pixels were drawn.
INKED = """() => [...document.querySelectorAll('canvas')].map(c => {
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  let n = 0;
  for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++;
  return [c.id, n];
})"""
CHARTS = ["chart-by-agent", "chart-by-model", "chart-by-task", "chart-by-project", "chart-over-time",
          "chart-retries", "chart-retry-cost"]
UNTOUCHED = "document.querySelector('img[src=\"x\"]') === null && window.__pwned === undefined"


def key_of(project: Path) -> str:
    """A project's key in the page (section.project[data-key]) and its URLs."""
    return "p-" + hashlib.sha256(str(project.resolve()).encode()).hexdigest()[:12]


def serve(*args: str, log: Path, home: Path | None = None) -> tuple[subprocess.Popen, str]:
    """`genesis serve ARGS` as a user starts it, and the URL its first line gives (home: its
    HOME, so the pages show the projects' paths from `~`)."""
    out = open(log, "ab")
    env = {**os.environ, "HOME": str(home)} if home is not None else None
    proc = subprocess.Popen([str(GENESIS), "serve", *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=out, start_new_session=True, env=env)
    out.close()
    first: queue.Queue[bytes] = queue.Queue()
    threading.Thread(target=lambda: first.put(proc.stdout.readline()), daemon=True).start()
    try:
        line = first.get(timeout=30).decode(errors="replace").strip()
    except queue.Empty:
        line = ""
    if not line.startswith("genesis serve: http://127.0.0.1:"):
        stop(proc)
        raise AssertionError(f"genesis serve's first line was {line!r}: {log.read_text()[-2000:]}")
    return proc, line.split(": ", 1)[1]


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> int:
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode


def tile(project: Path, text: str) -> str:
    """A JavaScript expression: the tile of `project`'s task `text` (null while not drawn)."""
    return (f"[...document.querySelectorAll('section.project[data-key=\"{key_of(project)}\"] article.tile')]"
            f".find(t => (t.querySelector('.tile-title') || {{}}).textContent === {text!r})")


def colour(page: Page, project: Path, text: str) -> str | None:
    return page.value(f"(() => {{ const t = {tile(project, text)}; return t ? t.dataset.colour : null; }})()")


def wait_colour(page: Page, project: Path, text: str, want: str, timeout: float = 30.0) -> None:
    page.wait(f"(() => {{ const t = {tile(project, text)}; return t && t.dataset.colour === {want!r}; }})()",
              f"{project.name}'s tile {text!r} to turn {want} (it is {colour(page, project, text)})", timeout)


def stuck_kills(worktree: Path) -> list[float]:
    """When the child's watcher killed its agent as stuck: its ledger's stuck incidents."""
    path = state_dir_of(worktree) / "ledger.sqlite3"
    try:
        with Ledger.open(path, readonly=True) as led:
            return [e["epoch"] for e in led.events(kinds=["incident"]) if e.get("kind") == "stuck"]
    except (LedgerError, OSError):
        return []


def api_tile(url: str, project: Path, text: str) -> dict | None:
    """The tile /api/state gives for `project`'s task `text`."""
    state = httpx.get(url + "api/state", timeout=30).json()
    return next((t for p in state["projects"] if p["key"] == key_of(project) for t in p["tiles"]
                 if t["title"] == text), None)


def worktree_of(state: dict, project: Path, text: str) -> Path | None:
    for p in state["projects"]:
        if Path(p["path"]).resolve() == project.resolve():
            for t in (p.get("fleet") or {}).get("tasks") or []:
                if t["text"] == text and t.get("worktree"):
                    return Path(t["worktree"])
    return None


@pytest.fixture
def fleets(tmp_path):
    """Two projects under one monitor (fleet.toml) running the gated agent, every task's gate
    closed; interrupted at the end (Ctrl-C: every child tree reaped)."""
    gates = tmp_path / "gates"
    gates.mkdir()
    for text in ALPHA + BETA:
        (gates / task_id(text)).touch()
    alpha = fleet_project(new_repo(tmp_path / "alpha"), ALPHA)
    beta = fleet_project(new_repo(tmp_path / "beta"), BETA)
    fleet = tmp_path / "fleet.toml"
    fleet.write_text('[[project]]\npath = "alpha"\nparallel = 3\n\n[[project]]\npath = "beta"\nparallel = 2\n')
    agent = task_agent(tmp_path / "agent.sh", AGENT)
    env = fleet_env(GATES=str(gates), BEAT_HOOK=str(hook_script()), KILL_GRACE_SECONDS="3")
    log = open(tmp_path / "fleet.log", "ab")
    monitor = subprocess.Popen(["bash", str(LOOP), "--fleet", str(fleet), "--agent-cmd", f"bash {agent}",
                                "--set", "GENESIS_PHASES=Builder"], env=env, stdin=subprocess.DEVNULL, stdout=log,
                               stderr=log, start_new_session=True)
    log.close()
    try:
        yield alpha, beta, fleet, gates
    finally:
        stop(monitor, signal.SIGINT)


@pytest.mark.whole
@needs_browser
def test_the_dashboard_shows_two_projects_fleets_live_in_a_real_browser(fleets, tmp_path):
    alpha, beta, fleet, gates = fleets
    server, url = serve("--port", "0", "--fleet", str(fleet), log=tmp_path / "serve.log", home=tmp_path)
    try:
        with open_browser() as browser:
            watch(browser, url, alpha, beta, gates, tmp_path)
    finally:
        code = stop(server)  # asserted after: a failure above is the one to see
    assert code == exitcodes.OK, (tmp_path / "serve.log").read_text()[-2000:]


def watch(browser: Browser, url: str, alpha: Path, beta: Path, gates: Path, tmp_path: Path) -> None:
    overview = browser.page(url, 1280, 900)
    marker = overview.value(WATCH)
    overview.wait("document.body.dataset.live === 'yes'", "the event stream to connect")

    # Every task's tile, coloured by what its child does: running and healthy, or waiting its turn.
    for text in [DONE_SOON, XSS, "add the printer", "add the cache"]:
        wait_colour(overview, alpha if text in ALPHA else beta, text, "green", 60)
    wait_colour(overview, beta, "add the docs", "yellow")

    # A task's title and its tool's command that are HTML stay text: shown as written, never run.
    xss = tile(alpha, XSS)
    try:
        overview.wait(f"((({xss}).querySelector('.tile-tool') || {{}}).textContent || '').includes({XSS!r})",
                      "the tool in flight, a Bash command, on the task's tile", 30)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; /api/state's tile: {api_tile(url, alpha, XSS)}") from None
    assert overview.value(UNTOUCHED)
    assert overview.value(f"({xss}).querySelector('.tile-title').textContent") == XSS
    assert overview.value(f"document.body.innerText.includes({XSS!r})")  # visible, not only in the DOM

    # The hung agent is killed as stuck; its tile turns red without a reload.
    state = httpx.get(url + "api/state", timeout=30).json()
    hung = worktree_of(state, alpha, HANG)
    assert hung is not None, state
    wait_for(lambda: stuck_kills(hung), 60, "the watcher to kill the hung agent as stuck")
    # Red from the kill on (for a minute: its retry starts healthy a second later), so the tile
    # is red when looked at, not only in a moment a look could miss.
    wait_colour(overview, alpha, HANG, "red", 30)
    assert overview.value("window.__loaded") == marker            # the same page: no reload, no navigation
    assert overview.value("document.body.dataset.live") == "yes"

    # A task done and merged ends grey.
    (gates / task_id(DONE_SOON)).unlink()
    wait_colour(overview, alpha, DONE_SOON, "grey", 60)
    assert overview.value("window.__loaded") == marker

    # The loop page of the running task: its transcript grows while one looks.
    href = overview.value(f"({xss}).querySelector('a') ? ({xss}).querySelector('a').getAttribute('href') : null")
    assert href, "the tile links to its loop page"
    loop = browser.page(url.rstrip("/") + href, 1280, 900)
    loop.wait("document.querySelector('#timeline') && document.querySelector('#transcript')", "the loop page")
    before = loop.wait("(document.querySelector('#transcript').textContent || '').length", "a transcript")
    loop.wait(f"document.querySelector('#transcript').textContent.length > {before}", "the transcript to grow")
    assert XSS in loop.value("document.querySelector('#transcript').textContent")
    assert loop.value(UNTOUCHED)

    # The metrics page: every chart drawn, none blank.
    metrics = browser.page(url + "metrics", 1280, 1400)
    metrics.wait("document.body.dataset.charts === 'drawn'", "the charts to be drawn")
    inked = dict(metrics.value(INKED))
    assert set(CHARTS) <= set(inked), inked
    assert all(inked[c] > 0 for c in CHARTS), inked

    # On a phone: the overview fits its width.
    phone = browser.page(url, 400, 900)
    phone.wait("document.body.dataset.live === 'yes' && document.querySelectorAll('article.tile').length >= 6",
               "the overview at 400 px")
    fit = phone.value("[document.documentElement.scrollWidth, window.innerWidth]")
    assert fit[0] <= fit[1], fit
    assert phone.value(UNTOUCHED)

    if SCREENSHOT:
        keep(overview, phone, alpha, tmp_path, Path(SCREENSHOT))

    assert browser.errors() == []          # no console error, no page error, on any page


def keep(overview: Page, phone: Page, alpha: Path, tmp_path: Path, path: Path) -> None:
    """The overview's screenshots, taken while the stuck task is red (a minute after each kill)."""
    shot = tmp_path / "overview.png"
    wait_colour(overview, alpha, HANG, "red", 30)
    shutil.copyfile(overview.shot(shot, full_page=True), path)
    shutil.copyfile(phone.shot(tmp_path / "phone.png", full_page=True), path.with_name(path.stem + "-phone.png"))


def test_a_bind_beyond_loopback_without_a_token_is_refused(tmp_path):
    proc = subprocess.run([str(GENESIS), "serve", "--host", "0.0.0.0", "--port", "0", "--project", str(tmp_path)],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == exitcodes.USAGE, proc
    assert "--token" in proc.stderr + proc.stdout

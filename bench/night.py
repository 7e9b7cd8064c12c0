"""8. A compressed night with the real Claude Code: a usage limit, then an API outage.

The shipped phases and prompts work through a four-task TASKS.md against the stub Messages
API of the end-to-end suite (tests/e2e/stub_api.py), logged in as a subscriber. The API
refuses twice: a 5-hour limit for about 10 s (in iteration 1's Criticizer), later an
overload (529) for about 10 s (in iteration 3's Builder). Time is compressed: limit margin
1 s, backoff 1 s doubling up to 4 s, and the user's `claude` retries once
(CLAUDE_CODE_MAX_RETRIES=1; its default 10 retries would ride out a 10 s outage alone).
Measured from the stub's record of every request and the loop's events.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, Row, git_project

sys.path.insert(0, str(ROOT / "tests"))
from e2e.stub_api import StubAPI  # noqa: E402

CLAUDE = ROOT / ".tools" / "claude" / "node_modules" / ".bin" / "claude"
TASKS = ["Add a /health endpoint with a test", "Log each request", "Read the port from PORT",
         "Add a /version endpoint"]
MARGIN, FIRST, CAP = 1.0, 1.0, 4.0
LIMIT_SECONDS, OUTAGE_SECONDS = 10.0, 10.0
PER_PHASE = 5   # the stub's Builder and Criticizer: cat, write or read, mark, commit, final text
# Knobs and variables of the caller that would change the night; it runs on its own.
FOREIGN = ("GENESIS_", "HEARTBEAT_", "AGENT_MAX", "CB_", "REAP_", "PHASE_", "AUTO_", "ITERATION_PAUSE",
           "KILL_GRACE", "CLAUDE", "ANTHROPIC_")


def genesis_bin() -> str:
    venv = ROOT / ".venv" / "bin" / "genesis"
    return str(venv if venv.exists() else Path(sys.executable).parent / "genesis")


def night(tmp: Path, api: StubAPI) -> list[dict]:
    """One night; returns its events."""
    home = tmp / "home"
    home.mkdir()
    project = git_project(tmp / "project")
    (project / "TASKS.md").write_text("# Tasks\n" + "".join(f"- [ ] {t}\n" for t in TASKS))
    subprocess.run(["git", "add", "TASKS.md"], cwd=project, check=True)
    subprocess.run(["git", "commit", "-qm", "Plan the night"], cwd=project, check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(FOREIGN)}
    env.update({"HOME": str(home), "PATH": f"{CLAUDE.parent}{os.pathsep}{env.get('PATH', '')}",
                "ANTHROPIC_BASE_URL": api.url, "CLAUDE_CODE_OAUTH_TOKEN": "tok-stub", "CLAUDE_CODE_MAX_RETRIES": "1",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
                "DISABLE_AUTOUPDATER": "1", "DISABLE_ERROR_REPORTING": "1", "NO_COLOR": "1",
                "GENESIS_BIN": genesis_bin(), "HEARTBEAT_CHECK_INTERVAL": "0.5", "HEARTBEAT_STALE": "30s",
                "AGENT_MAX_RUNTIME": "120s", "KILL_GRACE_SECONDS": "3", "ITERATION_PAUSE_SECONDS": "0",
                "GENESIS_LIMIT_MARGIN_SECONDS": f"{MARGIN:g}", "GENESIS_BACKOFF_FIRST_SECONDS": f"{FIRST:g}",
                "GENESIS_BACKOFF_MAX_SECONDS": f"{CAP:g}"})
    if os.geteuid() == 0:
        env["IS_SANDBOX"] = "1"  # Claude Code refuses to skip permissions as root otherwise
    subprocess.run([genesis_bin(), "--project", str(project), "hook", "install"], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run(["bash", str(ROOT / "start-multi-agent-loop.sh"), "--project", str(project),
                    "--max-iterations", "8"], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=900)
    from genesis.ledger.store import Ledger

    with Ledger.open(project / ".git" / "genesis" / "ledger.sqlite3", readonly=True) as led:
        return led.events()


def run() -> list[Row]:
    if not CLAUDE.exists():
        print(f"  skipped: the real Claude Code is not installed ({CLAUDE.relative_to(ROOT)}; ./run-tests.sh "
              "installs it)", file=sys.stderr)
        return []
    api = StubAPI(turn_delay=0.05).start()
    try:
        # Iteration 1: Builder requests 1-5, the Criticizer's second request meets the limit,
        # its retry makes 5 more; iteration 2: 10; the outage meets iteration 3's second request.
        limit = api.limit_after(PER_PHASE + 2, LIMIT_SECONDS)
        outage = api.outage(OUTAGE_SECONDS, after=PER_PHASE + 2 + PER_PHASE + 2 * PER_PHASE + 2)
        with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:  # an alert may still be recorded
            started = time.time()
            evs = night(Path(tmp), api)
            took = time.time() - started
    finally:
        api.shutdown()
    asked = api.messages()
    rows: list[Row] = []

    def where(kind: str) -> str:
        met = [e for e in evs if e["event"] == "phase_end" and e.get("ending") == kind]
        return f"met by iteration {met[0]['iteration']}'s {met[0]['phase']}" if met else "met by no phase"

    in_limit = [r for r in asked if limit.covers(r["at"])]
    rows.append(Row("night: requests inside a usage limit window", "req", (float(len(in_limit)),),
                    target="<= 1", met=0 < len(in_limit) <= 1, note=f"window {LIMIT_SECONDS:g} s, {where('limit')}"))

    starts = [e["epoch"] for e in evs if e["event"] == "phase_start"]
    later = [ts for ts in starts if limit.resets_at is not None and ts >= limit.resets_at]
    if later:
        delay = later[0] - limit.resets_at
        rows.append(Row("night: from a limit's reset to the next agent start", "s", (delay,),
                        target=f"<= margin + 1 s ({MARGIN + 1:g} s)", met=MARGIN <= delay <= MARGIN + 1,
                        note=f"margin {MARGIN:g} s"))

    in_outage = [r for r in asked if outage.covers(r["at"])]
    waits = [e for e in evs if e["event"] == "wait_start" and e["kind"] == "outage"]
    planned = [min(FIRST * 2 ** (w["attempt"] - 1), CAP) for w in waits]
    # A delay: from the failed attempt's exit to the end of its wait.
    failed = [e for e in evs if e["event"] == "phase_end" and e.get("ending") == "outage"]
    delays = [w["until"] - (e["started"] + e["duration"]) for e, w in zip(failed, waits)]
    waited = ", ".join(f"{d:.1f}" for d in delays) or "none"
    fits = len(delays) == len(planned) and all(0.8 * p - 0.01 <= d <= p + 1.0 for d, p in zip(delays, planned))
    # An attempt: an agent run that sent a request inside the window (the last one may have
    # outlived it, its CLI's own retry served after the window's end).
    runs = [(e["started"], e["started"] + e["duration"]) for e in evs
            if e["event"] == "phase_end" and isinstance(e.get("started"), (int, float))]
    attempts = sum(1 for start, end in runs if any(start <= r["at"] <= end for r in in_outage))
    rows.append(Row("night: requests during an API outage", "req", (float(len(in_outage)),),
                    target="2 per attempt", met=bool(waits) and fits and len(in_outage) <= 2 * attempts,
                    note=f"window {OUTAGE_SECONDS:g} s, {where('outage')}, {attempts} attempts; backoff {waited} s "
                         f"for schedule " + ", ".join(f"{p:g}" for p in planned)))

    ends = [e for e in evs if e["event"] == "iteration_end"]
    last_progress = max((e["iteration"] for e in ends if e["progress"]), default=0)
    idle = sum(1 for e in ends if e["iteration"] > last_progress)
    loop_end = [e for e in evs if e["event"] == "loop_end"]
    finished = bool(loop_end) and loop_end[-1]["exit_code"] == 0 and loop_end[-1]["reason"].startswith("done")
    rows.append(Row("night: idle iterations after the work was done", "iter", (float(idle),), target="0",
                    met=idle == 0 and finished,
                    note=f"{len(ends)} iterations, {took:.0f} s in all; "
                         + (f"ended: {loop_end[-1]['reason']}" if loop_end else "no loop_end")))
    return rows


if __name__ == "__main__":
    for row in run():
        print(row)

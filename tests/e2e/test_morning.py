"""The morning after a compressed night, with the real `claude` against the stub API: what the
ledger holds, what `genesis status --watch` showed in a real terminal while it ran, the
HTML report in a real headless Chromium, and the alerts a webhook receiver got.

The night: one task; iteration 1's Builder meets an API that goes silent (stuck, killed,
an incident, retried), its Criticizer meets a usage limit (waited out); then the task is
done, GENESIS_DONE_WHEN=never keeps the loop going, and two idle iterations move the
breaker to HALF_OPEN and OPEN (exit 3). Time and the breaker's counts are compressed; the
phases, triggers, prompts, hook and every other knob are the shipped ones.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import json

import pytest
from e2e.harness import LOOP, night_env, plan_night
from helpers.chromium import INSTALL_HINT, find_chromium, measure, render
from helpers.receiver import Receiver
from helpers.waits import wait_for
from helpers.zones import zone_with_midnight_at

from genesis.ledger.store import Ledger

pytestmark = pytest.mark.claude

# Read at import: the suite's autouse fixture clears GENESIS_* before each test runs.
CHROMIUM = find_chromium()
SCREENSHOT = os.environ.get("GENESIS_REPORT_SCREENSHOT")  # where to keep the page's screenshot (docs/)
GENESIS = [sys.executable, "-m", "genesis"]


def ledger_rows(project: Path, sql: str) -> list[tuple]:
    with Ledger.open(project / ".git" / "genesis" / "ledger.sqlite3", readonly=True) as led:
        return [tuple(r) for r in led.query(sql)]


class Tmux:
    """A real terminal: a tmux server of its own, one window running a command."""

    def __init__(self, name: str, command: list[str], env: dict[str, str]):
        self.socket = name
        self.env = env
        self.tmux("new-session", "-d", "-x", "120", "-y", "45", "-s", "w", " ".join(map(shlex_quote, command)))

    def tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, *args], env=self.env, capture_output=True, text=True,
                              timeout=10, check=True).stdout

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "w")

    def until(self, predicate, timeout: float, what: str) -> str:
        """The first screen the predicate accepts (polled, with a deadline)."""
        found: list[str] = []

        def check() -> bool:
            text = self.screen()
            if predicate(text):
                found.append(text)
                return True
            return False

        try:
            wait_for(check, timeout=timeout, what=what)
        except AssertionError:
            raise AssertionError(f"{what}; the screen was:\n{self.screen()}") from None
        return found[0]

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], env=self.env, capture_output=True, timeout=10)


def shlex_quote(word: str) -> str:
    import shlex

    return shlex.quote(word)


def status_json(project: Path, tz: str | None = None) -> dict:
    """`genesis status --json`, parsed, as a probe would run it."""
    env = {**os.environ, **({"TZ": tz} if tz else {})}
    done = subprocess.run([*GENESIS, "--project", str(project), "status", "--json"], capture_output=True, text=True,
                          timeout=60, env=env)
    document = json.loads(done.stdout)
    assert document["schema"] == 1 and document["exit_code"] == done.returncode, (done.stdout, done.stderr)
    return document


def countdown(screen: str) -> int | None:
    """The seconds left of the usage-limit wait the status screen shows, if it shows one."""
    found = re.search(r"usage limit.*?(?:(\d+)m)?(\d+)s left", screen)
    if not found:
        return None
    return int(found.group(1) or 0) * 60 + int(found.group(2))


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed: `apt-get install tmux`")
def test_a_compressed_night_seen_live_in_status_then_in_the_report_and_the_alerts(claude, fast_stub, project,
                                                                                  tmp_path):
    plan_night(project, ["Add a /health endpoint with a test"])
    # Iteration 1's Builder: its third request hangs (the API accepted it and went silent).
    fast_stub.hang_after(3, 120)
    # Its retry makes 5 requests; the Criticizer's second request (the 10th) meets a usage limit,
    # whose 30 s leave the probes below time to look on a loaded machine.
    window = fast_stub.limit_after(10, 30)
    with Receiver() as hook, Receiver() as phone:
        env = night_env(fast_stub, subscriber=True, HEARTBEAT_STALE="10s", PHASE_RETRY_DELAY_SECONDS="1",
                        GENESIS_DONE_WHEN="never", CB_WARNING_THRESHOLD="1", CB_STOP_THRESHOLD="2",
                        GENESIS_NOTIFY_WEBHOOK=f"{hook.url}/hook", GENESIS_NOTIFY_NTFY=f"{phone.url}/night",
                        GENESIS_NOTIFY_DESKTOP="false")
        out = (tmp_path / "loop.out").open("w")
        loop = subprocess.Popen(["bash", str(LOOP), "--project", str(project), "--max-iterations", "8"], env=env,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        term = None
        try:
            wait_for(lambda: (project / ".git" / "genesis" / "loop.json").exists(), timeout=60, what="the loop's start")
            # `genesis status --watch` from another directory, as a user in a second terminal would.
            term = Tmux(f"genesis-test-{os.getpid()}", [*GENESIS, "--project", str(project), "status", "--watch"],
                        {**os.environ, "TERM": "xterm-256color", "HOME": str(tmp_path)})
            # The phase line itself ("iteration 1 · Builder · running 3s"): the words alone also
            # stand in the loop's line and the recent events, between phases too.
            term.until(lambda s: re.search(r"iteration 1 · Builder[^·\n]*· running", s), 60,
                       "the running phase on the screen")
            # The same, as a probe reads it mid-run: the run, its phase and its heartbeat's age.
            run_id = json.loads((project / ".git" / "genesis" / "loop.json").read_text())["run_id"]
            live: list[dict] = []
            wait_for(lambda: live.append(status_json(project)) or (live[-1]["phase"] or {}).get(
                "heartbeat_age_seconds") is not None, timeout=60, what="a heartbeat's age in status --json")
            now = live[-1]
            assert (now["state"], now["run"]["id"], now["phase"]["name"]) == ("running", run_id, "Builder"), now
            assert now["totals"]["scope"] == "this_run" and now["phase"]["heartbeat_age_seconds"] >= 0
            first = term.until(lambda s: countdown(s) is not None, 90, "the usage limit's countdown")
            # The screen refreshes on its own clock: on a loaded machine the probe may run before
            # the wait it shows is recorded as this loop's, so it asks again for a few seconds.
            probes: list[dict] = []
            wait_for(lambda: probes.append(status_json(project)) or (probes[-1]["wait"] or {}).get("kind") == "limit",
                     timeout=60, what="the usage limit's wait in status --json")
            waiting = probes[-1]
            assert (waiting["state"], waiting["wait"]["kind"], waiting["wait"]["phase"]) == ("waiting", "limit",
                                                                                          "Criticizer"), waiting
            # The stuck Builder before it: an abnormal phase and an incident of this run.
            assert waiting["totals"]["incidents"] == 1 and waiting["totals"]["abnormal_phases"] >= 1, waiting
            # The countdown moving each second is tests/status/test_screen.py's (a watch in tmux, and
            # a read that hangs); here, the screen shows the usage limit's wait within its window
            # (which phase met it is the probe's to say, above: the screen's events may have moved on).
            assert 0 < countdown(first) <= 30 + 5, first  # the reset rounds up a second, then a 1 s margin
            assert loop.wait(timeout=300) == 3
        finally:
            if term is not None:
                term.close()
            if loop.poll() is None:
                os.killpg(loop.pid, signal.SIGTERM)
                loop.wait(timeout=60)
            out.close()
        printed = (tmp_path / "loop.out").read_text()
        assert "breaker OPEN" in printed, printed
        # The report the loop printed says where its final alert went.
        assert re.search(r"final alert: sent to (webhook, ntfy|ntfy, webhook)", printed), printed

        # The ledger: every phase with its ending, the incident, the wait, the breaker's moves.
        phases = ledger_rows(project, "SELECT iteration, phase, attempt, ending FROM phases ORDER BY id")
        assert phases[:2] == [(1, "Builder", 0, "stuck"), (1, "Builder", 1, "finished")], phases
        assert (1, "Criticizer", 0, "limit") in phases and (1, "Criticizer", 0, "finished") in phases
        incidents = ledger_rows(project, "SELECT id, kind, phase FROM incidents")
        assert [(k, p) for _, k, p in incidents] == [("stuck", "Builder")]
        # Each attempt its own transcript and its own tail: the stuck one is not evidenced by the
        # retry's success, and its incident holds the same lines.
        with Ledger.open(project / ".git" / "genesis" / "ledger.sqlite3", readonly=True) as led:
            ends = [e for e in led.events(kinds=["phase_end"]) if (e["iteration"], e["phase"]) == (1, "Builder")]
        stuck, retried = ends[:2]
        assert stuck["log"] != retried["log"] and Path(stuck["log"]).is_file() and Path(retried["log"]).is_file()
        assert stuck["tail"] and stuck["tail"] != retried["tail"] and stuck["window"] == "stale", stuck
        assert not any("success" in line for line in stuck["tail"]), stuck["tail"]
        record = json.loads((project / ".git" / "genesis" / "incidents" / f"{incidents[0][0]}.json").read_text())
        assert list(record["transcript"]) == list(stuck["tail"]) and record["log"] == stuck["log"]
        waits = ledger_rows(project, "SELECT kind, phase, ended IS NOT NULL FROM waits")
        assert ("limit", "Criticizer", 1) in waits
        changes = ledger_rows(project, "SELECT before, after FROM breaker_changes ORDER BY id")
        assert changes == [("CLOSED", "HALF_OPEN"), ("HALF_OPEN", "OPEN")]
        assert len(fast_stub.messages()) > 10 and window.start is not None

        # The alerts: triage passed the stuck phase, the OPEN breaker and the loop's end to the
        # webhook; it dismissed the usage limit (the loop waits it out) and the HALF_OPEN warning.
        def decided() -> dict[str, tuple[str, str]]:
            rows = ledger_rows(project, "SELECT ticket_id, kind, decision FROM alerts")
            return {t: (k, d) for t, k, d in rows}

        wait_for(lambda: any(k == "loop_end" for k, _ in decided().values()), timeout=60, what="the loop end's alert")
        alerts = decided()
        told = {t for t, (_, d) in alerts.items() if d == "intervene"}
        dismissed = {t for t, (_, d) in alerts.items() if d == "dismiss"}
        got = {r.json["genesis"]["ticket_id"]: r.json["genesis"] for r in hook.wait_for(len(told), timeout=30)}
        assert set(got) == told and not dismissed & set(got)
        # The stuck Builder: one quiet message, then its resolution; the OPEN breaker is told in the
        # loop end's message (one message), whose title names it.
        told_kinds = {t["kind"]: t for t in got.values()}
        assert told_kinds["retry"]["severity"] == "medium"
        assert told_kinds["resolved"]["resolves"] == told_kinds["retry"]["ticket_id"]
        assert not any(t["kind"] == "iteration_end" and "HALF" not in t["cause"] for t in got.values()), got
        assert told_kinds["loop_end"]["final"] and told_kinds["loop_end"]["headline"] == "breaker OPEN, loop stopped"
        assert {k for k, d in alerts.values() if d == "dismiss"} >= {"wait_start"}
        assert all(r.path == "/hook" and r.method == "POST" for r in hook.requests)
        # What a person reads: the project and the cause first, a few lines, the night summed up.
        said = {r.json["genesis"]["kind"]: r.json["text"].splitlines() for r in hook.requests}
        assert said["retry"][0] == f"{project.name}: Builder stuck, retrying", said["retry"]
        assert any(line.startswith(("Partial work committed", "Nothing was committed")) for line in said["retry"])
        assert not any("lost" in line for line in said["retry"]) and len(said["retry"]) <= 7
        assert said["resolved"][0] == f"{project.name}: resolved: Builder recovered on retry 1", said["resolved"]
        assert said["loop_end"][0] == f"{project.name}: breaker OPEN, loop stopped", said["loop_end"]
        assert any(re.match(r"Tasks: 1 of 1 done", line) for line in said["loop_end"]), said["loop_end"]
        assert any(re.search(r"\d+ commits?, \d+ iterations?, \d+ abnormal phases?, 1 incident", line)
                   for line in said["loop_end"]), said["loop_end"]
        # The phone: one push per message, the cause in its title, the self-healed stall not urgent,
        # its resolution in the same notification (one sequence id).
        pushes = {r.headers["Title"]: r for r in phone.wait_for(len(told), timeout=30)}
        stall = pushes[f"{project.name}: Builder stuck, retrying"]
        healed = pushes[f"{project.name}: resolved: Builder recovered on retry 1"]
        assert stall.headers["Priority"] in ("low", "default") and healed.headers["Priority"] == "low"
        sequence = [{k.lower(): v for k, v in r.headers.items()}.get("x-sequence-id") for r in (stall, healed)]
        assert sequence[0] and sequence[0] == sequence[1], sequence
        assert pushes[f"{project.name}: breaker OPEN, loop stopped"].headers["Priority"] == "urgent"

    # The morning's status: the last run's totals, the same whether the reader's midnight fell
    # in the middle of the night or not.
    (started, ended), = ledger_rows(project, "SELECT started, ended FROM runs")
    across, plain = status_json(project, zone_with_midnight_at((started + ended) / 2)), status_json(project, "UTC")
    assert across["totals"] == plain["totals"] and across["totals"]["scope"] == "last_run"
    assert across["totals"]["incidents"] == 1 and across["run"]["exit_code"] == 3
    assert across["totals"]["abnormal_phases"] == sum(ending != "finished" for *_, ending in phases)

    # The morning report: the terminal's, and the HTML page in a real headless Chromium.
    text = subprocess.run([*GENESIS, "--project", str(project), "report"], capture_output=True, text=True)
    assert text.returncode == 0 and "abnormal phases" in text.stdout and incidents[0][0] in text.stdout
    page = tmp_path / "night.html"
    made = subprocess.run([*GENESIS, "--project", str(project), "report", "--html", str(page)], capture_output=True,
                          text=True)
    assert made.returncode == 0 and page.exists(), made.stderr
    if CHROMIUM is None:
        pytest.skip(f"no headless Chromium: the page was written, not rendered ({INSTALL_HINT})")
    shot = tmp_path / "night.png"
    seen = render(page, screenshot=shot, binary=CHROMIUM)
    assert seen.console == []
    assert 'class="timeline"' in seen.dom or "<svg" in seen.dom
    assert len(re.findall(r'<rect class="phase\b', seen.dom)) == len(phases)
    # The incident with its forensics: the text `genesis incidents show ID` prints.
    assert f"Genesis incident {incidents[0][0]}" in seen.dom
    assert shot.stat().st_size > 50_000
    # On a phone and on a desktop: nothing wider than the screen, the timeline's text readable.
    for width in (400, 1400):
        fit = measure(page, "({scroll: document.documentElement.scrollWidth, client: document.documentElement"
                            ".clientWidth, text: Math.min(...[...document.querySelectorAll('svg.timeline text')]"
                            ".map(t => t.getBoundingClientRect().height).filter(h => h > 0))})",
                      binary=CHROMIUM, window=f"{width},900")
        assert fit["scroll"] <= fit["client"] and fit["text"] >= 12, (width, fit)
    if SCREENSHOT:
        shutil.copyfile(shot, SCREENSHOT)

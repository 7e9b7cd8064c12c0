"""A report that agrees with itself and with what happened, read from a real ledger: where the
loop end's alert went, an escalation rate that counts only tickets a channel took, the triage's
reason, every time in the reader's zone with the zone said, phase columns in the run's
configured order, the cost of each iteration, and several runs each under a heading."""

from __future__ import annotations

import calendar
import re
import time

import pytest
from click.testing import CliRunner
from helpers.state import state_of

from genesis.cli import cli
from genesis.ledger.store import Ledger
from genesis.reporting.load import night
from genesis.reporting.text import render_text

RUN = "20261124T013000Z-9090"
T0 = float(calendar.timegm((2026, 11, 24, 1, 30, 0)))   # 01:30 UTC
M = 60.0
FOLDED = "the loop's end followed at once: told in its message"


def at(minutes: float) -> float:
    return T0 + minutes * M


@pytest.fixture
def led(tmp_path):
    with Ledger.open(tmp_path / "ledger.sqlite3") as ledger:
        yield ledger


def ticket(n: int, *, final: bool = False, severity: str = "high", cause: str = "Builder stuck",
           kind: str = "incident") -> dict:
    return {"ticket_id": f"{n:032x}", "run_id": RUN, "severity": severity, "cause": cause,
            "kind": "loop_end" if final else kind, "final": final}


def record(led: Ledger, *, alerts: list[dict] = (), phases: list | None = ("Builder", "Criticizer", "Planner"),
           first: tuple[str, ...] = ("Builder", "Criticizer"), run_id: str = RUN, start: float = T0,
           end: bool = True) -> None:
    """A run of two iterations as the loop records it: iteration 1 runs `first` in that order
    (a resumed run may start with any phase) and skips the Planner; iteration 2 runs the
    Builder. `phases`: GENESIS_PHASES as the run's loop_start recorded them (None: a ledger an
    older Genesis wrote, without them). alerts: the deliverers' `alert` events, at the end."""
    def r(event: str, minutes: float, /, **detail) -> None:
        led.record(run_id, event, at=start + minutes * M, **detail)

    r("loop_start", 0, project="/srv/shop", pid=4242, **({"phases": list(phases)} if phases else {}))
    r("iteration_start", 0.1, iteration=1)
    for n, name in enumerate(first):
        r("phase_start", 1 + 10 * n, iteration=1, phase=name, epoch=start + (1 + 10 * n) * M, attempt=0)
        r("phase_end", 9 + 10 * n, iteration=1, phase=name, status="exited", ending="finished", returncode=0,
          detail="finished", started=start + (1 + 10 * n) * M, attempt=0, cost_usd=0.4 if name == "Builder" else 0.2)
    r("phase_skip", 30, iteration=1, phase="Planner", why="a task is open")
    r("iteration_end", 31, iteration=1, progress=True, breaker="CLOSED", no_progress=0)
    r("iteration_start", 32, iteration=2)
    r("phase_start", 33, iteration=2, phase="Builder", epoch=start + 33 * M, attempt=0)
    r("phase_end", 40, iteration=2, phase="Builder", status="exited", ending="finished", returncode=0,
      detail="finished", started=start + 33 * M, attempt=0, cost_usd=0.25)
    r("iteration_end", 41, iteration=2, progress=False, breaker="CLOSED", no_progress=1)
    for n, detail in enumerate(alerts):
        r("alert", 42 + n * 0.1, **detail)
    if end:
        r("loop_end", 43, reason="done: every task is ticked", exit_code=0)


def alert(n: int, decision: str = "intervene", *, delivered=(), failed=None, skipped=None, folded=False,
          why: str = "high severity", by: str = "rules", **kw) -> dict:
    detail = {"ticket": ticket(n, **kw), "decision": decision, "why": why, "by": by, "delivered": list(delivered),
              "failed": failed or {}}
    if skipped:
        detail["skipped"] = skipped
    if folded:
        detail["folded"] = True
    return detail


def lines(text: str, start: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(start)]


def kpi(text: str, name: str) -> str:
    (line,) = [line for line in text.splitlines() if line.startswith(name + "  ")]
    return " ".join(line.split())


# --- where the loop end's alert went --------------------------------------------------------

@pytest.mark.fault(90)
@pytest.mark.parametrize("final, said", [
    (alert(9, delivered=["webhook", "ntfy"], final=True), "final alert: sent to webhook, ntfy"),
    (alert(9, delivered=["ntfy"], failed={"webhook": "HTTP 500 (try 3 of 3)"}, final=True),
     "final alert: sent to ntfy; webhook failed"),
    (alert(9, failed={"webhook": "connection refused"}, final=True), "final alert: not sent; webhook failed"),
    (alert(9, skipped={"ntfy": "low is below its minimum severity, high"}, final=True, severity="low"),
     "final alert: not sent; below the minimum severity of ntfy"),
    (alert(9, final=True), "final alert: no channel set"),
], ids=["sent", "one-failed", "all-failed", "below-minimum", "no-channel"])
def test_the_report_says_where_the_loop_ends_alert_went(led, final, said):
    record(led, alerts=[final])
    text = render_text(night(led, RUN))
    assert lines(text, "final alert:") == [said]
    assert text.splitlines().index(said) == 4  # in the header, under the night's summary


@pytest.mark.fault(90)
def test_a_final_alert_not_recorded_yet_is_said_as_still_being_sent_or_not_recorded(led):
    record(led, alerts=[])
    n = night(led, RUN)
    # A report read later, which does not know the channels...
    assert lines(render_text(n), "final alert:") == [
        "final alert: not recorded (its deliverer is still at work, or ended before recording it)"]
    # ...and the loop's end, which knows those its deliverer is telling.
    assert lines(render_text(n, sending=("webhook", "ntfy")), "final alert:") == [
        "final alert: still being sent (webhook, ntfy)"]
    assert lines(render_text(n, sending=()), "final alert:") == ["final alert: no channel set"]
    assert n.final_alert is None


# --- KPIs that count what they say ------------------------------------------------------------

@pytest.mark.fault(90)
def test_the_escalation_rate_counts_only_tickets_a_channel_took(led):
    """Triage said tell for two tickets, but every channel failed one: it reached nobody."""
    record(led, alerts=[alert(1, delivered=["webhook"]),
                        alert(2, failed={"webhook": "HTTP 500 (try 3 of 3)"}, cause="Criticizer wedged"),
                        alert(3, "dismiss", why="transient: a usage limit the loop waits out by itself",
                              severity="low", cause="usage limit"),
                        alert(4, delivered=["webhook"], final=True)])
    n = night(led, RUN)
    assert kpi(render_text(n), "escalation rate") == (
        "escalation rate 33% tickets that reached the operator: a channel took 1 of 3 tickets raised")
    assert (n.kpis.escalation_rate, n.kpis.reached, n.kpis.tickets, n.kpis.no_channel) == (pytest.approx(1 / 3), 1,
                                                                                           3, False)


@pytest.mark.fault(90)
def test_a_ticket_folded_into_the_told_end_reached_the_operator_and_a_resolution_is_no_escalation(led):
    record(led, alerts=[alert(1, "dismiss", why=FOLDED, folded=True, severity="critical", cause="breaker OPEN"),
                        alert(2, delivered=["ntfy"], kind="resolved", severity="low", cause="resolved"),
                        alert(3, delivered=["ntfy"], final=True)])
    n = night(led, RUN)
    assert kpi(render_text(n), "escalation rate") == (
        "escalation rate 100% tickets that reached the operator: a channel took 1 of 1 ticket raised")
    assert (n.kpis.escalation_rate, n.kpis.reached, n.kpis.tickets) == (1.0, 1, 1)


@pytest.mark.fault(90)
def test_with_no_channel_set_there_is_no_rate_but_how_many_would_have_been_told(led):
    record(led, alerts=[alert(1), alert(2, cause="Criticizer wedged"),
                        alert(3, "dismiss", why="low severity", severity="low", cause="usage limit"),
                        alert(4, final=True)])
    n = night(led, RUN)
    text = render_text(n)
    assert kpi(text, "escalation rate") == (
        "escalation rate n/a no alert channel set: 2 tickets would have been told (3 raised)")
    assert "(no channel set)" in text  # each ticket to tell says it went nowhere
    assert (n.kpis.escalation_rate, n.kpis.no_channel, n.kpis.intervened) == (None, True, 2)


@pytest.mark.fault(90)
def test_each_alert_shows_the_triages_reason_and_who_decided(led):
    record(led, alerts=[alert(1, "dismiss", why="the agent is making progress on a slow test", by="command"),
                        alert(2, delivered=["webhook"], why="the loop's end is always told", final=True,
                              severity="low", cause="loop ended: done")])
    text = render_text(night(led, RUN))
    part = text[text.index("alerts (2)"):]
    assert "triage (command): the agent is making progress on a slow test" in part
    assert "triage (rules): the loop's end is always told" in part
    assert "loop ended: done (sent to webhook)" in part


# --- times, columns, costs ------------------------------------------------------------------------

BARE = re.compile(r"(?<![\d:])(\d\d:\d\d)(?![\d:])")


def bare_times(text: str, zone: str) -> list[str]:
    """Every clock time not followed by its zone (a span's first end, 01:31-01:39 EST, counts as said)."""
    found = []
    for m in BARE.finditer(text):
        rest = text[m.end():]
        if not (rest.startswith(f" {zone}") or re.match(rf"-\d\d:\d\d {zone}", rest)):
            found.append(text[max(0, m.start() - 20):m.end() + 8])
    return found


@pytest.mark.fault(90)
def test_every_time_carries_the_readers_zone(led, tz):
    tz("EST5")  # POSIX form: UTC-5, needs no tz database
    record(led, alerts=[alert(1, delivered=["webhook"]), alert(2, delivered=["webhook"], final=True)])
    led.record(RUN, "wait_start", at=at(41.5), kind="retry", until=at(41.8), seconds=18.0, iteration=2,
               phase="Builder", reason="stuck: retry 1")
    led.record(RUN, "wait_end", at=at(41.8), kind="retry", epoch=at(41.8), waited=18.0, how="done")
    text = render_text(night(led, RUN))
    assert "started 2026-11-23 20:30 EST · ended 2026-11-23 21:13 EST" in text  # the reader's clock, not UTC's
    assert "21:11-21:11 EST (18s)" in text  # a wait's span says its zone once
    assert len(BARE.findall(text)) >= 6 and bare_times(text, "EST") == []


@pytest.mark.fault(90)
def test_the_run_list_and_since_say_their_zone(tz, project):
    tz("EST5")
    with Ledger.open(state_of(project) / "ledger.sqlite3") as led:
        record(led)
    listed = CliRunner().invoke(cli, ["--project", str(project), "report", "--list"], catch_exceptions=False)
    assert listed.stdout.startswith(f"{RUN}  started 2026-11-23 20:30 EST  ")
    later = CliRunner().invoke(cli, ["--project", str(project), "report", "--since", "2026-11-24 20:00"])
    assert later.exit_code == 1 and "no Genesis run started since 2026-11-24 20:00 EST" in later.output


@pytest.mark.fault(90)
def test_phase_columns_follow_the_runs_configured_order_not_the_first_to_run(led):
    """A resumed run whose first phase was the Criticizer: it must not become the first column."""
    record(led, first=("Criticizer", "Builder"))
    n = night(led, RUN)
    text = render_text(n)
    header = next(line for line in text.splitlines() if line.strip().startswith("iter"))
    assert header.split()[:4] == ["iter", "Builder", "Criticizer", "Planner"]
    assert lines(text, "by phase:") == ["by phase: Builder $0.65, Criticizer $0.20"]
    assert n.phase_order == ("Builder", "Criticizer", "Planner")  # for the page too


def test_a_run_an_older_genesis_recorded_keeps_its_first_iterations_order(led):
    record(led, first=("Criticizer", "Builder"), phases=None)
    assert night(led, RUN).phase_order == ("Criticizer", "Builder", "Planner")


@pytest.mark.fault(90)
def test_the_cost_of_each_iteration_is_in_the_model_and_the_text(led):
    record(led)
    n = night(led, RUN)
    assert lines(render_text(n), "by iteration:") == ["by iteration: 1: $0.60, 2: $0.25"]
    assert n.cost_by_iteration == ((1, pytest.approx(0.6)), (2, pytest.approx(0.25)))  # for the page too
    assert [it.cost_usd for it in n.iterations] == [pytest.approx(0.6), pytest.approx(0.25)]


# --- several runs ----------------------------------------------------------------------------------

@pytest.mark.fault(90)
def test_several_runs_are_printed_each_under_a_heading_and_apart(project, tz):
    tz("UTC")
    now = time.time()
    with Ledger.open(state_of(project) / "ledger.sqlite3") as led:
        record(led, run_id="run-a", start=now - 5 * 3600)
        record(led, run_id="run-b", start=now - 2 * 3600, end=False)
    out = CliRunner().invoke(cli, ["--project", str(project), "report", "--since", "1d"],
                             catch_exceptions=False).stdout.splitlines()
    headings = [n for n, line in enumerate(out) if line.startswith("=== run ")]
    assert len(headings) == 2
    a, b = (out[n] for n in headings)
    start_a, end_a = (time.strftime("%Y-%m-%d %H:%M UTC", time.localtime(t)) for t in (now - 5 * 3600,
                                                                                         now - 5 * 3600 + 43 * M))
    assert a == f"=== run 1 of 2: run-a · {start_a} to {end_a} · exit 0: done: every task is ticked ==="
    assert b.startswith("=== run 2 of 2: run-b · ") and b.endswith(" · no end recorded ===")
    assert headings[0] == 0 and out[1] == "" and out[2].startswith("Genesis run run-a")
    assert out[headings[1] - 1] == "" and out[headings[1] + 1] == "" and out[headings[1] + 2].startswith(
        "Genesis run run-b")
    # One run alone needs no heading.
    one = CliRunner().invoke(cli, ["--project", str(project), "report", "--run-id", "run-a"],
                             catch_exceptions=False).stdout
    assert one.startswith("Genesis run run-a · ") and "=== run" not in one

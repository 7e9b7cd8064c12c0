"""The morning report for the terminal: one night, plain text, scannable top to bottom.

The helpers here (clock times, outcomes, the iteration table's cells, the KPI lines) are
shared with html.py so both reports say the same thing in the same words.
"""

from __future__ import annotations

import io

from rich import box
from rich.console import Console
from rich.padding import Padding
from rich.table import Table

from genesis.hints import hint
from genesis.reporting.model import TROUBLE_LABELS, AlertRow, IterationRow, Kpis, Night, PhaseRow, WaitRow
from genesis.sandbox.refused import refused_line
from genesis.when import clock, stamp, zone
from genesis.words import LABELS, WAIT_LABELS, duration, ending_label, money, one_line, plural, sanitize

# clock and stamp are genesis.when's (the reader's zone, said): named here for html.py's sake.
__all__ = ["render_text", "clock", "stamp", "span", "outcome", "label", "between", "lasted", "phase_name",
           "phase_names", "iteration_headers", "iteration_cells", "ending_line", "summary_line", "wait_span", "where",
           "kpi_rows", "alert_lines", "final_alert_line", "run_heading"]


def span(start: float, end: float) -> str:
    """02:08-05:13 CET: the zone said once, or at each end when it changed between them (a
    clock change in the night)."""
    if zone(start) == zone(end):
        return f"{clock(start).rsplit(' ', 1)[0]}-{clock(end)}"
    return f"{clock(start)}-{clock(end)}"



def outcome(p: PhaseRow) -> str:
    """A phase's end for the iteration table's cell: a failed one is only its exit status."""
    if p.ending == "failed" and p.exit_code is not None:
        return f"exit {p.exit_code}"
    return LABELS.get(p.ending, p.ending)


def label(p: PhaseRow) -> str:
    return ending_label(p.ending, p.exit_code)


def between(start: float, end: float) -> str:
    """How long from start to end; a clock stepped back reads 0s, not a negative time."""
    return duration(max(0.0, end - start))


def lasted(p: PhaseRow) -> str:
    return "-" if p.seconds is None else duration(p.seconds)


def phase_name(p: PhaseRow) -> str:
    return f"{p.phase} (retry {p.attempt})" if p.attempt else p.phase


def phase_names(night: Night) -> list[str]:
    """Every phase the night ran or skipped: in the run's configured order (GENESIS_PHASES),
    then any other in the order it first came."""
    names: dict[str, None] = dict.fromkeys(night.phase_order)
    for it in night.iterations:
        for name in [p.phase for p in it.phases] + list(it.skipped):
            names.setdefault(name, None)
    return list(names)


def iteration_headers(names: list[str]) -> list[str]:
    return ["iter", *names, "time", "progress", "breaker", "commits", "tasks"]


def iteration_cells(night: Night, it: IterationRow, names: list[str]) -> list[str]:
    """One row of the iteration table; a phase run twice (a retry, a rerun after a wait) shows
    both, one a line (the cells stay narrow: the table fits the report's width)."""
    cells = [str(it.iteration)]
    for name in names:
        runs = [outcome(p) for p in it.phases if p.phase == name]
        cells.append("\n".join(runs) if runs else "skipped" if name in it.skipped else "-")
    if it.ended is not None:
        cells.append(between(it.started, it.ended))
    else:
        cells.append("running" if night.running else "-")
    cells.append("-" if it.progress is None else "yes" if it.progress else "no")
    breaker = it.breaker or "-"
    cells.append(f"{breaker} ({it.no_progress})" if it.breaker and it.no_progress else breaker)
    commits = sum(len(p.commits) for p in it.phases)
    tasks = sum(len(p.tasks_done) for p in it.phases)
    cells += [str(commits) if commits else "-", str(tasks) if tasks else "-"]
    return cells


def ending_line(night: Night) -> str:
    """When the night started and ended (or that it did not); how it ended is `night.reason`."""
    start = f"started {stamp(night.started)}"
    if night.running:
        return f"{start} · still running" + (f", for {between(night.started, night.read_at)} so far"
                                             if night.read_at is not None else "")
    if night.ended is None:
        return f"{start} · no end recorded (the loop was killed, or its ledger lost the end)"
    code = "" if night.exit_code is None else f" · exit {night.exit_code}"
    return f"{start} · ended {stamp(night.ended)} after {between(night.started, night.ended)}{code}"


def summary_line(night: Night) -> str:
    phases = night.phases
    parts = [plural(len(night.iterations), "iteration"),
             plural(len(phases), "phase") + (f", {len(night.abnormal)} abnormal" if night.abnormal else ""),
             plural(len(night.commits), "commit") + (f" ({len(night.orphaned)} orphaned)" if night.orphaned else ""),
             plural(len(night.tasks_done), "task") + " done"]
    if night.history:
        parts.append(plural(len(night.history), "change") + " to history")
    if night.commit_failures:
        parts.append(plural(len(night.commit_failures), "failed auto-commit"))
    kept = [r for r in night.left_out if not r.commit]
    if kept:
        parts.append(plural(len(kept), "file") + " left out of commits")
    if len(kept) < len(night.left_out):
        parts.append(plural(len(night.left_out) - len(kept), "secret-looking file") + " committed by the agent")
    if night.cost_usd is not None:
        parts.append(money(night.cost_usd))
    if night.reaped:
        parts.append(plural(night.reaped, "leftover process", "leftover processes") + " ended")
    return " · ".join(parts)


def where(iteration: int | None, phase: str | None) -> str:
    """"iteration 2 Builder", or as much of it as is known."""
    return " ".join(x for x in (f"iteration {iteration}" if iteration is not None else "", phase or "") if x)


def evidence_title(night: Night) -> str:
    """`task evidence (2: 1 on a passing check, 1 on the agent's word)`."""
    rows = night.evidence
    passed, word, failed, unreviewed = (sum(1 for r in rows if r.outcome == o)
                                        for o in ("passed", "agent's word", "failed", "unreviewed"))
    parts = [f"{passed} on a passing check", f"{word} on the agent's word"] + \
        ([f"{failed} failed"] if failed else []) + ([f"{unreviewed} sent back for review"] if unreviewed else [])
    return f"task evidence ({len(rows)}: {', '.join(parts)}; the checks Genesis ran when a phase ticked a task done)"


def wait_span(night: Night, w: WaitRow) -> str:
    if w.ended is not None:
        return f"{span(w.started, w.ended)} ({between(w.started, w.ended)})"
    planned = f", until {clock(w.until)}" if w.until is not None else ""
    return f"{clock(w.started)}- ({'still waiting' if night.running else 'no end recorded'}{planned})"


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:.0f}%"


def kpi_rows(k: Kpis) -> list[tuple[str, str, str]]:
    """(name, value, what it measures): "n/a" where the night gave nothing to compute it from."""
    return [
        ("MTTD", "n/a" if k.mttd_seconds is None else duration(k.mttd_seconds),
         f"mean time to detect a stall, from the last sign of life ({plural(k.detections, 'detection')})"),
        ("MTTR", "n/a" if k.mttr_seconds is None else duration(k.mttr_seconds),
         f"mean time from a stall to the next finished phase ({plural(k.recoveries, 'recovery', 'recoveries')})"),
        ("false-positive rate", _percent(k.false_positive_rate),
         f"stall warnings that recovered on their own ({plural(k.warnings, 'warning')})"),
        ("retries per phase", "n/a" if k.retries_per_phase is None else f"{k.retries_per_phase:.2f}",
         "retries after a stall, per phase run"),
        ("escalation rate", "n/a", f"no alert channel set: {plural(k.intervened, 'ticket')} would have been told "
         f"({k.tickets} raised)") if k.no_channel else
        ("escalation rate", _percent(k.escalation_rate),
         f"tickets that reached the operator: a channel took {k.reached} of {plural(k.tickets, 'ticket')} raised"),
    ]


def _channels(names: tuple[str, ...]) -> str:
    return ", ".join(names)


def final_alert_line(night: Night, sending: tuple[str, ...] | None = None) -> str | None:
    """What became of the loop's end's alert: sent (and where), not sent, or still being sent
    when the report is printed (sending: the channels the loop's deliverer is telling; None
    when not known, as in a report read later). None while the night runs."""
    final = night.final_alert
    if final is None:
        if night.running or (night.ended is None and sending is None):
            return None
        if sending is None:
            return "final alert: not recorded (its deliverer is still at work, or ended before recording it)"
        return f"final alert: still being sent ({_channels(sending)})" if sending else "final alert: no channel set"
    if final.verdict != "intervene":
        return f"final alert: not told ({final.verdict}: {one_line(final.why)})"
    return f"final alert: {_went(final)}"


def _went(a: AlertRow) -> str:
    """Where an alert went: the channels that took it, failed it, or passed over it."""
    if a.folded:
        return "folded into the loop end's message"
    if a.verdict != "intervene":
        return "not told"
    parts = [f"sent to {_channels(a.delivered)}" if a.delivered else "not sent"]
    if a.failed:
        parts.append(f"{_channels(a.failed)} failed")
    if a.skipped:
        parts.append(f"below the minimum severity of {_channels(a.skipped)}")
    if not (a.delivered or a.failed or a.skipped):
        return "no channel set"
    return "; ".join(parts)


def alert_lines(a: AlertRow) -> tuple[str, str]:
    """An alert as the report lists it: what and where it went, then the triage's reason."""
    went = _went(a)
    decided = f"triage ({a.by})" if a.by else "triage"
    return (f"{one_line(a.cause)} ({went})", f"{decided}: {one_line(a.why)}" if a.why else f"{decided}: {a.verdict}")


def run_heading(night: Night, number: int, count: int) -> str:
    """The line above each run when several are printed together."""
    if night.running:
        when, how = f"{stamp(night.started)}-", "still running"
    elif night.ended is None:
        when, how = f"{stamp(night.started)}-", "no end recorded"
    else:
        when = f"{stamp(night.started)} to {stamp(night.ended)}"
        code = "" if night.exit_code is None else f"exit {night.exit_code}"
        how = ": ".join(x for x in (code, one_line(night.reason)) if x) or "ended"
    return f"=== run {number} of {count}: {night.run_id} · {when} · {how} ==="


def _grid(*rows: list[str]) -> Table:
    """Aligned columns without borders; the last column wraps."""
    grid = Table.grid(padding=(0, 2))
    for _ in rows[0][:-1]:
        grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    for row in rows:
        grid.add_row(*row)
    return grid


def _iteration_table(night: Night) -> Table:
    names = phase_names(night)
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for i, header in enumerate(iteration_headers(names)):
        table.add_column(header, justify="right" if i == 0 or header in ("time", "commits", "tasks") else "left")
    for it in night.iterations:
        table.add_row(*iteration_cells(night, it, names))
    return table


def _cost_lines(night: Night) -> list[str]:
    def reported(value: str | None) -> str:
        return value if value is not None else "not reported"

    tokens_in, tokens_out = night.tokens
    turns = [p.turns for p in night.phases if p.turns is not None]
    lines = [f"total: {reported(None if night.cost_usd is None else money(night.cost_usd))}",
             f"tokens: in {reported(None if tokens_in is None else f'{tokens_in:,}')}, "
             f"out {reported(None if tokens_out is None else f'{tokens_out:,}')}",
             f"turns: {reported(str(sum(turns)) if turns else None)}"]
    by_phase: dict[str, float] = {}
    for p in night.phases:
        if p.cost_usd is not None:
            by_phase[p.phase] = by_phase.get(p.phase, 0.0) + p.cost_usd
    if len(by_phase) > 1:
        order = {name: n for n, name in enumerate(phase_names(night))}
        lines.append("by phase: " + ", ".join(f"{name} {money(by_phase[name])}"
                                              for name in sorted(by_phase, key=lambda name: order.get(name, 0))))
    by_iteration = night.cost_by_iteration
    if len(by_iteration) > 1:
        lines.append("by iteration: " + ", ".join(f"{iteration}: {money(cost)}" for iteration, cost in by_iteration))
    return lines


def render_text(night: Night, width: int = 100, sending: tuple[str, ...] | None = None) -> str:
    """The night as plain text: header, iteration table, then only the sections that have something to say.
    sending: the channels the loop's end's alert is still going to, as the loop knows at its end."""
    console = Console(record=True, width=width, force_terminal=False, color_system=None,
                      markup=False, emoji=False, highlight=False, file=io.StringIO())

    def section(title: str) -> None:
        console.print()
        console.print(title, soft_wrap=True)  # never broken inside the command a title may name

    # One line whatever the path's length: the line a user (or a script) looks for.
    console.print(f"Genesis run {night.run_id} · {one_line(night.project)}", soft_wrap=True)
    console.print(ending_line(night))
    if night.reason and not night.running:
        console.print(one_line(night.reason), soft_wrap=True)  # one line: it may name a command to run
    console.print(summary_line(night))
    if night.box:
        console.print(one_line(night.box), soft_wrap=True)  # what the agent could reach of the user's
    if night.refused:
        console.print(one_line(refused_line(night.refused)), soft_wrap=True)  # what it was kept from
    final = final_alert_line(night, sending)
    if final:
        console.print(final, soft_wrap=True)
    console.print()
    console.print(_iteration_table(night))

    if night.abnormal:
        section(f"abnormal phases ({len(night.abnormal)})")
        for p in night.abnormal:
            killed = f"; {plural(p.killed, 'process', 'processes')} ended" if p.killed else ""
            console.print(f"iteration {p.iteration} {phase_name(p)}: {label(p)} after {lasted(p)}{killed}")
            console.print(Padding(one_line(p.reason), (0, 0, 0, 4)))
            for line in p.tail:  # a transcript line is never wrapped: one line of the log, one line here
                console.print(f"    | {one_line(line)}", soft_wrap=True)
    if night.commit_troubles:
        failed = len(night.commit_failures)
        section(f"auto-commit troubles ({failed} failed, abnormal: the work was left uncommitted)" if failed
                else f"auto-commit troubles ({len(night.commit_troubles)})")
        for t in night.commit_troubles:
            what = TROUBLE_LABELS.get(t.kind, t.kind)
            console.print(f"{where(t.iteration, t.phase) or '-'}: {what}")
            console.print(Padding(one_line(t.text), (0, 0, 0, 4)))
    done = list(night.ticks)
    if done:
        section(f"tasks done ({len(done)})")
        console.print(_grid(*[[f"iteration {p.iteration} {p.phase}", one_line(task)] for p, task in done]))
    if night.evidence:
        section(evidence_title(night))
        for r in night.evidence:
            again = f"; reopened {plural(r.reopened, 'time')}" if r.reopened else ""
            console.print(f"{one_line(r.task)}: {r.said} ({where(r.iteration, r.phase) or '-'}, {clock(r.at)}"
                          f"{again})", soft_wrap=True)
            if r.command:
                ran = f"exit {r.exit_code}" if r.exit_code is not None else "killed or not started"
                took = f" after {duration(r.seconds)}" if r.seconds is not None else ""
                console.print(Padding(f"{one_line(r.command)}: {ran}{took}", (0, 0, 0, 4)))
            if r.outcome == "failed":
                for line in r.tail:
                    console.print(f"    | {one_line(line)}", soft_wrap=True)
    if night.history:
        section(f"history changed ({len(night.history)}; `{hint(night.project, 'restore')}` lists what the safety "
                f"refs keep)")
        for h in night.history:
            went_on = "allowed, the loop went on" if h.allowed else "the loop stopped"
            console.print(f"{where(h.iteration, h.phase) or '-'}: {h.kind} ({went_on})")
            console.print(Padding(one_line(h.text), (0, 0, 0, 4)))
    kept = [r for r in night.left_out if not r.commit]
    if kept:
        section(f"left out of commits ({len(kept)}; they stay in the work tree, uncommitted: commit one yourself "
                f"with `git add -f` if it is meant to be)")
        console.print(_grid(*[[where(r.iteration, r.phase) or "-", one_line(r.path), one_line(r.reason)]
                              for r in kept]))
    agents = [r for r in night.left_out if r.commit]
    if agents:
        section(f"committed by the agent itself, looking like a secret ({len(agents)}; not rewritten: check them)")
        console.print(_grid(*[[where(r.iteration, r.phase) or "-", one_line(r.path), f"in {one_line(r.commit)}",
                               one_line(r.reason)] for r in agents]))
    if night.commits:
        section(f"commits ({len(night.commits)})")
        console.print(_grid(*[[c.sha, clock(c.at), one_line(c.subject) + (f" ({where(c.iteration, c.phase)})"
                                                                           if where(c.iteration, c.phase) else "")
                               + (" ORPHANED: made off the phase's branch, on no branch of the run's"
                                  if c.orphaned else "")]
                              for c in night.commits]))
    if night.phases:
        section("cost and tokens (as the agents reported them)")
        for line in _cost_lines(night):
            console.print(line)
    if night.waits:
        section(f"waits ({len(night.waits)})")
        console.print(_grid(*[[WAIT_LABELS.get(w.kind, w.kind), wait_span(night, w),
                               ": ".join(x for x in (where(w.iteration, w.phase), one_line(w.reason)) if x)]
                              for w in night.waits]))
    if night.incidents:
        section(f"incidents ({len(night.incidents)}; `{hint(night.project, 'incidents', 'show', 'ID')}` prints one "
                f"in full)")
        for i in night.incidents:
            console.print("  ".join(x for x in (i.id, clock(i.at), where(i.iteration, i.phase), ending_label(i.kind))
                                    if x))
            console.print(Padding(one_line(i.reason), (0, 0, 0, 4)))
    if night.breaker_changes:
        section("breaker changes")
        console.print(_grid(*[[clock(b.at), where(b.iteration, None) or "-",
                               f"{b.before} -> {b.after} "
                               f"({plural(b.no_progress, 'iteration')} without progress)"]
                              for b in night.breaker_changes]))
    if night.alerts:
        section(f"alerts ({len(night.alerts)})")
        for a in night.alerts:
            what, why = alert_lines(a)
            console.print("  ".join((a.ticket_id, clock(a.at), a.severity, a.verdict, what)), soft_wrap=True)
            console.print(Padding(why, (0, 0, 0, 4)))
    if night.actions:
        section(f"actions ({len(night.actions)}: taken from the terminal, the dashboard or an alert)")
        for act in night.actions:
            console.print("  ".join(x for x in (clock(act.at), act.action, act.task, f"from the {act.source}",
                                                f"({act.credential})") if x), soft_wrap=True)
            console.print(Padding(one_line(act.said), (0, 0, 0, 4)))
    section("health KPIs")
    console.print(_grid(*[[name, value, why] for name, value, why in kpi_rows(night.kpis)]))
    # Fields not passed through one_line() (ids, kinds, phase names) come from Genesis; clean them anyway.
    return "".join(sanitize(line, None).rstrip() + "\n" for line in console.export_text(styles=False).splitlines())


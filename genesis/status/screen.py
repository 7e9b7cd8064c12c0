"""`genesis status`: a project's loop in one screenful, once or live (--watch), and the loops
running on this machine.

--watch on a terminal is a rich Live view on the alternate screen (like top: fine in tmux
and over SSH, and a resize is drawn anew at once); it reads the loop's state every
interval and redraws at least once a second, so ages and countdowns move. Ctrl-C ends it
with 0. When the output is not a terminal, --watch prints a plain snapshot every interval
instead, until it is interrupted or its reader goes.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence, TextIO

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from genesis import exitcodes, when
from genesis.health.heartbeat import BEFORE_TOOL, tool_event
from genesis.hints import hint
from genesis.redact import redact
from genesis.repo.gitcmd import NotARepository
from genesis.fleet import status as fleet_status  # the module: it imports this package's view
from genesis.sandbox.refused import refused_line
from genesis.status.document import document
from genesis.status.lately import lately
from genesis.status.loops import ENDED_WITHIN, Ended, Loop, Scanner, ended_loops
from genesis.status.view import RECENT, LastRun, Status, Totals, Wait, build, layout_of
from genesis.store.layout import Layout, work_tree_of
from genesis.store.looplock import FLEET_RUN
from genesis.words import duration, money, one_line

__all__ = ["run_status", "find_layout", "render", "home_short", "Frame", "TICK", "MIN_INTERVAL", "MAX_INTERVAL"]

TICK = 1.0             # the live screen is redrawn at least this often
POLL = 0.05            # how soon a watch sees Ctrl-C or a resize
MIN_INTERVAL = 0.2     # seconds between two reads of the loop's state, at least...
MAX_INTERVAL = 60.0    # ...and at most
TEXT_LIMIT = 300       # characters of one reason or event shown
DAY = 86400.0
FLEET_READ = 1.0       # seconds a refresh may spend reading a fleet's running children

HEALTH_STYLE = {"healthy": "green", "slow": "yellow", "stuck": "bold red", "wedged": "bold magenta"}
BREAKER_STYLE = {"CLOSED": "green", "HALF_OPEN": "yellow", "OPEN": "bold red"}


@dataclass(frozen=True)
class Frame:
    """One read of everything shown: the project's status and the machine's loops."""
    status: Status | None          # None: no project asked for or found
    loops: tuple[Loop, ...] | None  # None: not scanned
    ended: tuple[Ended, ...] | None = None  # the loops that ended lately (--all); None: not asked
    fleet: fleet_status.FleetStatus | None = None  # the project's fleet, when a fleet's monitor holds its loop lock

    @property
    def code(self) -> int:
        """0 when the loop asked about runs (with no project: when any loop on this machine
        runs), else NOT_RUNNING: a FROZEN loop (stopped by a signal) and a STOPPED one (killed)
        do not run."""
        running = self.status.state == "RUNNING" if self.status is not None else bool(self.loops)
        return exitcodes.OK if running else exitcodes.NOT_RUNNING


def run_status(project: Path | None, watch: bool = False, all_loops: bool = False, interval: float = 1.0,
               out: TextIO | None = None, recent: int = RECENT, clock: Callable[[], float] = time.time,
               as_json: bool = False) -> int:
    """Show the status of project's loop (None: of the git work tree around the working
    directory; outside any, the loops on this machine). all_loops: the loops on this
    machine and those that ended in the last 24 hours, with project's detail if one is
    given. as_json: one JSON document instead (document.py). Returns Frame.code (0 when the
    loop asked about runs, NOT_RUNNING when not); --watch returns 0 when ended by Ctrl-C.
    NotARepository when project is given and is not in a git work tree (with as_json, a
    document that says so, and USAGE)."""
    out = out if out is not None else sys.stdout
    if as_json:
        return _json(project, all_loops, out, recent, clock)
    layout = find_layout(project) if project is not None or not all_loops else None
    view = _View(layout, all_loops or layout is None, recent, clock, all_loops, _around(project, layout, all_loops))
    interval = min(MAX_INTERVAL, max(MIN_INTERVAL, interval))
    console = Console(file=out, highlight=False)
    if not watch:
        frame = view.read(scan=view.listing)
        _print(console, view.draw(frame))
        return frame.code
    if console.is_terminal:
        # The terminal's own size, always: an exported COLUMNS or LINES is a snapshot that a
        # resize leaves behind.
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
        return _live(Console(file=out, highlight=False, _environ=env), view, interval)
    return _plain(console, view, interval)


def _json(project: Path | None, all_loops: bool, out: TextIO, recent: int, clock: Callable[[], float]) -> int:
    """The status as one JSON document on out; its exit code is the plain command's."""
    try:
        layout = find_layout(project) if project is not None or not all_loops else None
    except NotARepository as exc:
        doc = document(None, exitcodes.USAGE, clock(), error=str(exc))
        out.write(json.dumps(doc, indent=2) + "\n")
        return exitcodes.USAGE
    view = _View(layout, all_loops or layout is None, recent, clock, all_loops, _around(project, layout, all_loops))
    frame = view.read(scan=all_loops or layout is None)
    listed = all_loops or layout is None
    doc = document(frame.status, frame.code, clock(), loops=frame.loops if listed else None, ended=frame.ended)
    out.write(json.dumps(doc, indent=2) + "\n")
    return frame.code


def _around(project: Path | None, layout: Layout | None, all_loops: bool) -> Layout | None:
    """The project whose ended loops --all lists besides the ones seen running: the one asked
    about, else the one around the working directory (None outside any)."""
    if not all_loops:
        return None
    return layout if layout is not None or project is not None else find_layout(None)


@dataclass
class _View:
    """What one `genesis status` shows, read and drawn again at each refresh."""
    layout: Layout | None
    listing: bool                  # the loops on this machine are asked for (or no project was found)
    recent: int
    clock: Callable[[], float]
    ended: bool = False            # the loops that ended lately are asked for (--all)
    home: Layout | None = None     # the project whose ended loops are listed besides the ones seen running
    scanner: Scanner = field(default_factory=Scanner)

    def read(self, scan: bool = True) -> Frame:
        status = build(self.layout, now=self.clock(), recent=self.recent) if self.layout is not None else None
        # A project whose loop is not running may not be the one the user meant (a status run
        # from another folder): the loops that do run are looked for too.
        scan = scan or self.ended or (status is not None and not status.running)
        loops = tuple(self.scanner.scan(now=self.clock())) if scan else None
        ended = None
        if self.ended:
            known = {lay.state_dir.resolve(): lay for lay in self.scanner.seen.values()}
            if self.home is not None:
                known.setdefault(self.home.state_dir.resolve(), self.home)
            for project, state in lately(self.clock(), ENDED_WITHIN):  # what ended where nothing runs now
                if state not in known:
                    try:
                        known[state] = layout_of(project, state)
                    except (NotARepository, OSError, ValueError):
                        continue
            ended = tuple(ended_loops(known.values(), self.clock()))
        fleet = None
        if status is not None and status.running and status.run_id.startswith(FLEET_RUN):
            try:  # a fleet runs here, not a loop: shown as a fleet, its children read within a bound
                fleet = fleet_status.read(self.layout.project, now=self.clock(), bound=FLEET_READ)
            except NotARepository:
                fleet = None
        return Frame(status, loops, ended, fleet)

    def draw(self, frame: Frame, watching: bool = False) -> RenderableType:
        # While watching, the other loops on this machine are shown too (one line each).
        return render(frame, self.clock(), mine=self.layout.project if self.layout else None, listing=self.listing,
                      watching=watching)


def find_layout(project: Path | None) -> Layout | None:
    """The layout of the git work tree at project (its top, from a subdirectory too); with
    no project, of the one around the working directory, or None outside any."""
    try:
        return layout_of(work_tree_of(Path(project) if project is not None else Path.cwd()))
    except NotARepository:
        if project is not None:
            raise
        return None


# --- watching -----------------------------------------------------------------------------

class _Signals:
    """Ctrl-C (and a hang-up or TERM) ends the watch cleanly; a resize redraws at once.

    The handlers only set flags, which the watch polls while it sleeps: a handler that took
    a lock (an Event's) could deadlock with the main thread it interrupts inside that lock.
    """

    def __init__(self) -> None:
        self.code: int | None = None
        self.resized = False
        self._old: dict[int, object] = {}

    def __enter__(self) -> "_Signals":
        if threading.current_thread() is not threading.main_thread():
            return self  # signals can only be caught in the main thread: the default handling stays
        for sig, code in ((signal.SIGINT, exitcodes.OK), (signal.SIGTERM, exitcodes.INTERRUPTED_TERM),
                          (signal.SIGHUP, exitcodes.INTERRUPTED_HUP)):
            self._old[sig] = signal.signal(sig, lambda _s, _f, code=code: self._stop(code))
        self._old[signal.SIGWINCH] = signal.signal(signal.SIGWINCH, lambda _s, _f: setattr(self, "resized", True))
        return self

    def _stop(self, code: int) -> None:
        if self.code is None:
            self.code = code

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]

    def sleep(self, seconds: float) -> None:
        """Sleep until seconds have passed, a stop signal came or the terminal was resized."""
        deadline = time.monotonic() + seconds
        while self.code is None and not self.resized:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(POLL, left))
        self.resized = False


class _Reader:
    """Reads frames on a thread of its own, every interval: a read that takes long (many loops
    on a loaded machine) never holds the screen, whose clock and countdowns move each second."""

    def __init__(self, view: _View, interval: float, first: Frame):
        self.view = view
        self.interval = interval
        self.frame = first
        self.count = 0                     # frames read so far: the screen redraws on a new one
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="status-reader", daemon=True)

    def __enter__(self) -> "_Reader":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()  # a read under way is not waited for: the thread is a daemon

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.frame = self.view.read()
            except BaseException as exc:  # noqa: BLE001 - raised again on the screen's thread
                self.error = exc
                return
            self.count += 1


def _live(console: Console, view: _View, interval: float) -> int:
    sigs = _Signals()
    try:
        with sigs, Live(console=console, screen=True, auto_refresh=False, redirect_stdout=False,
                        redirect_stderr=False) as live, _Reader(view, interval, view.read()) as reader:
            while sigs.code is None:
                if reader.error is not None:
                    raise reader.error
                drawn = reader.count
                live.update(view.draw(reader.frame, watching=True), refresh=True)
                # The next drawing: after a TICK, at once on a new frame, a stop or a resize.
                deadline = time.monotonic() + TICK
                while sigs.code is None and not sigs.resized and reader.count == drawn and \
                        time.monotonic() < deadline:
                    time.sleep(POLL)
                sigs.resized = False
    except OSError:
        if sigs.code != exitcodes.INTERRUPTED_HUP:
            raise  # after a hang-up the terminal is gone: restoring it cannot work, nor matter
    return sigs.code


def _plain(console: Console, view: _View, interval: float) -> int:
    with _Signals() as sigs:
        while sigs.code is None:
            try:
                _print(console, view.draw(view.read(), watching=True))
                console.file.write("\n")
                console.file.flush()
            except BrokenPipeError:
                _silence(console.file)
                return exitcodes.OK  # the reader went (`| head`): nothing more to show
            sigs.sleep(interval)
    return sigs.code


def _print(console: Console, renderable: RenderableType) -> None:
    """Print; to a file or a pipe without the padding that ends table cells (plain lines). Soft
    wrap: a command shown whole stays one line, to be copied as it is (tables still fold)."""
    if console.is_terminal:
        console.print(renderable, soft_wrap=True)
        return
    with console.capture() as captured:
        console.print(renderable, soft_wrap=True)
    console.file.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))


def _silence(file: TextIO) -> None:
    """Point a broken output at /dev/null, so that the flush at exit does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, file.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


# --- rendering ----------------------------------------------------------------------------

def _safe(text: object, limit: int = TEXT_LIMIT) -> str:
    """Text from the ledger or an agent, on one line, without escape codes or secrets."""
    return one_line(redact(str(text)), limit)


def _clock(epoch: float) -> str:
    return when.clock(epoch, seconds=True)


def _stamp(epoch: float) -> str:
    return when.stamp(epoch)


def _count(n: int) -> str:
    return f"{n / 1e6:.1f}M" if n >= 1_000_000 else f"{n / 1e3:.1f}k" if n >= 10_000 else str(n)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _ago(now: float, then: float) -> str:
    return f"{duration(max(0.0, now - then))} ago"


def render(frame: Frame, now: float, mine: Path | None = None, listing: bool = False,
           watching: bool = False) -> RenderableType:
    """The frame as seen at now (ages and countdowns from now, so a redraw moves them)."""
    parts: list[RenderableType] = []
    if frame.fleet is not None:
        if frame.status is not None and frame.status.note:
            parts.append(Text(_safe(frame.status.note, 300)))
        parts.append(fleet_status.render(frame.fleet))
    elif frame.status is not None:
        parts += _detail(frame.status, now)
    loops = frame.loops
    others = [lp for lp in loops or () if lp.project != mine]
    idle = frame.status is not None and not frame.status.running
    never = idle and frame.status.last_run is None  # no loop ever ran here: which one did the user mean?
    if loops is not None and (listing or never or (others and (watching or idle))):
        parts.append(Rule(Text(f"loops running on this machine: {len(loops)}"), style="dim", align="left"))
        parts.append(_loop_table(loops, now, mine) if loops else Text("no Genesis loop is running on this machine"))
    if frame.ended is not None:
        said = f"loops and fleets ended in the last {ENDED_WITHIN / 3600:g} hours: {len(frame.ended)}"
        parts.append(Rule(Text(said), style="dim", align="left"))
        parts.append(_ended_table(frame.ended, now, mine) if frame.ended else Text("none that this status knows of"))
    if watching:
        parts.append(Text(f"{_clock(now)} · Ctrl-C to quit", style="dim"))
    return Group(*parts)


def _detail(st: Status, now: float) -> list[RenderableType]:
    title = Text("genesis status · ") + Text(_safe(st.project, 200), style="bold")
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    if st.frozen:
        since = f"for {duration(now - st.frozen_since)} (since {_clock(st.frozen_since)})" \
            if st.frozen_since is not None else "(since when: not recorded yet)"
        grid.add_row("Loop", Text.assemble(("FROZEN", "bold red"), f"  run {_safe(st.run_id or '?', 80)} · pid "
                                           f"{st.pid or '?'} stopped by a signal {since}: nothing runs until "
                                           f"`kill -CONT {st.pid}`"))
    if st.running and not st.frozen:
        up = f" · up {duration(now - st.started)}" if st.started is not None else ""
        grid.add_row("Loop", Text.assemble(("RUNNING", "bold green"),
                                           f"  run {_safe(st.run_id or '?', 80)} · pid {st.pid or '?'}{up}"))
        grid.add_row("Now", _now(st, now))
        if st.phase is not None:
            grid.add_row("Health", _health(st, now))
            grid.add_row("Heartbeat", _heartbeat(st, now))
            grid.add_row("Tool", _tool(st, now))
    elif st.killed:
        when = f" at {_stamp(st.killed_at)} ({duration(now - st.killed_at)} ago)" if st.killed_at is not None else \
            " (no end recorded yet)"
        grid.add_row("Loop", Text.assemble(("STOPPED", "bold red"), f"  killed{when}: run {_safe(st.run_id, 80)}, "
                                           f"pid {st.pid or '?'}"))
        grid.add_row("Last run", _last_run(st))
    elif not st.running:
        grid.add_row("Loop", Text.assemble(("NOT RUNNING", "bold"), "  no loop is running on this project"))
        grid.add_row("Last run", _last_run(st))
    if st.wait is not None:
        grid.add_row("Wait", _wait(st.wait, now))
    grid.add_row("Breaker", _breaker(st, now))
    if st.tasks:
        grid.add_row("Tasks", Text(f"{st.tasks} (TASKS.md)"))
    if st.totals is not None:
        grid.add_row("Totals", _totals(st.totals, st.last_run, now))
        if st.totals.refused:  # what the box's allow-list kept the agent from
            grid.add_row("Network", Text(_safe(refused_line(st.totals.refused).removeprefix("network: ")),
                                         style="yellow"))
    if st.note and (st.running or st.last_run is not None):  # else "Last run" says it
        grid.add_row("Note", Text(_safe(st.note), style="yellow"))
    parts: list[RenderableType] = [Rule(title, align="left"), grid]
    if st.recent:
        parts.append(Rule(Text(f"recent events of run {_safe(st.run_id, 80)}"), style="dim", align="left"))
        events = Table.grid(padding=(0, 2))
        events.add_column(style="dim", no_wrap=True)
        events.add_column(overflow="fold")
        for line in st.recent:
            events.add_row(_clock(line.at), Text(_safe(line.text)))
        parts.append(events)
    return parts


def _now(st: Status, now: float) -> Text:
    if st.phase is not None:
        p = st.phase
        retry = f" (retry {p.attempt})" if p.attempt else ""
        where = f"iteration {p.iteration} · " if p.iteration is not None else ""
        return Text.assemble(where, (_safe(p.name, 100) + retry, "bold"), f" · running {duration(now - p.started)}")
    where = f"iteration {st.iteration} · " if st.iteration is not None else ""
    if st.wait is not None:
        return Text(f"{where}waiting out a {st.wait.label}")
    return Text(f"{where}between phases" if st.run_id else "starting")


def _health(st: Status, now: float) -> Text:
    h = st.health
    if h is None:
        return Text("no check yet", style="dim")
    text = Text.assemble((_safe(h.classification, 40), HEALTH_STYLE.get(h.classification, "bold")))
    if h.stall_score is not None:
        text.append(f" · stall score {min(h.stall_score, 1.0):.2f}")  # an older record may hold more
    if h.at is not None:
        text.append(f" · checked {_ago(now, h.at)}")
    if h.turns is not None:
        text.append(f" · {_plural(h.turns, 'turn')}")
    if st.phase is not None and st.phase.attempt:
        text.append(f" · recovering: retry {st.phase.attempt} after a stall", style="yellow")
    if h.reason and h.classification != "healthy":
        text.append(f" · {_safe(h.reason)}")
    return text


def _heartbeat(st: Status, now: float) -> Text:
    b = st.beat
    if b is None:
        return Text("none yet this phase (the agent has called no tool)", style="dim")
    what = " ".join(x for x in (_safe(b.event, 40), _safe(b.tool, 60)) if x)
    return Text(_ago(now, b.epoch) + (f" · {what}" if what else ""))


def _tool(st: Status, now: float) -> Text:
    if st.health is not None and st.health.tool_in_flight:
        return Text(_safe(st.health.tool_in_flight))
    b = st.beat
    if b is not None and tool_event(b.event) == BEFORE_TOOL and b.tool:
        return Text(f"{_safe(b.tool, 60)} (since {_clock(b.epoch)}, {duration(now - b.epoch)})")
    return Text("none in flight", style="dim")


def _wait(w: Wait, now: float) -> Text:
    left = max(0.0, w.until - now)
    text = Text.assemble((w.label, "bold yellow"), f" · {duration(left)} left · until {_clock(w.until)}")
    if w.reason:
        text.append(f" · {_safe(w.reason)}")
    return text


def _breaker(st: Status, now: float) -> Text:
    b = st.breaker
    if b is None:
        return Text.assemble(("CLOSED", "green"), " · no breaker file yet")
    text = Text.assemble((b.state, BREAKER_STYLE.get(b.state, "bold")))
    if b.problem:
        return text.append(f" · {_safe(b.problem)}")
    text.append(f" · {_plural(b.no_progress, 'iteration')} without progress")
    if b.state == "OPEN" and b.retry_at is not None:
        text.append(f" · next trial in {duration(max(0.0, b.retry_at - now))} ({_clock(b.retry_at)})")
    return text


def _last_run(st: Status) -> Text:
    r = st.last_run
    if r is None:
        return Text(_safe(st.note or "no run recorded yet"), style="dim")
    text = Text(f"{_safe(r.run_id, 80)}: started {_stamp(r.started)}, ")
    if r.ended is None:
        return text.append("no end recorded (the loop was killed, or its machine stopped)", style="yellow")
    ok = r.exit_code == 0
    return text.append(f"ended {_stamp(r.ended)} after {duration(r.ended - r.started)}: ").append(
        f"{_safe(r.reason)} (exit {r.exit_code})", style="green" if ok else "red")


def span(t: Totals, last: LastRun | None, now: float) -> str:
    """Which run the totals are of, and when: "this run, since 22:41 CET", or "last run,
    22:41-04:10 CET, ended: circuit breaker OPEN"."""
    if t.current:
        return f"this run, since {_short(t.since, now)}"
    end = last if last is not None and last.run_id == t.run_id else None
    if t.until is None:
        return f"last run, since {_short(t.since, now)}, no end recorded"
    said = f": {_safe(end.reason, 120)}" if end is not None and end.reason else ""
    if t.until - t.since >= DAY:
        return f"last run, {when.stamp(t.since)} to {when.stamp(t.until)}, ended{said}"
    start, stop, zone = when.clock(t.since), when.clock(t.until), " " + when.zone(t.until)
    if when.zone(t.since) == when.zone(t.until):
        start = start[:-len(zone)]  # one zone said once: 22:41-04:10 CET
    return f"last run, {start}-{stop}, ended{said}"


def _short(epoch: float, other: float) -> str:
    """A time of day, with its date when the two are more than a day apart (it could not tell which day)."""
    return when.clock(epoch) if abs(epoch - other) < DAY else when.stamp(epoch)


def _totals(t: Totals, last: LastRun | None, now: float) -> Text:
    text = Text(f"{span(t, last, now)}: ", style="bold")
    text.append(f"{_plural(t.iterations, 'iteration')} · {_plural(t.phases, 'phase')} run: {t.finished} finished, ")
    text.append(f"{t.abnormal} abnormal", style="red" if t.abnormal else "")
    if t.cost_usd is not None:
        text.append(f" · {money(t.cost_usd)}")
    if t.input_tokens is not None or t.output_tokens is not None:
        text.append(f" · tokens {_count(t.input_tokens or 0)} in, {_count(t.output_tokens or 0)} out")
    retries = f"{t.retries} retr{'y' if t.retries == 1 else 'ies'}"
    word = f" ({t.on_word} on the agent's word: no check)" if t.on_word else ""
    text.append(f" · {_plural(t.commits, 'commit')} · {_plural(t.tasks_done, 'task')} done{word} · "
                f"{_plural(t.incidents, 'incident')} · {retries} · {_plural(t.waits, 'wait')}")
    if t.waits:
        text.append(f" ({duration(t.waited)})")
    return text


def _loop_table(loops: Sequence[Loop], now: float, mine: Path | None) -> Group:
    """One line each, cut at the terminal's edge: the project's name first, its path last; under
    each other project's line, whole, the command that shows it."""
    names = [_safe(lp.project.name, 30) for lp in loops]
    width = max(len(n) for n in names)
    lines = []
    for lp, name in zip(loops, names):
        up = f" · up {duration(now - lp.started)}" if lp.started is not None else ""
        line = Text.assemble("▶ " if lp.project == mine else "  ", (name.ljust(width), "bold"),
                             f"  pid {lp.pid or '?'}{up}  ", _doing(lp, now), "  ",
                             (_safe(home_short(lp.project), 300), "dim"), no_wrap=True, overflow="ellipsis")
        lines.append(line)
        if lp.project != mine:
            lines.append(Text(f"    {_safe(hint(lp.project, 'status'), 600)}", style="dim", no_wrap=True,
                              overflow="ignore"))
    return Group(*lines)


def _ended_table(ended: Sequence[Ended], now: float, mine: Path | None) -> Group:
    """One line each, latest end first: the project, the run, when and how it ended."""
    names = [_safe(e.project.name, 30) for e in ended]
    width = max(len(n) for n in names)
    lines = []
    for e, name in zip(ended, names):
        if e.ended is None:
            how = Text(f"started {_stamp(e.started)}, no end recorded (killed)", style="yellow")
        else:
            how = Text(f"ended {_stamp(e.ended)} ({_ago(now, e.ended)}) after {duration(e.ended - e.started)}: ")
            how.append(f"{_safe(e.reason or '?', 120)} (exit {e.exit_code if e.exit_code is not None else '?'})",
                       style="green" if e.exit_code == 0 else "red")
        lines.append(Text.assemble("▶ " if e.project == mine else "  ", (name.ljust(width), "bold"),
                                   "  fleet" if e.kind == "fleet" else "", f"  run {_safe(e.run_id, 80)}  ", how, "  ",
                                   (_safe(home_short(e.project), 300), "dim"), no_wrap=True, overflow="ellipsis"))
    return Group(*lines)


def home_short(path: Path) -> str:
    """path as its reader says it: `~/...` under the home folder."""
    home = os.path.expanduser("~")
    text = str(path)
    return "~" + text[len(home):] if home not in ("", "/") and text.startswith(home + os.sep) else text


def _doing(lp: Loop, now: float) -> Text:
    where = f"iteration {lp.iteration} · " if lp.iteration is not None else ""
    if lp.phase is not None:
        text = Text(f"{where}{_safe(lp.phase.name, 100)} {duration(now - lp.phase.started)}")
        if lp.health:
            text.append(f" · {lp.health}", style=HEALTH_STYLE.get(lp.health, ""))
        return text
    if lp.wait is not None:
        return Text(f"{where}{lp.wait.label}, {duration(max(0.0, lp.wait.until - now))} left", style="yellow")
    return Text(f"{where}between phases")

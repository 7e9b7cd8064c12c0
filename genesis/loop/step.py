"""What every step of the loop shares: its configuration, layout, run id and voice."""

from __future__ import annotations

import calendar
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from genesis.agents import adapter_of
from genesis.config import Config
from genesis.ledger.legacy import import_events
from genesis.ledger.store import Ledger, LedgerError
from genesis.loop.raising import raise_ticket
from genesis.procs.markers import markers_for
from genesis.store.atomicio import DiskFull
from genesis.store.layout import Layout
from genesis.words import details

__all__ = ["Step", "StepFailed", "agent_env", "is_claude", "reads_prompt_from_stdin", "ledger_of", "forget_ledger"]

Say = Callable[[str, str], None]

_LEDGERS: dict[Path, Ledger] = {}  # one writer connection per ledger for the life of a step's process
_RESUMED: set[tuple[Path, str]] = set()  # (ledger, run) whose start this process found recorded, or recorded again


def ledger_of(layout: Layout) -> Ledger:
    """The ledger of the layout's project, opened for writing once per process (an older
    events.jsonl beside a new ledger is brought in first)."""
    path = layout.ledger_file
    if path not in _LEDGERS:
        fresh = not path.exists()
        led = Ledger.open(path)
        if fresh:
            import_events(led, layout.legacy_events_file)
        _LEDGERS[path] = led
    return _LEDGERS[path]


def forget_ledger(layout: Layout) -> None:
    """Let go of this process's ledger of the layout (its file was deleted under it): the next
    event opens the ledger at its path again."""
    _RESUMED.difference_update({key for key in _RESUMED if key[0] == layout.ledger_file})
    led = _LEDGERS.pop(layout.ledger_file, None)
    if led is not None:
        try:
            led.close()
        except Exception:  # noqa: BLE001 - closing a connection to a deleted file: nothing to keep
            pass


class StepFailed(Exception):
    """A step cannot go on; carries the exit code the loop should stop with."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Step:
    cfg: Config
    layout: Layout
    run_id: str
    say: Say
    started: bool = False  # a step of a run preflight started: its start is in the ledger, or lost

    def event(self, kind: str, /, **detail) -> None:
        """Record an event in the ledger; when it cannot be (a full disk, a writer holding the
        ledger past its bound), say it instead: the record is not lost on the user, and the
        step goes on (on a full disk, to stop the loop cleanly at its next write)."""

        try:
            self._said(ledger_of(self.layout)).record(self.run_id, kind, **detail)
        except (DiskFull, LedgerError) as exc:
            self.say(f"not recorded in the ledger: {kind.replace('_', ' ')} ({details(detail)}): {exc}", "error")
            if isinstance(exc, DiskFull):
                raise_ticket(self, "disk_full", {"path": str(exc.path), "free": exc.free, "needed": exc.need})
        raise_ticket(self, kind, detail)

    def events(self, kinds: tuple[str, ...] | None = None, iteration: int | None = None) -> list[dict]:
        """This run's events so far (of those kinds, in that iteration), oldest first."""
        try:
            return self._said(ledger_of(self.layout)).events(self.run_id, kinds=kinds, iteration=iteration)
        except LedgerError as exc:
            self.say(f"cannot read the ledger ({exc}); going on without this run's history", "warn")
            return []

    def _said(self, led: Ledger) -> Ledger:
        """The ledger, once its being kept aside and started anew (if it was) is said, and a
        started run whose record went with the old one (damaged, or deleted with the state
        folder) is started again in it: the rest of the night and its report are recorded."""
        if led.reset_note:
            note, led.reset_note = led.reset_note, None
            self.say(note, "warn")
        if self.started and (led.path, self.run_id) not in _RESUMED:
            _RESUMED.add((led.path, self.run_id))
            if not led.events(self.run_id, kinds=("loop_start",), limit=1):
                self._start_again(led)
        return led

    def _start_again(self, led: Ledger) -> None:
        try:  # at the run's real start (its id says when), which the runtime ceiling counts from
            started = float(calendar.timegm(time.strptime(self.run_id.split("-")[0], "%Y%m%dT%H%M%SZ")))
        except ValueError:
            started = None
        resets = [e for e in led.events("-", kinds=("ledger_reset",)) if started is None or e["epoch"] >= started]
        why = (f"the ledger was damaged and kept aside as {resets[-1].get('kept')}" if resets
               else "the ledger was deleted or replaced")
        self.say(f"this run's record so far is not in the ledger ({why}); it goes on in the new one, and the console "
                 f"log {self.rel(self.layout.console_log(self.run_id))} keeps what went before", "warn")
        cfg = self.cfg
        led.record(self.run_id, "loop_start", at=started, project=str(cfg.project), pid=os.getppid(),
                   agent=list(cfg.agent_cmd), phases=[p.name for p in cfg.phases], again=why)

    def rel(self, path: Path) -> str:
        try:
            return str(path.relative_to(Path.cwd()))
        except ValueError:
            return str(path)


STREAM_IDLE_VAR = "CLAUDE_BYTE_STREAM_IDLE_TIMEOUT_MS"  # Claude Code's watchdog of the API's stream


def is_claude(cfg: Config) -> bool:
    return adapter_of(cfg).name == "claude"


def agent_env(step: Step, phase: str, iteration: int) -> dict[str, str]:
    """The environment of a phase's agent: what its CLI needs unattended (unless the user set
    it), the caller's, the loop's markers and where to beat."""

    # PWD too: the agent starts in the project, and some CLIs (opencode) trust $PWD over their real cwd.
    # A fleet's child passes on its task and port range (GENESIS_TASK, PORT...: loop/onetask.py), not
    # where the fleet's state is: that is the monitor's, never the agent's business.
    env = {**adapter_of(step.cfg).environment(), **os.environ, **markers_for(step.cfg.project, step.run_id),
           "PWD": str(step.cfg.project), "GENESIS_AGENT": phase,
           "GENESIS_HEARTBEAT_FILE": str(step.layout.heartbeat_file(phase)), "GENESIS_ITERATION": str(iteration)}
    env.pop("GENESIS_FLEET_DIR", None)
    if is_claude(step.cfg) and step.cfg.stream_idle_window and STREAM_IDLE_VAR not in env:
        # Its own watchdog sees the API's bytes (thinking streams them; a dead stream sends none):
        # it tells a dead stream from a model thinking, which no silence on its output can.
        env[STREAM_IDLE_VAR] = str(int(step.cfg.stream_idle_window * 1000))
    return env


def reads_prompt_from_stdin(cfg: Config) -> bool:
    """`claude -p` takes its prompt on stdin when none is given: the way for a huge prompt."""

    return adapter_of(cfg).prompt_on_stdin

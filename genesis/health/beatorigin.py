"""Whose heartbeat it is: the CLI's own hook call, or a loop the agent runs below a tool.

An agent whose real work hangs can start a background loop that calls the hook every
second; its beats look fresh, and only the runtime cap would end the phase. The hook
records who ran it (Heartbeat.ppids: its parent and ancestors, nearest first). A CLI runs
its hooks itself, or through a shell it starts for the hook and that is gone within
milliseconds; every tool of the agent's, and whatever a tool starts, runs below the CLI.
So the runner of a beat (the first of its ancestors still alive, started before the beat)
is the CLI for the CLI's own beats, and something below it (or outside the agent's tree,
once orphaned) for a forged one.

The judge knows the CLI as the runner of the phase's first hook call (the tool log keeps
every call; the heartbeat only the newest), then as the highest runner seen (nearest the
agent's root: the CLI, however it was launched), and counts a beat as a sign of life only when its runner is that one. A
runner started within TRANSIENT seconds before its beat (a shell the CLI started for the
hook, caught still exiting) is looked past, to its own parent. A beat with no ancestors
recorded (a hook older than this, a CLI that writes beats some other way) is judged as
before: it counts.

What it cannot tell: a heartbeat file written directly, not through the hook, says what its
writer wants (the file is the agent's to write, box or not: its hook writes it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from genesis.health.heartbeat import Heartbeat
from genesis.procs.proctree import ProcId

__all__ = ["TRANSIENT", "Procs", "Verdict", "Origins"]

TRANSIENT = 2.0   # seconds: a hook's own shell lives milliseconds, a forging loop for its whole life
SLACK = 0.5       # seconds of clock granularity between a process's start time and a beat's epoch


class Procs(Protocol):
    def resolve(self, pid: int) -> ProcId | None:
        """The live process pid names, if it is the agent's (its root or below); None otherwise."""

    def alive(self, ident: ProcId) -> bool:
        """Whether that very process still runs."""

    def above(self, upper: ProcId, lower: ProcId) -> bool:
        """Whether upper is an ancestor of lower."""


@dataclass(frozen=True)
class Verdict:
    counts: bool
    runner: ProcId | None = None   # who ran the hook, as judged
    why: str = ""                  # why it does not count


@dataclass
class Origins:
    """One phase's judge of its beats; remembers the CLI (the highest runner seen)."""
    root: ProcId | None
    cli: ProcId | None = None
    judged: dict[tuple[float, tuple[int, ...]], Verdict] = field(default_factory=dict)

    def pin(self, ppids: tuple[int, ...], epoch: float, procs: Procs) -> None:
        """Know the CLI from the phase's first hook call (the tool log's first line): the CLI's own
        first call comes before any tool of its runs, so before anything a tool could start."""
        if self.cli is None and ppids:
            self._judge(Heartbeat(epoch, "", "", "", "", "", None, "", ppids), procs)

    def judge(self, beat: Heartbeat, procs: Procs) -> Verdict:
        key = (beat.epoch, beat.ppids)
        if key not in self.judged:
            self.judged = {key: self._judge(beat, procs)}  # only the newest beat is read again
        return self.judged[key]

    def _judge(self, beat: Heartbeat, procs: Procs) -> Verdict:
        if not beat.ppids:
            return Verdict(True)
        pinned = self.cli is not None and procs.alive(self.cli)
        runner = self._runner(beat, procs, pinned)
        if runner is None:
            if not pinned:
                return Verdict(True)  # nothing to tell it by yet
            return Verdict(False, None, f"the hook was run by none of the agent's live processes (its ancestors "
                                        f"{', '.join(map(str, beat.ppids[:4]))} are gone or outside the agent's "
                                        f"tree), not by the CLI (pid {self.cli.pid})")
        if not pinned or runner == self.cli or procs.above(runner, self.cli):
            self.cli = runner
            return Verdict(True, runner)
        return Verdict(False, runner, f"the hook was run by pid {runner.pid}, a process below the CLI's tools "
                                      f"(a loop calling the hook), not by the CLI (pid {self.cli.pid})")

    def _runner(self, beat: Heartbeat, procs: Procs, pinned: bool) -> ProcId | None:
        """The first of the hook's ancestors alive now and started before the beat; once the
        CLI is known, a young one that is not the CLI is looked past."""
        for pid in beat.ppids:
            ident = procs.resolve(pid)
            if ident is None or ident.create_time > beat.epoch + SLACK:
                continue  # gone (the hook's own shell), outside the agent's tree, or a recycled pid
            if pinned and ident != self.cli and ident != self.root and beat.epoch - ident.create_time < TRANSIENT:
                continue
            return ident
        return None

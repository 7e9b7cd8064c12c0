"""The home's copy of a Temporal fleet in the project's own fleet ledger, so that `genesis fleet
status`, `genesis report` and `genesis serve` show it as they show a local fleet, and go on
showing it once the fleet (or the server) is gone.

Temporal holds the truth: each task's memo (its row and attempts) and its history (the tries
a lost worker cost). A try lost with its machine is mirrored as an attempt of its own, ended
`stopped` (it spends no restart, as a stopped child does not): "its worker on B was lost ...",
followed by the try that finished it elsewhere.

Each attempt is copied once, keyed by (task, attempt, its start): the key goes into its
`child_end` event, so a restarted home (a new Mirror on the same ledger) copies only what the
home before it had not.

What a sync saw happen (an attempt started or ended, a task came home) is also kept in `lines`,
in the local monitor's words, for the home's console to say.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from genesis.fleet.cascade import EVENTS as CASCADE_EVENTS
from genesis.fleet.ledger import KINDS, OUTCOMES, FleetLedger, TaskRow
from genesis.fleet import lifecycle
from genesis.fleet.lines import ended_line, merged_line, started_line
from genesis.temporal.reading import Try

__all__ = ["Mirror", "FLEET_STATES"]

# The fleet workflow's word for a task wins over the task's own (a verified task is then merged).
FLEET_STATES = lifecycle.TERMINAL | {lifecycle.Task.MERGING}


@dataclass
class Mirror:
    path: Path
    run_id: str
    done: dict[str, int] = field(default_factory=dict)    # task -> memo attempts mirrored
    recorded: set[tuple[str, str]] = field(default_factory=set)   # (task, event) recorded once
    started: dict[str, int] = field(default_factory=dict)  # task -> memo attempts whose start was said
    lines: list[str] = field(default_factory=list)         # what happened since the console last took them
    copied: set[tuple[str, int, float]] | None = None      # (task, attempt, started) in the ledger: read once

    def take_lines(self) -> list[str]:
        taken, self.lines = self.lines, []
        return taken

    def start(self, parallel: int, workflow_id: str, address: str, now: float) -> None:
        with FleetLedger.open(self.path) as led:
            led.record("fleet_start", None, now, run_id=self.run_id, parallel=parallel, engine="temporal",
                       workflow_id=workflow_id, address=address)

    def end(self, code: int, reason: str, now: float) -> None:
        with FleetLedger.open(self.path) as led:
            led.record("fleet_end", None, now, exit_code=code, reason=reason, run_id=self.run_id)

    def sync(self, fleet: dict, tasks: dict[str, dict], tries: dict[str, list[Try]], account: dict | None = None,
             now: float | None = None) -> None:
        """What the memos say now, written once each: new rows and states, ended attempts, merges,
        and the account's limit while it holds (as the local monitor's limit_hold)."""
        states = fleet.get("tasks", {}) if isinstance(fleet.get("tasks"), dict) else {}
        with FleetLedger.open(self.path) as led:
            if self.copied is None:
                self.copied = {key for e in led.events("child_end") if (key := _key_of(e.task_id, e.detail))}
            self._limit(led, account or {}, now)
            for task_id, memo in tasks.items():
                row = memo.get("row") if isinstance(memo, dict) else None
                if not isinstance(row, dict):
                    continue
                said = states.get(task_id, {})
                runs = [t for t in tries.get(task_id, []) if t.activity == "run_attempt"]
                attempts = [a for a in memo.get("attempts", []) if isinstance(a, dict)]
                text = str(row.get("text", ""))
                for index, attempt in enumerate(attempts):   # in order: each start before its end
                    if _key(task_id, attempt, index) in self.copied:   # a home before this one copied it
                        self.done[task_id] = max(self.done.get(task_id, 0), index + 1)
                        self.started[task_id] = max(self.started.get(task_id, 0), index + 1)
                        continue
                    if index >= self.started.get(task_id, 0):
                        self._said_start(text, attempt, index + 1)
                        self.started[task_id] = index + 1
                    if index != self.done.get(task_id, 0) or attempt.get("ended") is None:
                        continue
                    self._attempt(led, task_id, attempt, runs[index] if index < len(runs) else None,
                                  _key(task_id, attempt, index))
                    self.done[task_id] = index + 1
                    code = attempt.get("exit_code")
                    self.lines.append(ended_line(text, code if isinstance(code, int) else None,
                                                 str(attempt.get("outcome") or "failed"),
                                                 str(attempt.get("reason") or "")))
                state = said.get("state") if said.get("state") in FLEET_STATES else row.get("state", "queued")
                if state == "verified":   # the task workflow's own word: the fleet takes it home
                    state = lifecycle.as_ledger(state)
                mirrored = len(led.attempts(task_id))
                reason = str(said.get("reason") or row.get("reason") or "")
                run_id, running = "", memo.get("running") if isinstance(memo.get("running"), dict) else {}
                if running and state == "running" and attempts and attempts[-1].get("ended") is None:
                    # the attempt under way counts, and says where it runs (its worker's heartbeat)
                    mirrored += 1
                    run_id = str(running.get("run_id") or "")
                    reason = reason or _where(running, len(attempts))
                led.upsert_task(TaskRow(
                    task_id, str(row.get("text", "")), state, int(row.get("strategy", 0)), mirrored,
                    int(row.get("restarts", 0)), int(row.get("escalations", 0)), str(row.get("branch", "")),
                    "", reason, str(said.get("sha") or ""),
                    run_id, None, float(row.get("not_before", 0.0)), float(row.get("updated", 0.0)),
                    float(row.get("created", 0.0))))
                self._events(led, task_id, text, state, said)
            self._cascade(led, fleet.get("cascade"))

    def _limit(self, led: FleetLedger, account: dict, now: float | None) -> None:
        """A limit the account's timer holds now: one limit_hold per reset, so the status shows
        the fleet-wide hold and its countdown (it ends by itself at `until`, as the local one)."""
        now = led.clock() if now is None else now
        until = account.get("until")
        if not isinstance(until, (int, float)) or isinstance(until, bool) or until <= now:
            return
        key = ("", f"limit_hold@{until!r}")
        if key not in self.recorded:
            self.recorded.add(key)
            led.record("limit_hold", None, now, until=float(until),
                       reason="a usage limit on the account: every task on it, on every machine, is held "
                              "until its reset")

    def _cascade(self, led: FleetLedger, gate: object) -> None:
        """The cascade gate's moves (the fleet's memo keeps its last ones), as the local monitor
        records them: the status shows the pause and the probe from them."""
        moves = gate.get("moves") if isinstance(gate, dict) else None
        for move in moves if isinstance(moves, list) else []:
            if not (isinstance(move, list) and len(move) == 4 and move[1] in CASCADE_EVENTS and
                    isinstance(move[0], (int, float))):
                continue
            key = ("", f"{move[1]}@{move[0]!r}")
            if key not in self.recorded:
                self.recorded.add(key)
                led.record(move[1], str(move[3]) if move[3] else None, float(move[0]), reason=str(move[2] or ""))

    def _attempt(self, led: FleetLedger, task_id: str, a: dict, run: Try | None,
                 key: tuple[str, int, float]) -> None:
        kind = a.get("kind") if a.get("kind") in KINDS else "start"
        outcome = a.get("outcome") if a.get("outcome") in OUTCOMES else "failed"
        host, tries = str(a.get("host") or "?"), int(a.get("tries") or 1)
        agent, strategy = str(a.get("agent", "")), int(a.get("strategy", 0))
        started, ended = float(a.get("started") or 0.0), float(a.get("ended") or 0.0)
        if tries > 1:
            retried = run.started_at if run is not None and run.started_at else started
            lost = str(a.get("lost") or "?")
            why = (f"its worker was lost ({lost}; {run.last_failure if run is not None else 'timed out'}); "
                   f"Temporal started it again on {host} {retried - started:.1f}s after this try began"
                   + (f", {tries - 1} tries lost" if tries > 2 else ""))
            first = led.begin_attempt(task_id, kind, why, agent, "", started, strategy)
            led.end_attempt(task_id, first.attempt, None, "stopped", retried)
            led.record("child_end", task_id, retried, attempt=first.attempt, outcome="stopped", host=lost,
                       reason=why)
            kind, started = "resume", retried
        reason = str(a.get("reason") or "")
        on = f"on {host}" + (" (a fresh clone of its branch)" if a.get("fresh_clone") else "") + \
            (" (adopted its running loop)" if a.get("adopted") else "")
        now = led.begin_attempt(task_id, kind, f"{on}: {reason}" if reason else on, agent, str(a.get("run_id", "")),
                                started, strategy)
        code = a.get("exit_code")
        led.end_attempt(task_id, now.attempt, code if isinstance(code, int) else None, outcome, ended)
        # Where it ran (and whether on a fresh clone or by adopting a loop) is part of how it
        # ended: the report's attempts and timeline show the end's words.
        led.record("child_end", task_id, ended, attempt=now.attempt, outcome=outcome, host=host,
                   cost_usd=a.get("cost"), run_id=str(a.get("run_id", "")),
                   reason=f"{on}: {reason}" if reason else on,
                   temporal_attempt=key[1], temporal_started=key[2])
        self.copied.add(key)

    def _said_start(self, text: str, a: dict, number: int) -> None:
        kind = a.get("kind") if a.get("kind") in KINDS else "start"
        host, said = str(a.get("host") or ""), a.get("attempt")
        number = said if isinstance(said, int) and not isinstance(said, bool) and said > 0 else number
        self.lines.append(started_line(text, kind, number, str(a.get("agent", ""))) + (f" on {host}" if host else ""))

    def _events(self, led: FleetLedger, task_id: str, text: str, state: str, said: dict) -> None:
        kind = {"merged": "merged", "ready": "merged", "failed": "failed_permanently",
                "needs-review": "needs_review"}.get(state)
        if kind is None or (task_id, kind) in self.recorded:
            return
        self.recorded.add((task_id, kind))
        if kind == "merged":
            self.lines.append(merged_line(text, state, str(said.get("sha") or "")))
        led.record(kind, task_id, sha=str(said.get("sha") or ""), reason=str(said.get("reason") or ""),
                   outcome=state)


def _key(task_id: str, a: dict, index: int) -> tuple[str, int, float]:
    """An attempt of the memo, the same for every home: its task, number and start (a later fleet
    of the same project numbers its attempts from 1 again, at other times)."""
    number = a.get("attempt")
    number = number if isinstance(number, int) and not isinstance(number, bool) and number > 0 else index + 1
    started = a.get("started")
    return task_id, number, round(float(started), 3) if isinstance(started, (int, float)) else 0.0


def _key_of(task_id: str | None, detail: object) -> tuple[str, int, float] | None:
    """The key a child_end event of ours carries (None: a local fleet's, or one written before keys)."""
    if not task_id or not isinstance(detail, dict):
        return None
    number, started = detail.get("temporal_attempt"), detail.get("temporal_started")
    if not isinstance(number, int) or not isinstance(started, (int, float)):
        return None
    return task_id, number, round(float(started), 3)


def _where(running: dict, number: int) -> str:
    """The running attempt in words: its number, machine, stage, loop and worktree there."""
    host, stage = str(running.get("host") or "a machine"), str(running.get("stage") or "starting")
    tries = running.get("tries")
    said = f"attempt {number} on {host}: {stage}"
    if isinstance(tries, int) and tries > 1:
        said += f" (Temporal's try {tries})"
    if running.get("pid"):
        said += f", pid {running['pid']}"
    if running.get("worktree"):
        said += f", in {running['worktree']}"
    return said

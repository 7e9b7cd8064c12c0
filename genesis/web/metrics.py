"""The dashboard's metrics: how agent runs end, by agent CLI, model, task and project; restarts,
escalations and failures over time; how many retries work needed; what the retries cost.

Read from the ledgers, read-only: a project's own loop ledger (`<git dir>/genesis/ledger.sqlite3`:
each phase run, with the agent and model its start recorded) and its fleet ledger (each task's
attempts: one child loop's run each, with the CLI and model its launch recorded). A running
child's cost so far is read from its own ledger, found beside the project's git dir. Every
ledger is read within MAX_ROWS rows; one that cannot be read is said in `error` and the other
projects still count. docs/reference/dashboard-metrics.md describes the document.
"""

from __future__ import annotations

import functools
import json
import math
import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from genesis.agents import adapter_for
from genesis.agents.models import model_of
from genesis.clock import iso
from genesis.fleet.ledger import FleetLedger
from genesis.ledger.store import Ledger, LedgerError
from genesis.redact import redact
from genesis.store.layout import Layout
from genesis.words import one_line

__all__ = ["ProjectSource", "Run", "metrics", "FAILED_ENDINGS", "SUCCEEDED_ENDINGS", "FAILED_OUTCOMES",
           "SUCCEEDED_OUTCOMES", "RETRY_KINDS", "MAX_ROWS", "MAX_BUCKETS", "HISTOGRAM", "SCHEMA"]

SCHEMA = 1
MAX_ROWS = 20_000            # rows read from one ledger, at most (the newest)
MAX_CHILD_LEDGERS = 50       # fleet children's own ledgers opened per project, at most
GITDIR_BYTES = 4096          # a worktree's `gitdir` file: one path
MAX_KEYS = 100               # rows per dimension, at most (those with the most runs)
KEY_CHARS = 80               # a row's key, at most
LONG_SPAN = 6 * 3600         # a span longer than this is bucketed by the hour, else by 10 minutes
MAX_BUCKETS = 168            # buckets over time, at most (a week of hours): the newest
HISTOGRAM = ("0", "1", "2", "3", "4+")
# The model each phase's agent said it used (its CLI's own records: Claude Code's result, Gemini's
# init), from its end; the command line's model (or none: `default`) only where no record names one.
USED = ("SELECT run_id, iteration, phase, json_extract(detail, '$.started'), json_extract(detail, '$.model_used') "
        "FROM events WHERE kind = 'phase_end' AND at >= ? AND json_valid(detail) "
        "AND json_extract(detail, '$.model_used') IS NOT NULL ORDER BY id DESC")

# A phase's ending (genesis/words.py LABELS) that is a failure: it ended abnormally. A usage
# limit, an API outage (waited out, then run again) and a stop (interrupted) are no failure.
SUCCEEDED_ENDINGS = frozenset({"finished"})
FAILED_ENDINGS = frozenset({"failed", "fatal", "api_fatal", "stuck", "stale", "wedged", "overtime", "not_started",
                            "watcher_lost"})
# A fleet attempt's outcome (genesis/fleet/ledger.py OUTCOMES), the same way.
SUCCEEDED_OUTCOMES = frozenset({"verified"})
FAILED_OUTCOMES = frozenset({"failed"})
RETRY_KINDS = {"restart": "restarts", "escalate": "escalations"}  # a fleet attempt that is a retry


@dataclass(frozen=True)
class ProjectSource:
    """One project the metrics read: its loop ledger (from layout) and its fleet ledger, if any."""
    project: Path
    name: str
    layout: Layout
    fleet_ledger: Path | None      # `<git dir>/genesis/fleet/ledger.sqlite3` when it exists


@dataclass(frozen=True)
class Run:
    """One agent run counted: a loop's phase run, or a fleet child's run (one attempt of a task)."""
    project: str
    agent: str
    model: str
    task: str | None               # a fleet task's key; a loop's phases have none
    started: float
    ended: float | None
    verdict: str | None            # "succeeded", "failed", or None (running, a limit, a stop)
    cost: float | None
    retry: str | None              # "restarts" or "escalations" when the run is a retry, else None
    unit: tuple[str, ...]          # the work retried: (run id, iteration, phase) or (task id,)
    retries: int                   # the retries this run's unit had needed when it started


@dataclass
class _Read:
    """What one ledger gave."""
    runs: list[Run] = field(default_factory=list)
    retries: list[tuple[float, str]] = field(default_factory=list)  # a loop's retries: (when decided, kind)
    cut: bool = False                                                 # MAX_ROWS were not enough


def metrics(sources: Sequence[ProjectSource], now: float, since: float | None = None) -> dict[str, Any]:
    """The `/api/metrics` document over every source's ledgers (runs started at or after `since`)."""
    runs: list[Run] = []
    retries: list[tuple[float, str]] = []
    errors: list[dict[str, str]] = []
    truncated: list[str] = []
    names = _names(sources)
    for source in sources:
        name = names[source]
        for what, read in (("ledger", _loop_runs), ("fleet ledger", _fleet_runs)):
            one = _Read()
            try:
                read(source, name, since, one)
            except (LedgerError, sqlite3.Error, OSError, ValueError, TypeError) as exc:  # that ledger alone is left out
                errors.append({"project": name, "error": _line(f"its {what} cannot be read: {exc}", 300)})
                continue
            runs += one.runs
            retries += one.retries
            if one.cut and name not in truncated:
                truncated.append(name)
    return {
        "schema": SCHEMA, "generated_at": iso(now), "generated_at_epoch": now,
        "since": iso(since) if since is not None else None, "since_epoch": since,
        "by": {"agent": _rows(runs, lambda r: r.agent), "model": _rows(runs, lambda r: r.model),
               "task": _rows([r for r in runs if r.task is not None], lambda r: r.task or ""),
               "project": _rows(runs, lambda r: r.project, keep=[names[s] for s in sources])},
        "over_time": _over_time(runs, retries, now, since),
        "retry_histogram": _histogram(runs),
        "retry_cost_usd": _money(r.cost for r in runs if r.retry is not None),
        "cost_usd": _money(r.cost for r in runs),
        "runs": len(runs),
        "truncated": truncated,
        "errors": errors,
        "error": "; ".join(f"{e['project']}: {e['error']}" for e in errors) or None,
    }


# --- a loop's ledger ---------------------------------------------------------------------------

def _loop_runs(source: ProjectSource, name: str, since: float | None, out: _Read) -> None:
    path = source.layout.ledger_file
    if not _present(path):
        return
    budget = _Budget()
    with Ledger.open(path, readonly=True) as led:
        if not _has_tables(led.conn):
            return  # being created this moment (its first writer has not made its tables yet): nothing ran
        after = since if since is not None else -math.inf
        phases = budget.rows(led.conn, "SELECT run_id, iteration, phase, attempt, started, ended, ending, cost_usd "
                             "FROM phases WHERE started >= ? ORDER BY id DESC", [after], 0.4)
        starts = budget.rows(led.conn, "SELECT run_id, iteration, phase, at, detail FROM events "
                             "WHERE kind = 'phase_start' AND at >= ? ORDER BY id DESC", [after], 0.4)
        loops = budget.rows(led.conn, "SELECT run_id, detail FROM events WHERE kind = 'loop_start' "
                            "ORDER BY id DESC", [], 0.05)
        retries = budget.rows(led.conn, "SELECT at, fallback FROM retries WHERE at >= ? ORDER BY id DESC", [after],
                              0.15)
        # As many ends as phases, on a bound of their own (small rows: a name each); an older
        # phase beyond it is counted by its command's model.
        used = _Budget().rows(led.conn, USED, [after], 0.4)
    out.cut = budget.cut
    started: dict[tuple[Any, ...], dict[str, Any]] = {}
    for run_id, iteration, phase, at, detail in starts:
        d = _json(detail)
        epoch = d.get("epoch") if _is_num(d.get("epoch")) else at
        started[(run_id, iteration, phase, float(epoch))] = d
    commands = {run_id: _json(detail).get("agent") for run_id, detail in loops}
    model_used = {(run_id, iteration, phase, float(begun)): model for run_id, iteration, phase, begun, model in used
                  if _is_num(begun) and isinstance(model, str)}
    for run_id, iteration, phase, attempt, begun, ended, ending, cost in phases:
        d = started.get((run_id, iteration, phase, float(begun)), {})
        agent, model = d.get("agent"), d.get("model")
        if not isinstance(agent, str):  # recorded before phase starts named their agent: the run's command
            agent, model = _of_command(commands.get(run_id))
        model = model_used.get((run_id, iteration, phase, float(begun))) or model  # what the agent said it used
        verdict = "succeeded" if ending in SUCCEEDED_ENDINGS else "failed" if ending in FAILED_ENDINGS else None
        tries = attempt if isinstance(attempt, int) and attempt > 0 else 0
        out.runs.append(Run(name, _key(agent, "unknown"), _key(model, "default"), None, float(begun),
                            ended, verdict if ended is not None else None, cost if _is_num(cost) else None,
                            "restarts" if tries else None, (run_id, str(iteration), phase), tries))
    # A retry is counted at its decision; one with another agent command is an escalation.
    out.retries += [(float(at), "escalations" if fallback else "restarts") for at, fallback in retries]


def _of_command(argv: Any) -> tuple[str | None, str | None]:
    """The CLI and model of a run's agent command as its loop_start recorded it."""
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv) or not argv:
        return None, None
    cli = adapter_for(tuple(argv)).name
    return cli, model_of(cli, argv)


# --- a fleet's ledger --------------------------------------------------------------------------

def _fleet_runs(source: ProjectSource, name: str, since: float | None, out: _Read) -> None:
    path = source.fleet_ledger
    if path is None or not _present(path):
        return
    budget = _Budget()
    after = since if since is not None else -math.inf
    with FleetLedger.open(path, readonly=True) as led:
        tasks = budget.rows(led.conn, "SELECT id, text, state, worktree, run_id FROM tasks ORDER BY created DESC", [],
                            0.2)
        attempts = budget.rows(led.conn, "SELECT task_id, attempt, kind, agent, started, ended, outcome, run_id "
                               "FROM attempts WHERE started >= ? ORDER BY started DESC", [after], 0.3)
        events = budget.rows(led.conn, "SELECT task_id, kind, detail FROM events WHERE kind IN "
                             "('launch', 'child_end') AND at >= ? ORDER BY id DESC", [after], 0.5)
    out.cut = budget.cut
    text = {t[0]: t[1] for t in tasks}
    worktree = {t[0]: t[3] for t in tasks}
    current_run = {t[0]: t[4] for t in tasks}
    launch: dict[tuple[str, Any], dict[str, Any]] = {}
    end: dict[tuple[str, Any], dict[str, Any]] = {}
    for task_id, kind, detail in events:
        d = _json(detail)
        (launch if kind == "launch" else end).setdefault((task_id, d.get("attempt")), d)
    children = _Children(source.layout)
    try:
        retried: dict[str, int] = {}
        for task_id, number, kind, strategy, begun, ended, outcome, run_id in sorted(attempts, key=lambda a: a[4]):
            info, last = launch.get((task_id, number), {}), end.get((task_id, number), {})
            run_id = run_id or last.get("run_id") or (current_run.get(task_id) if ended is None else "")
            agent, model = info.get("cli"), info.get("model")
            if not isinstance(agent, str):  # launched before launches named their CLI: the child's own record
                agent, model = children.agent(worktree.get(task_id, ""), run_id)
            used = last.get("model_used")  # kept by the monitor: the child's ledger goes with its worktree
            model = (used if isinstance(used, str) and used else None) or \
                children.model_used(worktree.get(task_id, ""), run_id) or model
            cost = last.get("cost_usd") if _is_num(last.get("cost_usd")) else None
            if cost is None and ended is None:  # running: what its phases cost so far
                cost = children.cost(worktree.get(task_id, ""), run_id)
            verdict = "succeeded" if outcome in SUCCEEDED_OUTCOMES else "failed" if outcome in FAILED_OUTCOMES \
                else None
            retry = RETRY_KINDS.get(kind)
            out.runs.append(Run(name, _key(agent, f"unknown ({strategy})"), _key(model, "default"),
                                _task_key(name, task_id, text.get(task_id, task_id)), float(begun), ended,
                                verdict if ended is not None else None, cost, retry, (task_id,),
                                retried.get(task_id, 0)))
            if retry is not None:
                retried[task_id] = retried.get(task_id, 0) + 1
    finally:
        children.close()


class _Children:
    """Fleet children's own ledgers (while their worktrees are there), read-only, found in the
    project's git dir: a linked worktree's git dir is `<git dir>/worktrees/<name>`, whose `gitdir`
    file names the worktree back (the worktree's own `.git` file, which its agent can write, is
    never followed)."""

    def __init__(self, layout: Layout):
        self.root = layout.state_dir.parent / "worktrees"
        self.open: dict[str, Ledger | None] = {}

    def ledger(self, worktree: str) -> Ledger | None:
        if not worktree:
            return None
        if worktree not in self.open:
            self.open[worktree] = self._find(worktree) if len(self.open) < MAX_CHILD_LEDGERS else None
        return self.open[worktree]

    def _find(self, worktree: str) -> Ledger | None:
        base = Path(worktree).name
        try:
            names = [n for n in os.listdir(self.root) if n == base or n.startswith(base)]
        except OSError:
            return None
        for n in sorted(names)[:20]:
            admin = self.root / n
            try:
                with open(admin / "gitdir", "rb") as f:
                    back = f.read(GITDIR_BYTES).decode(errors="replace").strip()
            except OSError:
                continue
            if os.path.basename(back) != ".git" or \
                    os.path.realpath(os.path.dirname(back)) != os.path.realpath(worktree):
                continue
            path = admin / "genesis" / "ledger.sqlite3"
            if not _present(path):
                return None
            try:
                return Ledger.open(path, readonly=True)
            except (LedgerError, sqlite3.Error, OSError):
                return None
        return None

    def cost(self, worktree: str, run_id: str) -> float | None:
        led = self.ledger(worktree)
        if led is None or not run_id:
            return None
        try:
            value = led.conn.execute("SELECT SUM(cost_usd) FROM phases WHERE run_id = ?", [run_id]).fetchone()[0]
        except sqlite3.Error:
            return None
        return float(value) if _is_num(value) else None

    def agent(self, worktree: str, run_id: str) -> tuple[str | None, str | None]:
        led = self.ledger(worktree)
        if led is None or not run_id:
            return None, None
        try:
            row = led.conn.execute("SELECT detail FROM events WHERE run_id = ? AND kind = 'phase_start' "
                                   "ORDER BY id DESC LIMIT 1", [run_id]).fetchone()
        except sqlite3.Error:
            return None, None
        d = _json(row[0]) if row else {}
        agent, model = d.get("agent"), d.get("model")
        return (agent if isinstance(agent, str) else None), (model if isinstance(model, str) else None)

    def model_used(self, worktree: str, run_id: str) -> str | None:
        """The model the child's newest phase that named one said it used (its worktree still there)."""
        led = self.ledger(worktree)
        if led is None or not run_id:
            return None
        try:
            row = led.conn.execute("SELECT json_extract(detail, '$.model_used') FROM events WHERE run_id = ? AND "
                                   "kind = 'phase_end' AND json_valid(detail) AND "
                                   "json_extract(detail, '$.model_used') IS NOT NULL ORDER BY id DESC LIMIT 1",
                                   [run_id]).fetchone()
        except sqlite3.Error:
            return None
        return row[0] if row and isinstance(row[0], str) else None

    def close(self) -> None:
        for led in self.open.values():
            if led is not None:
                led.close()


# --- the document's parts ----------------------------------------------------------------------

def _rows(runs: Iterable[Run], key_of: Any, keep: Sequence[str] = ()) -> list[dict[str, Any]]:
    """One row per key: runs, how many succeeded and failed, the rates over those that did either,
    and their cost; the keys with the most runs first (and every key of `keep`, even with none)."""
    groups: dict[str, list[Run]] = {k: [] for k in keep}
    for r in runs:
        groups.setdefault(key_of(r), []).append(r)
    rows = []
    for key, mine in groups.items():
        ok = sum(1 for r in mine if r.verdict == "succeeded")
        bad = sum(1 for r in mine if r.verdict == "failed")
        decided = ok + bad
        rows.append({"key": key, "phases": len(mine), "succeeded": ok, "failed": bad,
                     "success_rate": round(ok / decided, 4) if decided else None,
                     "failure_rate": round(bad / decided, 4) if decided else None,
                     "cost_usd": _money(r.cost for r in mine)})
    rows.sort(key=lambda row: (-row["phases"], row["key"]))
    kept = set(keep)
    return [row for i, row in enumerate(rows) if i < MAX_KEYS or row["key"] in kept]


def _over_time(runs: Sequence[Run], retries: Sequence[tuple[float, str]], now: float,
               since: float | None) -> dict[str, Any]:
    """Restarts, escalations and failures per bucket, from `since` (else the first of them) to now:
    a fleet's retry at its relaunch, a loop's at its decision (`retries`), a failure at its end."""
    points: list[tuple[float, str]] = list(retries)
    for r in runs:
        if r.retry is not None and r.task is not None:  # a fleet's retry is its relaunch
            points.append((r.started, r.retry))
        if r.verdict == "failed" and r.ended is not None:
            points.append((float(r.ended), "failures"))
    start = since if since is not None else min((at for at, _ in points), default=now)
    start = min(start, now)
    bucket = 3600 if now - start > LONG_SPAN else 600
    first = math.floor(start / bucket) * bucket
    count = int((now - first) // bucket) + 1
    if count > MAX_BUCKETS:
        first += (count - MAX_BUCKETS) * bucket
        count = MAX_BUCKETS
    series = {"restarts": [0] * count, "escalations": [0] * count, "failures": [0] * count}
    for at, kind in points:
        i = int((at - first) // bucket)
        if 0 <= i < count:
            series[kind][i] += 1
    return {"bucket_seconds": bucket, "buckets_epoch": [first + i * bucket for i in range(count)], **series}


def _histogram(runs: Sequence[Run]) -> dict[str, Any]:
    """Units of work (a loop's phase in one iteration, a fleet's task) by the retries they needed."""
    most: dict[tuple[str, tuple[str, ...]], int] = {}
    for r in runs:
        unit = (r.project, r.unit)
        most[unit] = max(most.get(unit, 0), r.retries + (1 if r.retry is not None and r.task is not None else 0))
    counts = [0] * len(HISTOGRAM)
    for n in most.values():
        counts[min(n, len(HISTOGRAM) - 1)] += 1
    return {"labels": list(HISTOGRAM), "counts": counts}


# --- small parts -------------------------------------------------------------------------------

class _Budget:
    """MAX_ROWS rows for one ledger's queries in all, each query its share of them (the newest
    rows): the phases and their starts are read in step, whatever else the ledger holds."""

    def __init__(self) -> None:
        self.left = MAX_ROWS
        self.cut = False

    def rows(self, conn: sqlite3.Connection, sql: str, args: list[Any], share: float) -> list[tuple[Any, ...]]:
        most = min(self.left, max(1, int(MAX_ROWS * share)))
        found = [tuple(r) for r in conn.execute(f"{sql} LIMIT {most + 1}", args).fetchall()]
        if len(found) > most:
            self.cut = True
            found = found[:most]
        self.left -= len(found)
        return found


def _has_tables(conn: sqlite3.Connection) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' LIMIT 1").fetchone() is not None


def _present(path: Path) -> bool:
    """A ledger is there to read (a missing one: no loop or fleet ran; anything odd is the
    ledger's own open to refuse, with its message)."""
    try:
        os.lstat(path)
    except FileNotFoundError:
        return False
    return True


def _names(sources: Sequence[ProjectSource]) -> dict[ProjectSource, str]:
    """Each source's name, made unique (two projects of one name are told apart by their path)."""
    seen: dict[str, int] = {}
    for s in sources:
        seen[s.name] = seen.get(s.name, 0) + 1
    return {s: _line(s.name if seen[s.name] == 1 else f"{s.name} ({s.project})", KEY_CHARS * 2) for s in sources}


def _task_key(project: str, task_id: str, text: str) -> str:
    return _line(f"{project}: {text}", KEY_CHARS)


def _key(value: Any, default: str) -> str:
    return _line(value, KEY_CHARS) if isinstance(value, str) and value.strip() else default


def _line(text: Any, width: int) -> str:
    return _clean(str(text), width)


@functools.lru_cache(maxsize=4096)
def _clean(text: str, width: int) -> str:
    """One safe, redacted line: a night's thousands of runs name few agents and models."""
    return one_line(redact(text), width)


def _json(text: Any) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except (TypeError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _is_num(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _money(costs: Iterable[float | None]) -> float:
    return round(float(sum(c for c in costs if c is not None)), 6)


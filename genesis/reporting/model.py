"""The night as the report shows it: records read from the ledger, rendered by text.py and html.py.

Times are epoch seconds (floats). A figure the agent did not report is None, never 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from genesis.sandbox.refused import Refused

__all__ = ["PhaseRow", "IterationRow", "WaitRow", "IncidentRow", "BreakerChange", "AlertRow", "CommitRow",
           "HistoryRow", "CommitTrouble", "TROUBLE_LABELS", "LeftOutRow", "EvidenceRow", "Kpis", "Night", "ActionRow"]


@dataclass(frozen=True)
class PhaseRow:
    iteration: int
    phase: str                     # Builder, Criticizer, Planner, ...
    attempt: int                   # 0 first run; 1.. a retry after a stall
    started: float
    ended: float | None            # None: still running (or the loop died during it)
    ending: str                    # finished, failed, limit, outage, fatal, stuck, wedged, overtime, interrupted,
                                   # not_started, watcher_lost; "running" while it runs
    exit_code: int | None
    reason: str                    # why it ended, one line ("finished" when it did)
    cost_usd: float | None = None
    turns: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    commits: tuple[str, ...] = ()  # short shas of the commits made during the phase (agent's or auto-commit)
    files_changed: int | None = None
    tasks_done: tuple[str, ...] = ()  # TASKS.md items ticked during the phase
    killed: int = 0                # processes ended by the watcher
    log: str | None = None         # the phase's transcript
    tail: tuple[str, ...] = ()     # an abnormal phase's last transcript lines (sanitised), where its log still is

    @property
    def abnormal(self) -> bool:
        return self.ending not in ("finished", "running")

    @property
    def seconds(self) -> float | None:
        return None if self.ended is None else max(0.0, self.ended - self.started)


@dataclass(frozen=True)
class IterationRow:
    iteration: int
    started: float
    ended: float | None
    progress: bool | None          # None: not measured (running, or the loop stopped inside it)
    breaker: str | None            # the breaker's state after the iteration
    no_progress: int
    phases: tuple[PhaseRow, ...]
    skipped: tuple[str, ...] = ()  # phases whose trigger said no

    @property
    def cost_usd(self) -> float | None:
        """Its phases' costs summed, where the agents reported one (None: none did)."""
        costs = [p.cost_usd for p in self.phases if p.cost_usd is not None]
        return sum(costs) if costs else None


@dataclass(frozen=True)
class WaitRow:
    kind: str                      # limit, outage, cooldown, retry
    started: float
    until: float | None            # when it was planned to end
    ended: float | None            # None: still waiting
    reason: str
    iteration: int | None = None
    phase: str | None = None


@dataclass(frozen=True)
class IncidentRow:
    id: str                        # `genesis incidents show <id>`
    at: float
    iteration: int | None
    phase: str | None
    kind: str                      # stuck, wedged, overtime, ...
    reason: str
    forensics: str = ""            # the incident's readable text (bounded), "" if its file is gone


@dataclass(frozen=True)
class BreakerChange:
    at: float
    iteration: int | None
    before: str                    # CLOSED, HALF_OPEN, OPEN
    after: str
    no_progress: int


@dataclass(frozen=True)
class ActionRow:
    """An action taken on the run from afar (genesis/actions/): what, on which task, from where, by whom."""
    at: float
    action: str
    task: str
    source: str                    # terminal, dashboard, alert
    credential: str
    said: str


@dataclass(frozen=True)
class AlertRow:
    ticket_id: str
    at: float
    severity: str                  # low, medium, high, critical
    cause: str
    verdict: str                   # dismiss, intervene (or "pending" while triage runs)
    delivered: tuple[str, ...] = ()  # channels that took it: webhook, ntfy, desktop, command
    why: str = ""                  # the triage's reason for its verdict
    by: str = ""                   # who decided: rules, or command (GENESIS_TRIAGE_CMD)
    failed: tuple[str, ...] = ()   # channels that were tried and did not take it
    final: bool = False            # the loop's end (always told)
    skipped: tuple[str, ...] = ()  # channels it was below the minimum severity of
    folded: bool = False           # told in the loop end's message, not on its own
    kind: str = ""                 # the event that raised it (incident, retry, resolved, loop_end, ...)
    iteration: int | None = None   # the phase it is about, as its ticket says (None: the run's, or not said)
    phase: str | None = None


@dataclass(frozen=True)
class CommitRow:
    sha: str                       # short sha
    at: float
    subject: str
    iteration: int | None = None
    phase: str | None = None
    orphaned: bool = False         # made off the phase's branch (the agent switched or detached HEAD)


@dataclass(frozen=True)
class CommitTrouble:
    """An auto-commit that failed, a stale index.lock removed before one (loop/commitfail.py), or git
    config the agent planted in a phase, undone (repo/planted.py)."""
    at: float
    iteration: int | None
    phase: str | None
    kind: str                      # failed, lock_removed, planted (git config the agent planted)
    text: str                      # git's words, or what was removed


TROUBLE_LABELS = {"failed": "auto-commit failed", "lock_removed": "stale index.lock removed",
                  "planted": "git config planted by the agent"}


@dataclass(frozen=True)
class LeftOutRow:
    """A file an auto-commit left out (a secret, a huge file: it stays in the work tree), or one the
    agent committed itself that looks like a secret (loop/keptout.py)."""
    at: float
    iteration: int | None
    phase: str | None
    path: str
    reason: str                    # why, never the secret itself
    commit: str = ""               # the agent's own commit that holds it ("": left out by auto-commit)


@dataclass(frozen=True)
class EvidenceRow:
    """A task's latest evidence in the run (loop/claims.py): the checks Genesis ran after a phase
    ticked it done, their result, and how often it was reopened."""
    task: str
    at: float
    iteration: int | None
    phase: str | None
    outcome: str                   # passed, failed, unreviewed, agent's word
    command: str                   # the checks run, `; `-joined ("": none, done on the agent's word)
    exit_code: int | None          # the first failed check's (0: all passed; None: none ran, or killed)
    seconds: float | None          # the checks' time in all
    why: str = ""
    tail: tuple[str, ...] = ()     # the failed (else the last) check's last output lines
    reopened: int = 0              # times Genesis reopened it (or sent it back for review) in the run

    @property
    def said(self) -> str:
        """`check passed`, `check failed`, `sent back for review`, `done on the agent's word`."""
        return {"passed": "check passed", "failed": "check failed", "unreviewed": "sent back for review",
                "agent's word": "done on the agent's word"}.get(self.outcome, self.outcome)


@dataclass(frozen=True)
class HistoryRow:
    """What a phase did to history (repo/history.py): said in full, with the safety ref that keeps it."""
    at: float
    iteration: int | None
    phase: str | None
    kind: str                      # rewritten, deleted, switched, detached
    text: str                      # history.describe()
    allowed: bool                  # GENESIS_ALLOW_HISTORY_REWRITE was true: the loop went on


@dataclass(frozen=True)
class Kpis:
    """The health KPIs over the run (None: nothing to compute it from)."""
    mttd_seconds: float | None     # mean time to detect: last sign of life -> the stall is called
    mttr_seconds: float | None     # mean time to recover: the stall is called -> the next phase that finishes
    false_positive_rate: float | None  # stall warnings that recovered on their own / all stall warnings
    retries_per_phase: float | None    # retries / phases run
    escalation_rate: float | None      # tickets a channel took / tickets raised (None with no channel set)
    detections: int = 0
    recoveries: int = 0
    warnings: int = 0
    tickets: int = 0
    reached: int = 0               # tickets a channel took
    intervened: int = 0            # tickets triage said to tell
    no_channel: bool = False       # tickets were to be told and no channel was set to take them


@dataclass(frozen=True)
class Night:
    run_id: str
    project: str
    started: float
    ended: float | None            # None: running, or the loop was killed before recording its end
    reason: str                    # how it ended ("" while running)
    exit_code: int | None
    running: bool
    iterations: tuple[IterationRow, ...]
    waits: tuple[WaitRow, ...] = ()
    incidents: tuple[IncidentRow, ...] = ()
    breaker_changes: tuple[BreakerChange, ...] = ()
    alerts: tuple[AlertRow, ...] = ()
    commits: tuple[CommitRow, ...] = ()
    kpis: Kpis = field(default_factory=lambda: Kpis(None, None, None, None, None))
    reaped: int = 0                # leftover processes ended between phases
    history: tuple[HistoryRow, ...] = ()  # what phases did to history (each also stops the loop unless allowed)
    commit_troubles: tuple[CommitTrouble, ...] = ()  # failed auto-commits (abnormal) and stale locks removed
    left_out: tuple[LeftOutRow, ...] = ()  # files kept out of commits, and secret-looking ones the agent committed
    phase_order: tuple[str, ...] = ()  # GENESIS_PHASES as the run used it ((): unknown, first appearance)
    evidence: tuple[EvidenceRow, ...] = ()  # each task's latest evidence (loop/claims.py), in the order first seen
    refuted: frozenset[tuple[int, str, str]] = frozenset()  # (iteration, phase, task): ticks Genesis reopened
    read_at: float | None = field(default=None, compare=False)  # when read: a running night's elapsed time to it
    box: str = ""                  # the box the run started with and what it leaves open (its start line)
    actions: tuple[ActionRow, ...] = ()  # taken from the terminal, the dashboard or an alert
    refused: tuple[Refused, ...] = ()  # what the box's network refused (sandbox/refused.py)

    @property
    def final_alert(self) -> AlertRow | None:
        """The ticket of the loop's end, once its deliverer recorded it."""
        finals = [a for a in self.alerts if a.final]
        return finals[-1] if finals else None

    @property
    def cost_by_iteration(self) -> tuple[tuple[int, float], ...]:
        """(iteration, its phases' cost) for each iteration whose agents reported a cost."""
        costs = [(it.iteration, it.cost_usd) for it in self.iterations]
        return tuple((iteration, cost) for iteration, cost in costs if cost is not None)

    @property
    def commit_failures(self) -> tuple[CommitTrouble, ...]:
        return tuple(t for t in self.commit_troubles if t.kind == "failed")

    @property
    def orphaned(self) -> tuple[CommitRow, ...]:
        return tuple(c for c in self.commits if c.orphaned)

    @property
    def phases(self) -> tuple[PhaseRow, ...]:
        return tuple(p for it in self.iterations for p in it.phases)

    @property
    def abnormal(self) -> tuple[PhaseRow, ...]:
        return tuple(p for p in self.phases if p.abnormal)

    @property
    def tasks_done(self) -> tuple[str, ...]:
        """The tasks the phases ticked done, but those ticks Genesis reopened (their evidence refuted them)."""
        return tuple(t for _, t in self.ticks)

    @property
    def ticks(self) -> tuple[tuple[PhaseRow, str], ...]:
        """(phase, task) for each task a phase ticked done that was not reopened after it."""
        return tuple((p, t) for p in self.phases for t in p.tasks_done
                     if (p.iteration, p.phase, " ".join(t.split())) not in self.refuted)

    @property
    def cost_usd(self) -> float | None:
        costs = [p.cost_usd for p in self.phases if p.cost_usd is not None]
        return sum(costs) if costs else None

    @property
    def tokens(self) -> tuple[int | None, int | None]:
        """(input, output) tokens the agents reported, None where none did."""
        ins = [p.input_tokens for p in self.phases if p.input_tokens is not None]
        outs = [p.output_tokens for p in self.phases if p.output_tokens is not None]
        return (sum(ins) if ins else None, sum(outs) if outs else None)

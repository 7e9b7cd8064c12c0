"""Waits the loop sits out instead of burning the night on them.

- A usage limit: until its reset plus a margin, then the same phase again. A limit already
  known for the CLI and account about to run is waited for before its agent runs, so at
  most one invocation meets it (loop/limits.py remembers them, per CLI and account). A limit
  any loop of the user on this machine met (the account store) is waited for the same way;
  each loop resumes a random part of the margin (GENESIS_LIMIT_JITTER_PERCENT) apart.
- An API outage (or a transient API error): exponential backoff with jitter, then the same
  phase again, until the outage has lasted GENESIS_MAX_OUTAGE_MINUTES. The backoff is shared
  per CLI in the account store: another loop of that CLI waits for its end before a phase.
- A breaker's cooldown (opt-in): then one trial iteration.

The step that meets the cause plans the wait (one pending wait, in <state>/wait.json) and
exits WAIT; the loop then runs `genesis wait`, which sits it out with a countdown, can be
ended by Ctrl-C or `genesis stop`, and records it. None of it counts as no progress.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from genesis import exitcodes
from genesis.actions import inbox
from genesis.actions.errors import WAIT_REQUESTS
from genesis.agents import adapter_of
from genesis.agents.base import Account, Adapter, Limit
from genesis.clock import Clock, SystemClock
from genesis.config import default_layout
from genesis.console import end_line, progress
from genesis.hints import hint
from genesis.ledger.store import Ledger, LedgerError
from genesis.loop import breaker, limits
from genesis.loop.guard import breaker_store, mirror_breaker
from genesis.loop.limits import Remembered
from genesis.repo.gitcmd import NotARepository
from genesis.store import accounts
from genesis.store.accounts import AccountStore, StoreUnusable
from genesis.store.atomicio import CorruptFile, finite, read_json, write_json
from genesis.watch.waits import deafen, honoured
from genesis.words import WAIT_LABELS, duration, sanitize

if TYPE_CHECKING:
    from typing import Mapping

    from genesis.agents.base import ApiError
    from genesis.loop.step import Step

__all__ = ["Pending", "Who", "plan", "backoff", "whose", "known_limit", "plan_limit", "plan_outage", "plan_cooldown",
           "sit_out", "UNKNOWN_RESET", "JITTER", "store_of", "resume_jitter", "Outage", "known_outage",
           "plan_shared_outage"]

Who = tuple[Adapter, Account]  # the CLI a phase runs, and the account it runs with

JITTER = 0.2             # a backoff delay is up to this fraction shorter than the schedule
UNKNOWN_RESET = 3600.0   # a limit that names no reset time: wait an hour (within the max wait)
# No rolling usage window is longer than a week: a reset further away than this is a monthly or
# credit-pool limit, which ends the night with its own exit and the date, not a wait.
LIMIT_FAR_AFTER = 8 * 86400.0
PROGRESS_EVERY = 600.0   # a line in the console log this often during a long wait
TTY_TICK = 1.0


@dataclass(frozen=True)
class Pending:
    run_id: str
    kind: str            # "limit" | "outage" | "cooldown" | "retry"
    until: float         # epoch seconds
    reason: str
    phase: str = ""
    iteration: int = 0
    attempt: int = 0

    @classmethod
    def from_json(cls, data: object) -> "Pending | None":
        try:
            pending = cls(**data)  # type: ignore[arg-type]
        except TypeError:
            return None
        ok = (isinstance(pending.until, (int, float)) and pending.kind in WAIT_LABELS
              and isinstance(pending.run_id, str))
        return pending if ok else None


def backoff(attempt: int, first: float, cap: float, rng: Callable[[], float] = random.random) -> float:
    """The wait before retry `attempt` (1, 2, ...): first doubling up to cap, up to JITTER shorter
    (so that many loops hit by one outage do not come back in step), never longer."""
    base = min(cap, first * 2 ** max(0, attempt - 1))
    return base * (1 - JITTER * rng())


def _clock_time(epoch: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(epoch))


def _when(epoch: float) -> str:
    """A reset time a user can act on: local time with its zone, and UTC only when the local
    zone is another (never "20:22 UTC (20:22 UTC)")."""
    return limits.when(epoch)


# --- planning ---------------------------------------------------------------------------

def plan(step: "Step", pending: Pending) -> int:
    write_json(step.layout.wait_file, asdict(pending))
    return exitcodes.WAIT


def whose(step: "Step", argv: tuple[str, ...] | None = None, env: "Mapping[str, str] | None" = None) -> Who:
    """The adapter of the command a phase runs (the configured one unless argv says) and the
    account its environment (the loop's unless env says) gives it."""
    adapter = adapter_of(step.cfg, argv)
    return adapter, adapter.account({**adapter.environment(), **os.environ} if env is None else env)


def store_of(step: "Step") -> AccountStore:
    """The machine-wide account store this loop shares with every loop of this user."""
    return AccountStore(accounts.root_of(step.cfg.shared_state_dir, os.environ))


def known_limit(step: "Step", now: float, who: Who | None = None) -> Remembered | None:
    """The usage limit known for this CLI and account, if its reset (plus the margin) is still
    ahead: remembered by a run of this project, or met by any loop of this user on this
    machine (the account store), whichever resets last."""
    _adapter, account = who or whose(step)
    shared = limits.binding(_shared_limits(step, now), account, now, step.cfg.limit_margin)
    own = _own_limit(step, now, account)
    return max((e for e in (own, shared) if e is not None), key=lambda e: e.resets_at, default=None)


def _shared_limits(step: "Step", now: float) -> list[Remembered]:
    """The account store's limits that the runs they name vouch for; the others set aside, said."""
    store = store_of(step)
    entries, warning = limits.read_shared(store, now)
    if warning:
        step.say(warning, "warn")
    live = [e for e in entries if e.resets_at + step.cfg.limit_margin > now]  # expired: dropped unread
    good, planted = limits.vouched_shared(live, now)
    if planted:
        try:
            aside = limits.set_aside_shared(store, planted, now)
        except (StoreUnusable, OSError) as exc:
            aside, why = None, f" (cannot keep them aside: {exc})"
        else:
            why = ""
        shown = "; ".join(f"{e.account.cli}, resets {limits.when(e.resets_at)}, says {e.project or '-'}"
                          for e in planted)
        step.say(f"usage limits in the shared account store that no run of Genesis recorded in its project's "
                 f"ledger (written by someone else, or a reset further than any real limit), so not applied: "
                 f"{shown}; kept aside as {aside.name if aside else '-'}{why}", "warn")
        step.event("limit_unvouched", limits=[e.to_json() for e in planted], kept=str(aside), shared=True)
    return good


def _own_limit(step: "Step", now: float, account: Account) -> Remembered | None:
    configured = adapter_of(step.cfg).name
    entries, warning = limits.read(step.layout, configured, now)
    if warning:
        step.say(warning, "warn")
    entries, planted, unread = limits.vouched(step.layout, entries, now)
    if unread:
        step.say(f"no remembered usage limit is applied: {unread}", "warn")
    if planted:
        aside = limits.set_aside_unvouched(step.layout, configured, planted, now)
        shown = "; ".join(f"{e.account.cli}, resets {limits.when(e.resets_at)}" for e in planted)
        step.say(f"remembered usage limits no run of Genesis recorded (written by someone else, or a reset further "
                 f"than any real limit), so not applied: {shown}; kept aside as {aside.name if aside else '-'}",
                 "warn")
        step.event("limit_unvouched", limits=[e.to_json() for e in planted], kept=str(aside))
    return limits.binding(entries, account, now, step.cfg.limit_margin)


def _whom(account: Account) -> str:
    """The CLI and its account, as a limit's message names them."""
    if account.home is None and account.key is None:
        return f"{account.cli} (account unknown: remembered by an older Genesis)"
    return f"{account.cli} ({account.describe()})"


def resume_jitter(margin: float, fraction: float, rng: Callable[[], float] = random.random) -> float:
    """How much later than its reset plus the margin a loop resumes after a usage limit: a random
    part (up to `fraction`) of the margin, so that the loops waiting for one account's reset
    do not all call it in the same second."""
    return margin * fraction * rng()


def _share_limit(step: "Step", met: Remembered, now: float) -> None:
    """Put the limit this loop met in the account store, for every other loop on the account."""
    try:
        warning = limits.share(store_of(step), met, now, step.cfg.limit_margin)
    except (StoreUnusable, OSError) as exc:
        step.say(f"the usage limit is not shared with the other loops on this account: {exc}", "warn")
        return
    if warning:
        step.say(warning, "warn")


def _met_where(step: "Step", known: Remembered | None) -> str:
    """Which other loop met a limit this loop learnt from the account store (empty: its own)."""
    if known is None or not known.project or (known.project == str(step.cfg.project) and known.run_id == step.run_id):
        return ""
    return f" (met {limits.when(known.seen_at)} by the loop of {known.project}, run {known.run_id})"


def plan_limit(step: "Step", limit: "Limit", phase: str, iteration: int, now: float,
               known: Remembered | None = None, who: Who | None = None,
               rng: Callable[[], float] = random.random) -> int:
    """Remember the limit for the CLI and account that met it (unless it is `known`, remembered
    earlier: the agent was not called), wait for the reset plus the margin and retry the phase;
    a reset beyond GENESIS_MAX_LIMIT_WAIT stops the loop, saying when to restart and how to
    run another account or CLI now."""
    cfg, say = step.cfg, step.say
    adapter, account = who or whose(step)
    resets_at, kind, message = limit.resets_at, limit.kind, limit.message
    if known is not None:
        account = known.account
    elif resets_at is None:
        resets_at = now + UNKNOWN_RESET
        say(f"{phase}: the usage limit names no reset time; assuming {duration(UNKNOWN_RESET)}", "warn")
    if known is None:
        met = Remembered(account, Limit(resets_at, kind, message), limit.resets_at is None, now)
        warning = limits.remember(step.layout, adapter_of(cfg).name, met, now, cfg.limit_margin)
        if warning:
            say(warning, "warn")
        step.event(limits.REMEMBERED, phase=phase, iteration=iteration, cli=account.cli, home=account.home,
                   key=account.key, resets_at=resets_at, kind=kind)
        _share_limit(step, replace(met, project=str(cfg.project), run_id=step.run_id), now)
    limit_of = f"usage limit{f' ({kind})' if kind else ''} of {account.cli}"
    what = f"usage limit{f' ({kind})' if kind else ''} of {_whom(account)}"
    said = sanitize(message)
    if resets_at - now > LIMIT_FAR_AFTER:
        say(f"{phase}: {what}: {said!r}. It resets at {_when(resets_at)}, {duration(resets_at - now)} away: a monthly "
            f"or credit-pool limit, not a night's wait: stopping. Restart the loop after {_when(resets_at)}; or "
            f"now, with another account ({limits.another_account(adapter) or 'another login'}) or another CLI "
            f"(GENESIS_AGENT_CLI)", "error")
        step.event("limit_stop", phase=phase, iteration=iteration, resets_at=resets_at, kind=kind, message=message,
                   cli=account.cli, account=account.describe(), known=known is not None, far=True)
        return exitcodes.LIMIT_FAR
    if resets_at - now > cfg.max_limit_wait:
        how = (f", met {limits.when(known.seen_at)}{_met_where(step, known)} and remembered, so the agent is not "
               f"called" if known else "")
        say(f"{phase}: {what}{how}: {said!r}. It resets at {_when(resets_at)}, later than GENESIS_MAX_LIMIT_WAIT "
            f"({duration(cfg.max_limit_wait)}): stopping. Restart the loop after {_when(resets_at)}; or now, "
            f"with another account ({limits.another_account(adapter) or 'another login'}) or another CLI "
            f"(GENESIS_AGENT_CLI); or, if the limit has gone sooner, forget it: "
            f"{limits.clear_command(cfg.project, account.cli)}", "error")
        step.event("limit_stop", phase=phase, iteration=iteration, resets_at=resets_at, kind=kind, message=message,
                   cli=account.cli, account=account.describe(), known=known is not None)
        return exitcodes.USAGE_LIMIT
    until = resets_at + cfg.limit_margin + resume_jitter(cfg.limit_margin, cfg.limit_jitter, rng)
    how = (f"already known{_met_where(step, known)}, so the agent is not called; "
           f"`{limits.clear_command(cfg.project, account.cli)}` forgets it" if known else f"the agent said {said!r}")
    say(f"{phase}: {what} until {_clock_time(resets_at)} ({how}); the phase runs again at {_clock_time(until)}",
        "warn")
    by = f", met by the loop of {known.project}" if known is not None and _met_where(step, known) else ""
    return plan(step, Pending(step.run_id, "limit", until, f"{limit_of}, resets {_when(resets_at)}{by}", phase,
                               iteration))


def outage_so_far(step: "Step") -> tuple[int, float | None]:
    """(phases in a row that ended in an API outage, when the first of them started)."""
    count, since = 0, None
    for e in reversed(step.events(kinds=("phase_end",))):
        if e.get("event") != "phase_end":
            continue
        if e.get("ending") != "outage":
            break
        count += 1
        since = e.get("started") if isinstance(e.get("started"), (int, float)) else since
    return count, since


def plan_outage(step: "Step", error: "ApiError", phase: str, iteration: int, now: float,
                rng: Callable[[], float] = random.random) -> int:
    """Back off and retry the phase; an outage longer than GENESIS_MAX_OUTAGE_MINUTES stops."""
    cfg, say = step.cfg, step.say
    attempt, since = outage_so_far(step)
    attempt = max(attempt, 1)
    lasted = now - since if since is not None else 0.0
    status = f"{error.status} " if error.status else ""
    if lasted >= cfg.max_outage:
        say(f"{phase}: the model API has failed for {duration(lasted)} ({status}{error.code}: {error.message}), "
            f"longer than GENESIS_MAX_OUTAGE_MINUTES ({duration(cfg.max_outage)}): stopping. Restart when the "
            f"API is back", "error")
        step.event("outage_stop", phase=phase, iteration=iteration, lasted=round(lasted, 1), attempts=attempt)
        return exitcodes.API_OUTAGE
    delay = backoff(attempt, cfg.backoff_first, cfg.backoff_max, rng)
    say(f"{phase}: API error ({status}{error.code}): {error.message}; retry {attempt} in {duration(delay)} "
        f"(outage so far {duration(lasted)}, stops after {duration(cfg.max_outage)})", "warn")
    _share_outage(step, Outage(whose(step)[0].name, now + delay, now, str(cfg.project), step.run_id,
                               f"API error {status}{error.code}"), now)
    return plan(step, Pending(step.run_id, "outage", now + delay, f"API error {status}{error.code}", phase,
                               iteration, attempt))


@dataclass(frozen=True)
class Outage:
    """An API outage a loop met, shared in the account store: the other loops of its CLI wait
    for the end of its backoff instead of each probing the API."""
    cli: str
    until: float          # the end of the backoff of the loop that met it
    seen_at: float
    project: str          # the loop that met it, whose ledger vouches for it (`outage_shared`)
    run_id: str
    reason: str

    @classmethod
    def from_json(cls, data: object) -> "Outage | None":
        if not isinstance(data, dict):
            return None
        until, seen_at = finite(data.get("until")), finite(data.get("seen_at"))
        texts = [data.get(k) for k in ("cli", "project", "run_id", "reason")]
        if until is None or seen_at is None or not all(isinstance(t, str) for t in texts):
            return None
        return cls(texts[0], until, seen_at, texts[1], texts[2], texts[3])


OUTAGE_VERSION = 1
OUTAGE_SHARED = "outage_shared"  # the event the loop that met an outage records as it shares it


def _share_outage(step: "Step", outage: Outage, now: float) -> None:
    """Put this loop's backoff in the account store (one per CLI: the one that ends last)."""
    step.event(OUTAGE_SHARED, cli=outage.cli, until=outage.until)

    def change(records: list[object]) -> list[object]:
        held = [o for o in map(Outage.from_json, records) if o is not None and o.until > now]
        same = [o for o in held if o.cli == outage.cli]
        if any(o.until > outage.until for o in same):
            return [asdict(o) for o in held]
        return [asdict(o) for o in held if o.cli != outage.cli] + [asdict(outage)]
    try:
        warning = store_of(step).update(accounts.OUTAGES, "outages", OUTAGE_VERSION, now, change)
    except (StoreUnusable, OSError) as exc:
        step.say(f"the API outage is not shared with the other loops of {outage.cli}: {exc}", "warn")
        return
    if warning:
        step.say(warning, "warn")


def known_outage(step: "Step", now: float, who: Who | None = None) -> Outage | None:
    """An API outage another loop of this CLI met and is backing off from, if its backoff is
    still running: this loop's phase waits for its end rather than probing the API too. It
    binds until that end, and never longer than GENESIS_BACKOFF_MAX_SECONDS from now; it
    counts only with the `outage_shared` event of the run it names."""
    adapter, _account = who or whose(step)
    records, warning = store_of(step).read(accounts.OUTAGES, "outages", OUTAGE_VERSION, now)
    if warning:
        step.say(warning, "warn")
    held = [o for o in map(Outage.from_json, records) if o is not None and o.cli == adapter.name and o.until > now
            and o.run_id != step.run_id and o.until <= now + step.cfg.backoff_max + 1]
    vouched = [o for o in held if _outage_vouched(o)]
    for planted in (o for o in held if o not in vouched):
        step.say(f"an API outage of {planted.cli} in the shared account store that no run of Genesis recorded "
                 f"(says {planted.project or '-'}): not applied", "warn")
    return max(vouched, key=lambda o: o.until, default=None)


def _outage_vouched(outage: Outage) -> bool:
    if not os.path.isabs(outage.project) or not outage.run_id:
        return False
    try:
        ledger_file = default_layout(Path(outage.project)).ledger_file
        if not ledger_file.is_file():
            return False
        with Ledger.open(ledger_file, readonly=True) as ledger:
            shared = ledger.events(outage.run_id, kinds=(OUTAGE_SHARED,), newest=True, limit=50)
    except (LedgerError, NotARepository, OSError):
        return False
    return any(e.get("cli") == outage.cli and isinstance(e.get("until"), (int, float))
               and abs(e["until"] - outage.until) < 1.0 for e in shared)


def plan_shared_outage(step: "Step", outage: Outage, phase: str, iteration: int, now: float,
                       rng: Callable[[], float] = random.random) -> int:
    """Wait for the end of another loop's outage backoff (plus a jitter of up to
    GENESIS_LIMIT_JITTER_PERCENT of that backoff), then run the phase."""
    until = outage.until + max(0.0, outage.until - outage.seen_at) * step.cfg.limit_jitter * rng()
    step.say(f"{phase}: the model API of {outage.cli} is failing ({outage.reason}, met {_clock_time(outage.seen_at)} "
             f"by the loop of {outage.project}, run {outage.run_id}): the phase waits for that loop's backoff and "
             f"runs at {_clock_time(until)}, without calling the agent", "warn")
    step.event("outage_held", phase=phase, iteration=iteration, cli=outage.cli, until=until, project=outage.project,
               met_by=outage.run_id)
    return plan(step, Pending(step.run_id, "outage", until, f"{outage.cli} API outage met by another loop", phase,
                               iteration))


def plan_cooldown(step: "Step", seconds: float, iteration: int, now: float) -> int:
    """Let an OPEN breaker cool down, then one trial iteration (CB_COOLDOWN_MINUTES)."""

    state, _ = breaker_store(step.layout).update(lambda s: breaker.plan_trial(s, now, seconds))
    step.say(f"breaker OPEN: cooling down for {duration(seconds)}, then a trial iteration (trial "
             f"{state.trials + 1} of {step.cfg.cb_max_trials})", "warn")
    return plan(step, Pending(step.run_id, "cooldown", now + seconds, "breaker cooldown", "", iteration,
                               state.trials + 1))


# --- sitting it out -------------------------------------------------------------------------

class _Stopped(Exception):
    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise(signum: int, _frame: object) -> None:
    # The first signal ends the wait; one right behind it (the loop forwards what it got, a
    # closed terminal sends more) must not escape the clause that records the wait's end.
    deafen()
    raise _Stopped(signum)


def sit_out(step: "Step", stop_requested: Callable[[], bool], clock: Clock | None = None,
            ceiling: float | None = None, sleep: Callable[[float], None] = time.sleep) -> int:
    """Sit out the pending wait of this run, if any: OK when it is over (or the stop flag
    ended it early: the loop then stops), MAX_RUNTIME when it would end past the run's
    ceiling (`ceiling`, epoch), 128+n on a stop signal."""
    clock = clock or SystemClock()
    lay, say = step.layout, step.say
    try:
        pending = Pending.from_json(read_json(lay.wait_file))
    except CorruptFile:
        pending = None
    if pending is None or pending.run_id != step.run_id:
        return exitcodes.OK
    label = WAIT_LABELS[pending.kind]
    start_wall, start_mono = clock.wall(), clock.mono()
    left = max(0.0, pending.until - start_wall)
    if ceiling is not None and pending.until > ceiling:
        say(f"{label}: the wait would end at {_clock_time(pending.until)}, after the run's ceiling "
            f"(GENESIS_MAX_RUNTIME_HOURS, {_clock_time(ceiling)}): stopping now", "error")
        _clear(step)
        return exitcodes.MAX_RUNTIME
    how, code = "done", exitcodes.OK
    # A stop signal ends the wait; the handlers are restored only if none came (once one
    # came, later ones are ignored while the wait's end is recorded, then the step exits).
    # They are in place before the wait is recorded as begun: a signal that comes once the
    # wait shows in the ledger always ends it with its end recorded.
    old = {s: signal.signal(s, _raise) for s in honoured()}
    tty = sys.stderr.isatty()
    next_line = start_mono + PROGRESS_EVERY
    try:
        step.event("wait_start", kind=pending.kind, until=pending.until, seconds=round(left, 1),
                   phase=pending.phase, iteration=pending.iteration, attempt=pending.attempt, reason=pending.reason)
        say(f"{label}: waiting {duration(left)}, until {_clock_time(pending.until)} ({pending.reason}); Ctrl-C or "
            f"`{hint(step.cfg.project, 'stop')}` ends the wait", "warn")
        while True:
            remaining = pending.until - clock.wall()  # wall clock: a reset is a time of day, suspend or not
            if remaining <= 0:
                break
            if stop_requested():
                how = "stopped"
                say(f"{label}: the stop flag says false: the wait ends and the loop stops", "warn")
                break
            pending, ended = _asked(step, pending, label)  # `genesis limit-wait end|extend`, from any surface
            if ended:
                break
            if tty:  # one line, rewritten in place; any other line said ends it first
                progress(f"{label}: {duration(remaining)} left (until {_clock_time(pending.until)})")
            elif clock.mono() >= next_line:
                next_line += PROGRESS_EVERY
                say(f"{label}: {duration(remaining)} left, until {_clock_time(pending.until)}", "info")
            sleep(min(TTY_TICK, remaining))
    except _Stopped as exc:
        how, code = "interrupted", 128 + exc.signum
    finally:
        end_line()  # the countdown keeps its last state, on a line of its own
        if code == exitcodes.OK:
            for sig, handler in old.items():
                signal.signal(sig, handler)
    waited = clock.mono() - start_mono
    _clear(step)
    step.event("wait_end", kind=pending.kind, epoch=clock.wall(), waited=round(waited, 2), how=how,
               phase=pending.phase, iteration=pending.iteration)
    if how == "done":
        say(f"{label}: waited {duration(waited)}; going on", "ok")
        if pending.kind == "cooldown":
            now = clock.wall()

            state, _ = breaker_store(lay).update(lambda s: breaker.start_trial(s, now, step.cfg.cb_max_trials))

            mirror_breaker(lay, state)
            say(f"breaker {state.state}: trial {state.trials} of {step.cfg.cb_max_trials}; progress closes it", "warn")
    return code


def _asked(step: "Step", pending: Pending, label: str) -> tuple[Pending, bool]:
    """The wait as the actions asked of it since the last tick: (the wait, whether it ends now)."""
    for asked in inbox.take(step.layout.state_dir / inbox.FOLDER, WAIT_REQUESTS):
        if asked.action == "wait-end":
            step.say(f"{label}: ended from the {asked.source}: the phase runs again now", "warn")
            return pending, True
        pending = replace(pending, until=pending.until + max(0.0, asked.seconds))
        write_json(step.layout.wait_file, asdict(pending))
        step.say(f"{label}: {duration(asked.seconds)} longer (from the {asked.source}), until "
                 f"{_clock_time(pending.until)}", "warn")
    return pending, False


def _clear(step: "Step") -> None:
    try:
        step.layout.wait_file.unlink()
    except FileNotFoundError:
        pass

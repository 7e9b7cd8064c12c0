"""The account's hold reaches the loops already running on a machine.

A usage limit met on one machine holds the fleet's account (its workflow's `until`). An
attempt that has not started yet asks the account before its agent starts; a loop already
running would start its next phase inside the hold. So each machine's worker asks the account
while its loops run (once per account every ASK_EVERY seconds, whatever the number of
attempts) and, when it holds, puts the hold in this machine's own account store
(store/accounts.py): every loop reads that store before each phase and starts none while a
limit binds its CLI and account. The loop then ends as a limit ends it in a fleet (it never
waits: GENESIS_MAX_LIMIT_WAIT=0s), its attempt is not spent, and the task's workflow holds it
until the account's reset.

Why the store and not a cancellation: cancelling the activity would kill the phase under way
(its work half done, the agent's request already paid); the store stops the loop between two
phases, where the local fleet's loops stop, with the loop's own words in its ledger; and it is
durable: a worker that restarts finds it there.

The store's entries count only when the run they name recorded the limit in its project's
ledger (loop/limits.vouched_shared): the worker records the hold it was told, as run
RUN_ID of its own clone of the remote, and names that run in the entry.

The periodic ask alone left a window: a phase could start within ASK_EVERY of the account being
held. So a loop its worker follows (its tether's lease is fresh) also asks through the worker
just before each phase (genesis/loop/workerlink.py): it writes `children/<task id>.ask.json`; the worker,
which looks at it every second, asks the account anew (an ask begun before the request does not
answer it), puts a hold in the store, and only then answers in `children/<task id>.told.json`;
the loop reads the store after that answer. A phase then starts inside a hold only if the
account learned of it in the moments between the worker's ask and the phase's start, or if the
worker did not answer within ASK_WAIT (the store then holds what the periodic ask last told: the
3 s window again, said in the loop's output).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Awaitable, Callable

from genesis.agents.base import Account, Limit
from genesis.config import default_layout
from genesis.ledger.store import Ledger
from genesis.loop import limits
from genesis.loop.limits import Remembered
from genesis.store.accounts import AccountStore

__all__ = ["ASK_EVERY", "RUN_ID", "KIND", "entry_for", "covered", "relay", "AccountWatch"]

ASK_EVERY = 3.0            # seconds between two asks of one account by one worker
RUN_ID = "temporal-account"   # the worker's run, in its clone's ledger, that records the holds it was told
KIND = "fleet account"     # the entry's kind: a hold the fleet's account told, not a limit met here


def entry_for(account: Account, until: float, margin: float, name: str, clone: Path, now: float) -> Remembered:
    """The store's entry for a hold of the fleet's account `name` until `until`: its reset is
    `until` less the loop's margin (the loop adds its margin back), so the loop holds exactly as
    long as the account does."""
    return Remembered(account, Limit(until - margin, KIND, f"the fleet's account {name} is held until its "
                                                           f"reset (a usage limit met on another machine)"),
                      False, now, str(clone), RUN_ID)


def covered(entries: list[Remembered], entry: Remembered) -> bool:
    """Whether the store already holds this account at least as long (a limit met here, or
    the same hold told before): nothing to write, and a longer one never shortened."""
    return any(e.account == entry.account and e.resets_at >= entry.resets_at for e in entries)


def relay(store: AccountStore, entry: Remembered, margin: float, now: float) -> bool:
    """The hold put in this machine's account store, recorded first in the ledger of the clone it
    names (which vouches for it); False when the store holds the account as long already."""
    entries, _warning = limits.read_shared(store, now)
    if covered(entries, entry):
        return False
    acc = entry.account
    with Ledger.open(default_layout(Path(entry.project)).ledger_file) as ledger:
        ledger.record(RUN_ID, limits.REMEMBERED, cli=acc.cli, home=acc.home, key=acc.key, resets_at=entry.resets_at,
                      kind=KIND)
    limits.share(store, entry, now, margin)
    return True


@dataclass
class AccountWatch:
    """One worker's view of the accounts its attempts run on: each asked at most once per
    ASK_EVERY, the answer shared by every attempt of that account."""
    ask: Callable[[str], Awaitable[dict]]
    clock: Callable[[], float] = time.time
    every: float = ASK_EVERY
    seen: dict[str, tuple[float, float]] = field(default_factory=dict)   # workflow id -> (asked at, until)

    async def until(self, workflow_id: str, after: float = float("-inf")) -> float:
        """Until when the account holds (0.0: it does not, or it did not answer), asked anew when
        the last ask is ASK_EVERY old or began before `after` (a loop's request)."""
        now = self.clock()
        asked, until = self.seen.get(workflow_id, (float("-inf"), 0.0))
        if now - asked >= self.every or asked < after:
            self.seen[workflow_id] = (now, until)   # one ask at a time, whoever asks meanwhile
            answer = await self.ask(workflow_id)
            until = float(answer.get("until") or 0.0) if isinstance(answer, dict) else 0.0
            self.seen[workflow_id] = (now, until)
        return until

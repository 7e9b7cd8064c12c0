"""The account's hold put in a machine's own account store: a vouched limit its loops read
before their next phase, never one that shortens a longer limit met there; one ask per account
per interval for every attempt of the machine."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("temporalio", reason="temporalio is not installed: pip install -e '.[test]'")

from helpers.git import git  # noqa: E402

from genesis.agents.base import Account, Limit  # noqa: E402
from genesis.loop import limits, workerlink  # noqa: E402
from genesis.loop.limits import Remembered  # noqa: E402
from genesis.procs.proctree import ProcId  # noqa: E402
from genesis.store.accounts import AccountStore  # noqa: E402
from genesis.temporal import holds, tether  # noqa: E402

NOW = 1_800_000_000.0
ACCOUNT = Account("claude", "/home/u/.claude", "")


def clone(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    return repo


def binding_now(store: AccountStore, account: Account, now: float, margin: float) -> Remembered | None:
    """As a loop reads the store before a phase: vouched entries only, then the one that binds."""
    entries, _warning = limits.read_shared(store, now)
    good, planted = limits.vouched_shared(entries, now)
    assert not planted, planted
    return limits.binding(good, account, now, margin)


def test_a_relayed_hold_binds_the_machines_loops_exactly_as_long_as_the_account_holds(tmp_path):
    store = AccountStore(tmp_path / "state")
    until, margin = NOW + 600, 60.0
    entry = holds.entry_for(ACCOUNT, until, margin, "f-account", clone(tmp_path), NOW)
    assert holds.relay(store, entry, margin, NOW)
    found = binding_now(store, ACCOUNT, NOW, margin)
    assert found is not None and found.limit.kind == holds.KIND
    assert found.resets_at + margin == pytest.approx(until)
    assert binding_now(store, ACCOUNT, until - 1, margin) is not None
    assert binding_now(store, ACCOUNT, until + 1, margin) is None
    # Another account of the CLI, or another CLI, is not held.
    assert binding_now(store, Account("claude", "/home/u/other", ""), NOW, margin) is None
    assert binding_now(store, Account("codex", "/home/u/.codex", ""), NOW, margin) is None


def test_an_entry_that_names_no_recording_run_is_not_believed(tmp_path):
    store = AccountStore(tmp_path / "state")
    entry = holds.entry_for(ACCOUNT, NOW + 600, 0.0, "f-account", clone(tmp_path), NOW)
    limits.share(store, entry, NOW, 0.0)   # written without the ledger's event, as a planted one would be
    entries, _warning = limits.read_shared(store, NOW)
    good, planted = limits.vouched_shared(entries, NOW)
    assert good == [] and len(planted) == 1


def test_a_longer_limit_met_on_the_machine_is_never_shortened(tmp_path):
    store = AccountStore(tmp_path / "state")
    repo = clone(tmp_path)
    longer = holds.entry_for(ACCOUNT, NOW + 3600, 0.0, "f-account", repo, NOW)
    assert holds.relay(store, longer, 0.0, NOW)
    shorter = holds.entry_for(ACCOUNT, NOW + 600, 0.0, "f-account", repo, NOW)
    assert not holds.relay(store, shorter, 0.0, NOW)
    assert binding_now(store, ACCOUNT, NOW + 1800, 0.0) is not None


def test_covered_compares_the_same_account_only():
    entry = Remembered(ACCOUNT, Limit(NOW + 600, "", ""), False, NOW)
    other = Remembered(Account("claude", "/elsewhere", ""), Limit(NOW + 9999, "", ""), False, NOW)
    assert not holds.covered([other], entry)
    assert holds.covered([entry], entry)


def test_one_ask_per_account_per_interval_whatever_the_attempts():
    asked: list[str] = []
    clock = [NOW]

    async def ask(workflow_id: str) -> dict:
        asked.append(workflow_id)
        return {"until": NOW + 600}

    watch = holds.AccountWatch(ask, clock=lambda: clock[0], every=3.0)

    async def play():
        seen = [await watch.until("a") for _ in range(5)] + [await watch.until("b")]
        clock[0] += 3.0
        seen.append(await watch.until("a"))
        return seen

    seen = asyncio.run(play())
    assert seen == [NOW + 600] * 7
    assert asked == ["a", "b", "a"]


def test_no_answer_is_no_hold():
    async def ask(workflow_id: str) -> dict:
        return {}

    assert asyncio.run(holds.AccountWatch(ask).until("a")) == 0.0


def test_a_loops_request_is_answered_by_an_ask_begun_after_it_never_by_an_older_one():
    asked: list[float] = []
    clock = [NOW]
    held = [0.0]

    async def ask(workflow_id: str) -> dict:
        asked.append(clock[0])
        return {"until": held[0]}

    watch = holds.AccountWatch(ask, clock=lambda: clock[0], every=3.0)

    async def play():
        seen = [await watch.until("a")]          # the periodic ask: not held
        clock[0] += 0.5
        held[0] = NOW + 600                        # the account is held now
        seen.append(await watch.until("a"))       # within ASK_EVERY: the old word
        seen.append(await watch.until("a", after=NOW + 0.4))   # a loop asked at +0.4: asked anew
        clock[0] += 0.5
        seen.append(await watch.until("a", after=NOW + 0.4))   # that request is answered already
        return seen

    assert asyncio.run(play()) == [0.0, 0.0, NOW + 600, NOW + 600]
    assert asked == [NOW, NOW + 0.5]


def test_a_request_counts_as_answered_only_by_its_own_or_a_later_answer():
    assert workerlink.answered(NOW, NOW) and workerlink.answered(NOW + 1, NOW)
    assert not workerlink.answered(NOW - 1, NOW) and not workerlink.answered(0.0, 0.0)


class Clock:
    def __init__(self, at: float):
        self.at = at

    def __call__(self) -> float:
        return self.at

    def sleep(self, seconds: float) -> None:
        self.at += seconds


def test_a_loop_its_worker_follows_waits_for_the_answer_to_its_own_request(tmp_path):
    (tmp_path / "children").mkdir()
    clock = Clock(NOW)
    tether.renew(tmp_path, "t-abc123", 4242, ProcId(7, 1.0), NOW - 0.5)
    workerlink.tell(tmp_path, "t-abc123", NOW - 30, 0.0, NOW - 29)   # an answer to an earlier request

    def sleep(seconds: float) -> None:   # the worker answers 1.2 s after the request
        clock.sleep(seconds)
        if clock.at >= NOW + 1.2 and workerlink.request_of(tmp_path, "t-abc123") == NOW:
            workerlink.tell(tmp_path, "t-abc123", NOW, NOW + 600, clock.at)

    assert workerlink.through_worker(tmp_path, "t-abc123", clock, sleep) == ""
    assert NOW + 1.2 <= clock.at < NOW + 1.3


def test_an_unanswered_request_lets_the_phase_go_on_after_the_wait_saying_so(tmp_path):
    (tmp_path / "children").mkdir()
    clock = Clock(NOW)
    tether.renew(tmp_path, "t-abc123", 4242, ProcId(7, 1.0), NOW)
    why = workerlink.through_worker(tmp_path, "t-abc123", clock, clock.sleep)
    assert "did not answer within 15s" in why and clock.at >= NOW + workerlink.ASK_WAIT


def test_a_loop_no_worker_follows_asks_nobody(tmp_path):
    (tmp_path / "children").mkdir()
    clock = Clock(NOW)
    assert workerlink.through_worker(tmp_path, "t-abc123", clock, clock.sleep) == ""   # no lease (a local fleet)
    tether.renew(tmp_path, "t-abc123", 4242, ProcId(7, 1.0), NOW - 10)           # a lease gone stale
    assert workerlink.through_worker(tmp_path, "t-abc123", clock, clock.sleep) == ""
    assert clock.at == NOW and not workerlink.ask_file(tmp_path, "t-abc123").exists()

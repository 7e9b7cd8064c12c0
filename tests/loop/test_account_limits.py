"""A usage limit, and an API outage, are the account's: what one loop meets, every loop of this
user on this machine heeds (the account store), vouched by the ledger of the run that met it.

Two real projects, each with a started run, share one HOME (so one store); time is injected.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers.git import new_repo

from genesis import exitcodes
from genesis.agents.base import ApiError, Limit
from genesis.config import layout_for, resolve
from genesis.loop import limits
from genesis.loop.limits import Remembered
from genesis.loop.sandboxing import box_for
from genesis.loop.step import Step
from genesis.loop.waiting import (known_limit, known_outage, plan_limit, plan_outage, plan_shared_outage,
                                  resume_jitter, store_of, whose)
from genesis.store.layout import private_dir

RUN = "run-a"
NOW = 1_800_000_000.0
LIMIT = Limit(NOW + 3600, "five_hour", "You've hit your 5-hour limit · resets 5:13am (UTC)")


@pytest.fixture
def other(tmp_path: Path, said) -> Step:
    """A second loop, on another project, of the same user (the same HOME, so the same store)."""
    cfg = resolve(new_repo(tmp_path / "other"), env={})
    lay = layout_for(cfg)
    private_dir(lay.state_dir)
    made = Step(cfg, lay, "run-b", lambda msg, kind="info": said.append((kind, msg)))
    made.event("loop_start")
    return made


def pending(step: Step) -> dict:
    return json.loads(step.layout.wait_file.read_text())


def shared_file(step: Step) -> Path:
    return store_of(step).path("limits.json")


@pytest.mark.fault(94)
def test_a_limit_one_loop_meets_holds_every_loop_on_the_account_until_its_reset(step, other, said):
    assert known_limit(other, NOW) is None
    assert plan_limit(step, LIMIT, "Builder", 1, NOW, rng=lambda: 0.0) == exitcodes.WAIT
    # The store names the project and run that met it.
    entry = json.loads(shared_file(step).read_text())["limits"][0]
    assert (entry["project"], entry["run_id"], entry["resets_at"]) == (str(step.cfg.project), RUN, NOW + 3600)

    known = known_limit(other, NOW + 10)
    assert known is not None and known.limit == LIMIT and known.project == str(step.cfg.project)
    assert plan_limit(other, known.limit, "Builder", 1, NOW + 10, known=known, rng=lambda: 0.5) == exitcodes.WAIT
    kind, message = said[-1]
    assert kind == "warn" and f"by the loop of {step.cfg.project}, run {RUN}" in message
    assert "so the agent is not called" in message
    assert pending(other)["reason"].endswith(f"met by the loop of {step.cfg.project}")  # what `genesis status` shows
    # The other loop remembers nothing of its own: the limit is not its project's.
    assert not other.layout.limit_file.exists() and not other.events(kinds=(limits.REMEMBERED,))
    # Both resume after the reset plus the margin, a jitter apart (20% of the 60 s margin at most).
    assert pending(step)["until"] == NOW + 3600 + 60
    assert pending(other)["until"] == NOW + 3600 + 60 + 6
    assert known_limit(other, NOW + 3600 + 59) is not None
    assert known_limit(other, NOW + 3600 + 60) is None


def test_the_jitter_is_a_fraction_of_the_margin_up_to_its_knob():
    assert resume_jitter(60, 0.2, rng=lambda: 0.0) == 0
    assert resume_jitter(60, 0.2, rng=lambda: 0.999) == pytest.approx(11.988)
    assert resume_jitter(60, 0.0, rng=lambda: 0.7) == 0
    many = {resume_jitter(60, 0.2) for _ in range(20)}  # the default random source: not in lockstep
    assert len(many) == 20 and all(0 <= j < 12 for j in many)


def test_another_account_or_another_cli_is_not_held(step, other, tmp_path):
    plan_limit(step, LIMIT, "Builder", 1, NOW)
    adapter, _account = whose(other)
    elsewhere = adapter.account({"CLAUDE_CONFIG_DIR": str(tmp_path / "work-account")})
    assert known_limit(other, NOW + 10, (adapter, elsewhere)) is None
    codex = whose(other, ("codex", "exec"))
    assert known_limit(other, NOW + 10, codex) is None


@pytest.mark.fault(95)
def test_a_limit_planted_in_the_store_without_a_run_that_met_it_is_set_aside(step, other, said):
    adapter, account = whose(other)
    planted = Remembered(account, LIMIT, False, NOW, project=str(step.cfg.project), run_id=RUN)
    limits.share(store_of(other), planted, NOW, 60)  # the run it names recorded no such limit
    assert known_limit(other, NOW + 10) is None
    assert "kept aside as limits.json.unvouched-" in said[-1][1]
    for aside in store_of(other).folder.glob("limits.json.unvouched-*"):
        aside.unlink()
    step.event(limits.REMEMBERED, cli=account.cli, home=account.home, key=account.key, resets_at=NOW + 3600)
    forged = Remembered(account, LIMIT, False, NOW, project=str(step.cfg.project), run_id="run-forged")
    limits.share(store_of(other), forged, NOW, 60)  # that project recorded one, but in another run
    assert known_limit(other, NOW + 10) is None
    kind, message = said[-1]
    assert kind == "warn" and "no run of Genesis recorded in its project's ledger" in message
    assert "kept aside as limits.json.unvouched-" in message
    assert not shared_file(other).exists()
    assert other.events(kinds=("limit_unvouched",))[0]["shared"] is True
    aside = list(store_of(other).folder.glob("limits.json.unvouched-*"))
    assert len(aside) == 1 and json.loads(aside[0].read_text())["limits"][0]["run_id"] == "run-forged"


def test_an_entry_naming_no_project_or_a_reset_beyond_any_real_limit_is_not_believed(step, other):
    adapter, account = whose(other)
    far = Limit(NOW + 30 * 86400, "seven_day", "limit")
    step.event(limits.REMEMBERED, cli=account.cli, home=account.home, key=account.key, resets_at=far.resets_at)
    for entry in (Remembered(account, far, False, NOW, project=str(step.cfg.project), run_id=RUN),
                  Remembered(account, LIMIT, False, NOW, project="", run_id=RUN),
                  Remembered(account, LIMIT, False, NOW, project="relative/path", run_id=RUN)):
        limits.share(store_of(other), entry, NOW, 60)
        assert known_limit(other, NOW + 10) is None


def test_an_expired_entry_is_dropped_and_a_new_limit_replaces_its_accounts_old_one(step, other):
    plan_limit(step, LIMIT, "Builder", 1, NOW)
    later = Limit(NOW + 9000, "five_hour", "limit")
    plan_limit(step, later, "Builder", 2, NOW + 4000)  # the first one has reset: replaced, not kept
    entries = json.loads(shared_file(step).read_text())["limits"]
    assert [e["resets_at"] for e in entries] == [NOW + 9000]
    assert known_limit(other, NOW + 9000 + 61) is None


def test_a_limit_that_resets_beyond_the_longest_wait_stops_the_other_loop_too(step, other, said):
    weekly = Limit(NOW + 3 * 86400, "seven_day", "You've hit your weekly limit")
    assert plan_limit(step, weekly, "Builder", 1, NOW) == exitcodes.USAGE_LIMIT
    known = known_limit(other, NOW + 5)
    assert plan_limit(other, known.limit, "Builder", 1, NOW + 5, known=known) == exitcodes.USAGE_LIMIT
    assert f"by the loop of {step.cfg.project}" in said[-1][1]


def test_limit_clear_forgets_the_account_stores_limits_of_the_cli(step, other):
    plan_limit(step, LIMIT, "Builder", 1, NOW)
    assert [e.resets_at for e in limits.forget_shared(store_of(other), "codex", NOW)] == []
    assert [e.resets_at for e in limits.forget_shared(store_of(other), "claude", NOW)] == [NOW + 3600]
    assert known_limit(other, NOW + 10) is None


ERR = ApiError(True, 529, "overloaded_error", "API Error: 529 Overloaded")


def test_an_outage_one_loop_backs_off_from_holds_the_other_loops_of_its_cli(step, other, said):
    assert plan_outage(step, ERR, "Builder", 1, NOW, rng=lambda: 0.0) == exitcodes.WAIT
    assert pending(step)["until"] == NOW + 30
    outage = known_outage(other, NOW + 1)
    assert outage is not None and (outage.cli, outage.until, outage.run_id) == ("claude", NOW + 30, RUN)
    assert known_outage(step, NOW + 1) is None  # its own backoff is its own wait already
    assert plan_shared_outage(other, outage, "Builder", 2, NOW + 1, rng=lambda: 1.0) == exitcodes.WAIT
    assert pending(other)["until"] == NOW + 30 + 30 * 0.2 and pending(other)["kind"] == "outage"
    assert f"by the loop of {step.cfg.project}, run {RUN}" in said[-1][1] and "without calling the agent" in said[-1][1]
    # Once its backoff is over, it binds no more; another CLI is never held.
    assert known_outage(other, NOW + 30) is None
    assert known_outage(other, NOW + 1, whose(other, ("codex", "exec"))) is None


def test_a_later_backoff_replaces_an_earlier_one_and_a_planted_outage_is_not_believed(step, other, said):
    plan_outage(step, ERR, "Builder", 1, NOW, rng=lambda: 0.0)
    store = store_of(other)
    data = json.loads(store.path("outages.json").read_text())
    data["outages"][0]["until"] = NOW + 600  # edited: no run recorded that backoff
    store.path("outages.json").write_text(json.dumps(data))
    assert known_outage(other, NOW + 1) is None
    assert "no run of Genesis recorded" in said[-1][1]
    # One far beyond the longest backoff never binds, whoever wrote it.
    step.event("outage_shared", cli="claude", until=NOW + 86400)
    data["outages"][0]["until"] = NOW + 86400
    store.path("outages.json").write_text(json.dumps(data))
    assert known_outage(other, NOW + 1) is None


@pytest.mark.fault(95)
def test_the_agents_box_keeps_the_account_store_read_only(step):
    box = box_for(step, ("claude", "-p"), {"HOME": os.environ["HOME"], "PATH": os.environ["PATH"]})
    store = store_of(step)
    assert store.folder.is_dir()  # made before the box, so that it can be bound read-only
    folder = str(store.folder.resolve())
    assert box.kind == "bubblewrap" and folder in box.places.protected  # the shipped default here: bwrap
    argv = list(box.wrap(("true",)))
    assert any(argv[i:i + 3] == ["--ro-bind", folder, folder] for i in range(len(argv)))
    # only the store: the folder around it keeps what the agent's own `genesis` writes (fault 68)
    assert str(store.root.resolve()) not in box.places.protected

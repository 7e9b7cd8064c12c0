"""Proof of ownership by the markers in a process's environment (proctree.marked): on Linux read
as the environment lies in /proc, and the same answer as psutil's parsing gives."""

from __future__ import annotations

import os
import sys
import uuid

import pytest

from genesis.procs import proctree
from genesis.procs.proctree import identify, marked

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


@pytest.fixture
def sleepers(procs):
    """Starts a sleeping process with extra environment entries, handed back once /proc shows its
    environment (the procs fixture); all are killed at the end."""

    def start(**extra: str) -> int:
        return procs(SLEEPER, env=extra).pid

    return start


def _ours(found, pids) -> set[int]:
    return {ident.pid for ident in found if ident.pid in pids}


def test_a_marker_matches_only_its_exact_entry_and_every_asks_for_all(sleepers):
    run = uuid.uuid4().hex
    exact = sleepers(MARK_RUN=run)
    both = sleepers(MARK_RUN=run, MARK_PHASE="Builder")
    other = sleepers(MARK_RUN=run + "0")                 # a longer value
    inside = sleepers(MARK_NOTE=f"MARK_RUN={run}")       # the entry as another entry's value
    prefix = sleepers(XMARK_RUN=run)                     # a longer key
    pids = {exact, both, other, inside, prefix}

    assert _ours(marked({"MARK_RUN": run}), pids) == {exact, both}
    assert _ours(marked({"MARK_RUN": run, "MARK_PHASE": "Builder"}, every=True), pids) == {both}
    assert _ours(marked({"MARK_RUN": "nobody", "MARK_PHASE": "Builder"}), pids) == {both}
    assert _ours(marked({"MARK_RUN": run}, uid=os.geteuid() + 1), pids) == set()   # another user's: none


def test_the_proc_reading_and_psutils_agree_and_name_each_process_as_identify_does(sleepers):
    run = uuid.uuid4().hex
    pids = {sleepers(MARK_RUN=run), sleepers(MARK_RUN=run, MARK_PHASE="Planner"), sleepers(MARK_PHASE="Planner")}
    for markers, every in (({"MARK_RUN": run}, False), ({"MARK_RUN": run, "MARK_PHASE": "Planner"}, True),
                           ({"MARK_RUN": run, "MARK_PHASE": "Planner"}, False)):
        fast = {i for i in marked(markers, every=every) if i.pid in pids}
        slow = {i for i in proctree._marked_by_psutil(markers, os.geteuid(), every) if i.pid in pids}
        assert fast == slow and fast, (markers, every)
        assert all(identify(i.pid) == i for i in fast)

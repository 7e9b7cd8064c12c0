"""Two nights on one account with the real `claude`: a usage limit one loop meets holds the
other loop too, on another project, until the reset; each resumes after it, a jitter apart.

One stub API serves both loops (one account: the same HOME and login); a request is told
to its loop by the working directory Claude Code puts in its system prompt. Time is read only
as the order of recorded timestamps against the stub's window.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from e2e.harness import LOOP, NIGHT_KNOBS, leftovers, night_env, of, plan_night, run_events
from helpers.git import new_repo
from helpers.state import events_of
from helpers.waits import wait_for

from genesis.ledger.store import LedgerError

pytestmark = pytest.mark.claude


def start(project: Path, env: dict) -> subprocess.Popen:
    return subprocess.Popen(["bash", str(LOOP), "--project", str(project), "--max-iterations", "4"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
                            start_new_session=True)


def finish(loop: subprocess.Popen) -> str:
    try:
        return loop.communicate(timeout=240)[0]
    except subprocess.TimeoutExpired:  # never leave a loop behind
        os.killpg(loop.pid, signal.SIGTERM)
        out = loop.communicate(timeout=60)[0]
        pytest.fail(f"the loop did not end: {out}")


def whose(request: dict, projects: dict[str, Path]) -> str:
    text = json.dumps(request["body"])
    found = [name for name, path in projects.items() if str(path.resolve()) in text]
    assert len(found) == 1, found
    return found[0]


def waiting(project: Path) -> bool:
    try:
        return any(e["event"] == "wait_start" for e in events_of(project))
    except LedgerError:  # read while the loop is still making it
        return False


@pytest.mark.fault(94)
def test_a_limit_one_loop_meets_holds_the_other_loop_on_the_account_until_the_reset(claude, fast_stub, tmp_path):
    projects = {"a": new_repo(tmp_path / "a"), "b": new_repo(tmp_path / "b")}
    plan_night(projects["a"], ["Add a /health endpoint with a test"])
    plan_night(projects["b"], ["Log each request"])
    # a's second request (its Builder, after `cat TASKS.md`) meets a 5-hour limit for ~20 s: b,
    # started once a waits, must reach its first phase inside it (its start checks take seconds).
    window = fast_stub.limit_after(2, 20)
    env = night_env(fast_stub, subscriber=True)
    loops = {"a": start(projects["a"], env)}
    try:
        wait_for(lambda: waiting(projects["a"]) or loops["a"].poll() is not None, timeout=120,
                 what="a's wait for the limit")
        assert loops["a"].poll() is None, loops["a"].communicate()[0]
        loops["b"] = start(projects["b"], env)  # while the limit is known, between b's phases (its first)
        outs = {name: finish(loop) for name, loop in loops.items()}
    finally:
        for loop in loops.values():
            if loop.poll() is None:
                os.killpg(loop.pid, signal.SIGKILL)
                loop.communicate()
    evs = {name: run_events(path) for name, path in projects.items()}
    for name in projects:
        assert loops[name].returncode == 0, outs[name]
        assert of(evs[name], "loop_end")[-1]["reason"].startswith("done"), outs[name]
        assert leftovers(projects[name]) == []
    margin = float(NIGHT_KNOBS["GENESIS_LIMIT_MARGIN_SECONDS"])
    # Requests that met the limit: one, a's (each loop at most once); b's none.
    refused = [r for r in fast_stub.messages() if r["status"] == 429]
    assert [whose(r, projects) for r in refused] == ["a"], refused
    # Phases started while the limit was known, in either loop: none.
    known = of(evs["a"], "limit_remembered")[0]
    assert known["resets_at"] == window.resets_at
    started = [e for name in projects for e in of(evs[name], "phase_start")]
    assert not [e for e in started if known["epoch"] <= e["epoch"] < window.resets_at + margin]
    # b waited for a's limit without calling its agent, then ran after the reset.
    held = of(evs["b"], "wait_start")
    assert [w["kind"] for w in held] == ["limit"]
    assert f"by the loop of {projects['a'].resolve()}" in outs["b"]
    assert all(r["at"] >= window.resets_at + margin for r in fast_stub.messages() if whose(r, projects) == "b")
    assert not of(evs["b"], "phase_retry") and "OPEN" not in outs["b"]  # a limit is no failed phase for its breaker
    # Both resumed after the reset plus the margin, not in the same instant.
    untils = [of(evs["a"], "wait_start")[0]["until"], held[0]["until"]]
    assert all(window.resets_at + margin <= u <= window.resets_at + margin * 1.2 for u in untils), untils
    assert untils[0] != untils[1]

"""loop/taskcheck.py on a real project: after a phase that ticked a task done, its checks run
(real processes, in the box the settings choose), the evidence is recorded, a refuted claim is
reopened in Genesis's own commit and the next prompt tells why; the done rule and a fleet's
monitor count a tick only with its evidence."""

from __future__ import annotations

import http.server
import threading
from dataclasses import replace

import pytest
from helpers.git import commit_file, git

from genesis.config import resolve
from genesis.loop.taskcheck import after_phase, done_gate, notes_for_prompt, proven
from genesis.repo.phasework import before
from genesis.repo.tasks import DONE, OPEN, REVIEW, parse
from genesis.sandbox.allowlist import parse_entries
from genesis.sandbox.detect import probe

RUN = "run-taskcheck"
TASKS = "# Tasks\n\n- [ ] add /health\n  check: echo 'no /health route'; exit 4\n- [ ] add the cache\n"


@pytest.fixture(autouse=True)
def places(step):
    """The folders a loop has made by the time a phase ends (the box binds them)."""
    for folder in (step.layout.heartbeat_dir, step.layout.log_dir):
        folder.mkdir(parents=True, exist_ok=True)


def evidence(step) -> list[dict]:
    return step.events(kinds=("task_evidence",))


def tick(project, *texts: str) -> None:
    """The agent's phase: the tasks ticked done and committed (by the agent, as a hostile one would)."""
    text = (project / "TASKS.md").read_text()
    for t in texts:
        text = text.replace(f"- [ ] {t}", f"- [x] {t}")
    commit_file(project, "TASKS.md", text, "done, says the agent")


def test_a_refuted_tick_is_reopened_in_genesiss_commit_and_the_next_prompt_tells_why(step, project, said):
    commit_file(project, "TASKS.md", TASKS, "tasks")
    start = before(project)
    tick(project, "add /health")
    step.event("phase_work", iteration=1, phase="Criticizer", tasks_done=["add /health"])
    after_phase(step, "Criticizer", 1, start)

    (proof,) = evidence(step)
    assert (proof["task"], proof["outcome"], proof["back_to"], proof["tail"]) == \
        ("add /health", "failed", OPEN, ["no /health route"])
    assert proof["checks"] == [{"kind": "task", "command": "echo 'no /health route'; exit 4", "exit_code": 4,
                                "seconds": proof["checks"][0]["seconds"], "timed_out": False, "error": ""}]
    assert [(t.text, t.state) for t in parse((project / "TASKS.md").read_text()).items] == \
        [("add /health", OPEN), ("add the cache", OPEN)]
    assert git(project, "log", "-1", "--format=%s").startswith("genesis: reopen what Criticizer ticked without "
                                                               "evidence (iteration 1): add /health")
    assert not git(project, "status", "--porcelain", "TASKS.md").strip()  # committed, nothing left over
    assert [e["count"] for e in step.events(kinds=("task_reopened",))] == [1]
    told = notes_for_prompt(step)
    assert "- add /health\n  It was ticked done, but its check failed: `echo 'no /health route'; exit 4` exited 4" \
        in told and "    no /health route" in told
    # The done rule: the reopened task is open again; a tick of it without evidence never counts:
    # its checks run at the done rule, by Genesis, and reopen it again.
    assert done_gate(step, True, "every task is done", None, 1) == (True, "every task is done")  # nothing [x]
    tick(project, "add /health")
    step.event("phase_work", iteration=2, phase="Builder", tasks_done=["add /health"])
    done, why = done_gate(step, True, "every task is done", None, 2)
    assert (done, why) == (False, "1 task(s) ticked done were reopened: their checks failed")
    assert [(e["phase"], e["outcome"]) for e in evidence(step)][-1] == ("Genesis", "failed")
    assert parse((project / "TASKS.md").read_text()).items[0].state == OPEN


def test_a_tick_an_earlier_run_left_without_evidence_is_checked_at_the_done_rule(step, project, said):
    """The loop was killed between the agent's tick and its checks: the next run's done rule
    does not take the `[x]` on trust, it runs the checks first (here they pass: done)."""
    commit_file(project, "TASKS.md", TASKS.replace("exit 4", "exit 0"), "tasks")
    tick(project, "add /health", "add the cache")
    step.event("phase_work", iteration=1, phase="Criticizer", tasks_done=["add /health", "add the cache"])
    later = replace(step, run_id="run-taskcheck-2")
    later.event("loop_start")
    assert done_gate(later, True, "every task is done", None, 1) == (True, "every task is done")
    assert [(e["run_id"], e["task"], e["outcome"]) for e in evidence(later)] == [
        ("run-taskcheck-2", "add /health", "passed"), ("run-taskcheck-2", "add the cache", "agent's word")]
    assert done_gate(later, True, "every task is done", None, 1) == (True, "every task is done")  # once is enough
    assert len(evidence(later)) == 2


def test_the_check_run_is_the_one_the_task_had_when_the_phase_started(step, project, said):
    commit_file(project, "TASKS.md", TASKS, "tasks")
    start = before(project)
    text = (project / "TASKS.md").read_text().replace("check: echo 'no /health route'; exit 4", "check: true")
    commit_file(project, "TASKS.md", text, "the agent makes its check pass")
    tick(project, "add /health")
    after_phase(step, "Criticizer", 1, start)
    (proof,) = evidence(step)
    assert (proof["outcome"], proof["checks"][0]["command"]) == ("failed", "echo 'no /health route'; exit 4")
    assert ("warn", "Criticizer changed the check of 'add /health'; the one it had when the phase started is run") \
        in said


def test_the_projects_check_runs_for_every_tick_and_a_task_without_one_is_done_on_the_agents_word(step, project):
    commit_file(project, "TASKS.md", TASKS.replace("exit 4", "exit 0"), "tasks")
    start = before(project)
    tick(project, "add /health", "add the cache")
    after_phase(step, "Criticizer", 1, start)  # no project check: one passes, one on the agent's word
    assert [(e["task"], e["outcome"]) for e in evidence(step)] == [("add /health", "passed"),
                                                                    ("add the cache", "agent's word")]
    strict = replace(step, cfg=replace(step.cfg, check_cmd="echo 'lint: 3 errors'; exit 1"))
    commit_file(project, "TASKS.md", TASKS.replace("exit 4", "exit 0"), "open again")
    start = before(project)
    tick(project, "add /health", "add the cache")
    after_phase(strict, "Criticizer", 2, start)
    latest = evidence(step)[2:]
    assert [(e["task"], e["outcome"], [c["kind"] for c in e["checks"]], e["tail"]) for e in latest] == [
        ("add /health", "failed", ["task", "project"], ["lint: 3 errors"]),
        ("add the cache", "failed", ["project"], ["lint: 3 errors"])]


def test_a_builders_tick_goes_back_for_review_and_a_fleets_monitor_finds_it_unproven(step, project):
    commit_file(project, "TASKS.md", TASKS.replace("exit 4", "exit 0"), "tasks")
    start = before(project)
    tick(project, "add /health")
    step.event("phase_work", iteration=1, phase="Builder", tasks_done=["add /health"])
    assert proven(step.layout, "add /health") == (False, "it was ticked done without evidence that bears it out")
    after_phase(step, "Builder", 1, start)
    (proof,) = evidence(step)
    assert (proof["outcome"], proof["back_to"]) == ("unreviewed", REVIEW)
    assert [t.state for t in parse((project / "TASKS.md").read_text()).items] == [REVIEW, OPEN]
    assert proven(step.layout, "add /health")[0] is False
    tick_text = (project / "TASKS.md").read_text().replace("- [?] add /health", "- [x] add /health")
    start = before(project)
    commit_file(project, "TASKS.md", tick_text, "reviewed")
    step.event("phase_work", iteration=1, phase="Criticizer", tasks_done=["add /health"])
    after_phase(step, "Criticizer", 1, start)
    assert evidence(step)[-1]["outcome"] == "passed" and parse(tick_text).items[0].state == DONE
    assert proven(step.layout, "add /health") == (True, "its evidence bears it out")
    assert proven(step.layout, "add the cache") == (False, "no phase of its loop ticked it done")
    assert proven(None, "add /health") == (False, "its loop's ledger is unknown")


@pytest.mark.skipif(probe().bwrap is None, reason="no bubblewrap here: the allow-listed network is bubblewrap's")
def test_a_check_runs_behind_the_boxs_proxy_an_allowed_host_reached_another_refused(step, project, said):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        checks = (f"# Tasks\n\n- [ ] add /health\n  check: curl -sf -o /dev/null --noproxy '' http://127.0.0.1:{port}/"
                  f"\n- [ ] add the cache\n  check: curl -sf -o /dev/null http://not-allowed.example/\n")
        commit_file(project, "TASKS.md", checks, "tasks")
        start = before(project)
        tick(project, "add /health", "add the cache")
        step.event("phase_work", iteration=1, phase="Criticizer", tasks_done=["add /health", "add the cache"])
        cfg = replace(resolve(project, env={}), network_allow=parse_entries(f"127.0.0.1:{port}"))
        after_phase(replace(step, cfg=cfg), "Criticizer", 1, start)
    finally:
        server.shutdown()
        server.server_close()
    assert [(e["task"], e["outcome"], e["checks"][0]["exit_code"]) for e in evidence(step)] == [
        ("add /health", "passed", 0), ("add the cache", "failed", 22)]  # curl -f: the proxy's 403

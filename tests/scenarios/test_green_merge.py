"""A green merge, as a user's fleet meets it: real git, real child loops with a scripted agent,
the project's check (GENESIS_CHECK_CMD) run on the merged tree.

Two tasks each pass the project's check on their own branch, but not together: the second's
merge is red, so it is not landed; the task goes back to a new attempt that finds, under its
task in TASKS.md, what failed and the output's last lines; that attempt mends it, and its merge
is green.
"""

from __future__ import annotations

from helpers.fleet import fleet_env, fleet_ledger, fleet_project, start_fleet, task_agent, tasks_on
from helpers.git import git
from helpers.waits import wait_for

from genesis import exitcodes
from genesis.fleet.ledger import FleetLedgerError
from genesis.fleet.taskref import task_id
from genesis.repo.tasks import DONE, parse

# Held while GATES/<task id> exists; an attempt told its merge was red records what it was told
# (TOLD/<task id>) and mends the clash (mended.txt).
MENDING = """#!/usr/bin/env bash
set -euo pipefail
while [[ -e ${GATES}/${GENESIS_TASK_ID} ]]; do sleep 0.1; done
if grep -q 'was red' TASKS.md; then
  grep 'Genesis:' TASKS.md >"${TOLD}/${GENESIS_TASK_ID}"
  printf 'mended\\n' >mended.txt
fi
printf '%s\\n' "${GENESIS_TASK}" >"work-${GENESIS_TASK_ID}.txt"
"${PY}" - <<'PY'
import os
text = os.environ["GENESIS_TASK"]
lines = open("TASKS.md").read().splitlines(keepends=True)
out = [line.replace("[ ]", "[x]", 1) if line.rstrip("\\n").endswith(text) and "[ ]" in line else line for line in lines]
open("TASKS.md", "w").write("".join(out))
PY
"""
# Two tasks' work together, unmended, fails (one alone passes: each child's own check is green).
CHECK = ("if [ \"$(ls work-*.txt 2>/dev/null | wc -l)\" -gt 1 ] && [ ! -e mended.txt ]; then "
         "echo 'FAILED test_clash: the two works clash'; exit 1; fi")


def test_a_merge_that_breaks_the_project_s_check_goes_back_to_its_task_told_the_tail(project, tmp_path):
    texts = ["add the parser", "add the printer"]
    fleet_project(project, texts)
    gates, told = tmp_path / "gates", tmp_path / "told"
    gates.mkdir()
    told.mkdir()
    second = task_id(texts[1])
    (gates / second).touch()
    env = fleet_env(GATES=str(gates), TOLD=str(told), GENESIS_CHECK_CMD=CHECK, HEARTBEAT_STALE="600s")
    proc = start_fleet(project, "2", task_agent(tmp_path / "agent.sh", MENDING), env=env, log=tmp_path / "fleet.log")
    log = lambda: (tmp_path / "fleet.log").read_text()[-4000:]  # noqa: E731

    def first_home() -> bool:
        try:
            with fleet_ledger(project) as led:
                return any(e.task_id == task_id(texts[0]) for e in led.events("merged"))
        except FleetLedgerError:  # not made yet
            return False

    wait_for(first_home, 120, "the first task to come home")
    (gates / second).unlink()  # its branch was made before the first came home: alone, it passes
    assert proc.wait(timeout=240) == exitcodes.OK, log()

    with fleet_ledger(project) as led:
        (red,) = led.events("merge_red")
        merged = {e.task_id: e for e in led.events("merged")}
        history = [(a.kind, a.outcome) for a in led.attempts(second)]
        rows = {r.text: r.state for r in led.tasks()}
    assert red.task_id == second and red.detail["to"] == "task"
    assert "the project's check" in red.detail["reason"] and "exited 1" in red.detail["reason"]
    assert red.detail["tail"] == ["FAILED test_clash: the two works clash"]
    assert [(c["kind"], c["exit_code"]) for c in red.detail["checks"]] == [("project", 1)]
    # The verified attempt whose merge was red counts as failed; the next one came home, its checks green.
    assert history == [("start", "failed"), ("restart", "verified")]
    assert [c["exit_code"] for c in merged[second].detail["checks"]] == [0]
    assert rows == {texts[0]: "merged", texts[1]: "merged"}
    # The new attempt was told what failed, with the output's last line.
    note = (told / second).read_text()
    assert "its merge onto" in note and "FAILED test_clash: the two works clash" in note
    # Nothing red ever reached the project branch; both tasks are done there, the mend with them.
    assert {t.text: t.state for t in parse(tasks_on(project)).items} == {texts[0]: DONE, texts[1]: DONE}
    assert git(project, "show", "HEAD:mended.txt") == "mended\n"
    assert "Genesis:" not in tasks_on(project)


# Both tasks rewrite the same line of shared.txt; the Merger (the same agent, GENESIS_AGENT=Merger)
# "resolves" the conflict by keeping its own task's line: the other task's is dropped.
ONE_SIDED = """#!/usr/bin/env bash
set -euo pipefail
if [[ ${GENESIS_AGENT:-} == Merger ]]; then
  echo "merger in $PWD" >>"${MERGER_RAN}"
  printf '%s\\n' "${GENESIS_TASK}" >shared.txt
  git add shared.txt
  exit 0
fi
printf '%s\\n' "${GENESIS_TASK}" >shared.txt
"${PY}" - <<'PY'
import os
text = os.environ["GENESIS_TASK"]
lines = open("TASKS.md").read().splitlines(keepends=True)
out = [line.replace("[ ]", "[x]", 1) if line.rstrip("\\n").endswith(text) and "[ ]" in line else line for line in lines]
open("TASKS.md", "w").write("".join(out))
PY
"""


def test_a_conflict_the_merger_resolves_by_dropping_the_other_task_s_line_is_not_landed_and_named(project, tmp_path):
    (project / "shared.txt").write_text("nobody yet\n")
    git(project, "add", "shared.txt")
    texts = ["say hello", "say goodbye"]
    fleet_project(project, texts)
    ran = tmp_path / "merger-ran"
    env = fleet_env(MERGER_RAN=str(ran))
    proc = start_fleet(project, "2", task_agent(tmp_path / "agent.sh", ONE_SIDED), env=env,
                       log=tmp_path / "fleet.log")
    assert proc.wait(timeout=180) == exitcodes.FLEET_NEEDS_REVIEW, (tmp_path / "fleet.log").read_text()[-3000:]

    with fleet_ledger(project) as led:
        rows = {r.text: r for r in led.tasks()}
        (review,) = led.events("needs_review")
        (merger,) = led.events("merger")
    first, second = sorted(texts, key=lambda t: rows[t].state != "merged")
    assert (rows[first].state, rows[second].state) == ("merged", "needs-review")
    assert ran.read_text().count("merger in ") == 1 and merger.task_id == review.task_id == task_id(second)
    # The first task's line would have gone: not landed, the lost hunk named with the commit that added it.
    assert review.detail["outcome"] == "dropped"
    (lost,) = review.detail["lost"]
    assert lost.startswith(f"shared.txt line 1 (added by the task {first!r} (its commit ")
    assert lost.endswith(f" on the project branch): {first!r})")
    assert "would drop what was added" in rows[second].reason and "not landed" in rows[second].reason
    assert git(project, "show", "HEAD:shared.txt") == f"{first}\n"
    assert git(project, "show", f"{rows[second].branch}:shared.txt") == f"{second}\n"  # its branch kept as it was
    assert {t.text: t.state for t in parse(tasks_on(project)).items} == {first: DONE, second: "open"}

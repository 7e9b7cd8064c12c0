"""The alerts a person gets from a real loop, at a local webhook and ntfy receiver: a stall
that heals itself is one quiet message and then its resolution; an OPEN breaker and the
loop's end are one message; the end of the night is a summary. The report the loop prints at
its end says where its final alert went and counts as told only what a channel took.

Its other endings by replay: a final alert still being sent when the wait's bound passes, or
no channel set (tests/loop/test_finish.py, tests/reporting/test_consistent.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.agent import script
from helpers.git import git
from helpers.loop import loop_env, run_loop
from helpers.receiver import Receiver
from helpers.state import events_of
from helpers.waits import wait_for

# Stuck (silent, asleep) on its first run of the Builder; on the retry it builds a task and commits
# it for review. The Criticizer (due: a task awaits review) talks for a few seconds, then ticks it:
# the loop's end comes seconds after the resolution, not at once.
AGENT = r"""#!/usr/bin/env bash
set -eu
if [ "$GENESIS_AGENT" = Builder ]; then
  mark=".tried-$GENESIS_ITERATION"
  echo "partial" >partial.txt
  if [ ! -e "$mark" ]; then : >"$mark"; exec sleep 300; fi
  sed -i.bak 's/- \[ \] first/- [?] first/' TASKS.md && rm -f TASKS.md.bak
  git add TASKS.md partial.txt && git commit -qm "Builder: the first task, on the retry"
else
  for _ in 1 2 3 4 5 6 7 8 9 10 11 12 13 14; do echo "reviewing"; sleep 0.5; done
  sed -i.bak 's/- \[?\] first/- [x] first/' TASKS.md && rm -f TASKS.md.bak
  git add TASKS.md && git commit -qm "Criticizer: the first task reviewed"
fi
"""
IDLE = "#!/usr/bin/env bash\necho 'nothing to do'\n"


@pytest.fixture
def project_with_tasks(project: Path) -> Path:
    git(project, "config", "user.name", "Agent")
    git(project, "config", "user.email", "agent@example.invalid")
    (project / ".gitignore").write_text(".tried-*\n")
    (project / "TASKS.md").write_text("# Tasks\n\n- [ ] first\n- [ ] second\n- [x] zeroth\n")
    git(project, "add", ".gitignore", "TASKS.md")
    git(project, "commit", "-qm", "tasks")
    return project


def channels(rx: Receiver, **extra: str) -> dict[str, str]:
    return {"GENESIS_NOTIFY_DESKTOP": "false", "GENESIS_NOTIFY_WEBHOOK": rx.url + "/hook",
            "GENESIS_NOTIFY_NTFY": rx.url + "/topic", "GENESIS_NOTIFY_RETRIES": "0", **extra}


@pytest.mark.fault(88)
def test_a_stall_that_heals_itself_is_one_quiet_message_then_its_resolution_and_the_night_ends_summed_up(
        project_with_tasks, tmp_path):
    project = project_with_tasks
    agent = script(tmp_path / "agent.sh", AGENT)
    base = git(project, "rev-parse", "HEAD").strip()
    with Receiver() as rx:
        done = run_loop(project, "--agent-cmd", str(agent), "--max-iterations", "1",
                        env=loop_env(**channels(rx), HEARTBEAT_STALE="2s", HEARTBEAT_COUNT_OUTPUT="true",
                                     GENESIS_PHASES="Builder Criticizer", PHASE_RETRIES="1",
                                     GENESIS_MAX_RECOVERIES="2"))
        assert done.returncode == 0, done.stderr
        wait_for(lambda: {"retry", "resolved", "loop_end"} <= {a["ticket"]["kind"] for a in events_of(project, kind="alert")}, 30,
                 "the stall's, the resolution's and the loop end's alerts")
        told = {a["ticket"]["kind"]: a for a in events_of(project, kind="alert")}
        assert all(told[k]["decision"] == "intervene" for k in ("retry", "resolved", "loop_end")), \
            [(a["ticket"]["kind"], a["decision"], a["why"]) for a in events_of(project, kind="alert")]
        hooks = [r for r in rx.wait_for(6) if r.path == "/hook"]
        pushes = [r for r in rx.requests if r.path == "/topic"]
    # One message per cause, in order: the stall (quiet), its resolution, the night's summary.
    assert [h.json["genesis"]["kind"] for h in hooks] == ["retry", "resolved", "loop_end"]
    stall, fixed, end = (h.json for h in hooks)
    name = project.name
    assert stall["text"].splitlines()[0] == f"{name}: Builder stuck, retrying"
    assert stall["genesis"]["severity"] == "medium"
    assert "stale window" in stall["text"]  # the window that ended it
    assert "Partial work committed (" in stall["text"] and "lost" not in stall["text"]
    first_work = next(e for e in events_of(project) if e["event"] == "phase_work")  # the stuck attempt's
    kept = first_work["commits"][-1]["sha"]
    assert f"Partial work committed ({kept})." in stall["text"]
    assert "partial.txt" in git(project, "show", "--name-only", "--format=", kept)
    assert "Retrying (retry 1 of 1), 1 retry left tonight." in stall["text"]
    assert fixed["text"].splitlines()[0] == f"{name}: resolved: Builder recovered on retry 1"
    assert (fixed["genesis"]["severity"], fixed["genesis"]["resolves"]) == ("low", stall["genesis"]["ticket_id"])
    summary = end["text"].splitlines()
    assert summary[0] == f"{name}: night over: 2/3 tasks done"
    assert "Tasks: 2 of 3 done (1 tonight), 1 open." in summary
    commits = int(git(project, "rev-list", "--count", f"{base}..HEAD").strip())
    assert commits >= 3 and f"{commits} commits, 1 iteration, 1 abnormal phase, 1 incident." in summary, summary
    assert any(line.startswith("Cost not known, duration") for line in summary), summary
    # ntfy: the title is the cause; the stall at default priority; the resolution carries the stall's sequence id.
    by_title = {p.headers["Title"]: {k.lower(): v for k, v in p.headers.items()} for p in pushes}
    quiet = by_title[f"{name}: Builder stuck, retrying"]
    assert quiet["priority"] == "default"
    resolved = by_title[f"{name}: resolved: Builder recovered on retry 1"]
    assert resolved["priority"] == "low" and resolved["x-sequence-id"] == quiet["x-sequence-id"]


@pytest.mark.fault(88)
@pytest.mark.fault(90)
def test_an_open_breaker_and_the_loops_end_are_one_message_and_the_printed_report_says_where_it_went(
        project_with_tasks, tmp_path):
    project = project_with_tasks
    idle = script(tmp_path / "idle.sh", IDLE)
    with Receiver() as rx:
        done = run_loop(project, "--agent-cmd", str(idle), "--max-iterations", "5",
                        env=loop_env(**channels(rx), GENESIS_PHASES="Builder", CB_WARNING_THRESHOLD="1",
                                     CB_STOP_THRESHOLD="2"))
        assert done.returncode == 3, done.stderr
        had = [r.json["genesis"]["final"] for r in rx.requests if r.path == "/hook"]
        assert had and had[-1] is True  # the receiver had the final alert before the printed report said so
        wait_for(lambda: {"iteration_end", "loop_end"} <= {a["ticket"]["kind"] for a in events_of(project, kind="alert")
                                                            if a["ticket"]["severity"] == "critical"
                                                            or a["ticket"]["final"]}, 40,
                 "the OPEN breaker's and the loop end's alerts")
        hooks = [r for r in rx.wait_for(2) if r.path == "/hook"]
    assert [h.json["genesis"]["kind"] for h in hooks] == ["loop_end"]
    [end] = hooks
    lines = end.json["text"].splitlines()
    assert lines[0] == f"{project.name}: breaker OPEN, loop stopped"
    assert "Ended:" in lines[1] and "(exit 3)" in lines[1]
    assert lines[-1].startswith("Act: fix the task list")
    alerts = events_of(project, kind="alert")
    opened = [a for a in alerts if a["ticket"]["kind"] == "iteration_end" and "OPEN" in a["ticket"]["cause"]
              and "HALF" not in a["ticket"]["cause"]]
    assert [(a["decision"], a.get("folded")) for a in opened] == [("dismiss", True)]

    # The report the loop printed at its end: where its final alert went, listed with the triage's
    # reason as the ledger has it.
    printed = [line.split("] ", 1)[-1] for line in (done.stdout + done.stderr).splitlines()]
    assert "final alert: sent to webhook, ntfy" in printed, "\n".join(printed[-60:])
    (final,) = [a for a in alerts if a["ticket"].get("final")]
    start = next(n for n, line in enumerate(printed) if line.startswith("alerts ("))
    listed = " ".join(" ".join(printed[start:]).split())
    assert (f"{final['ticket']['ticket_id']} " in listed and
            f"{final['ticket']['cause']} (sent to webhook, ntfy) triage (rules): {final['why']}" in listed), listed
    # Told: what a channel took, or what was folded into the end's message that one took.
    raised = [a for a in alerts if not a["ticket"].get("final") and a["ticket"].get("kind") != "resolved"]
    reached = [a for a in raised if a.get("delivered") or a.get("folded")]
    assert raised, "the breaker raised no ticket"
    (rate,) = [" ".join(line.split()) for line in printed if line.startswith("escalation rate  ")]
    assert rate == (f"escalation rate {100 * len(reached) / len(raised):.0f}% tickets that reached the operator: a "
                    f"channel took {len(reached)} of {len(raised)} ticket{'s' if len(raised) != 1 else ''} raised")

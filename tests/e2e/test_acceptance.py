"""Acceptance: what a user runs works, with the real `claude` and Genesis's shipped defaults.

Nothing about the loop is configured here except time: the default phases, triggers and
prompts, the default agent command (`claude -p --dangerously-skip-permissions`, found on
PATH), the hook installed the user's way (`genesis hook install`, user scope). The stub
Messages API plays Genesis's own prompts like a competent model over TASKS.md (see
stub_api.py). One test runs a several-iteration night that ends itself once the work is
done; the other runs the README's "Real use with Claude Code" block literally, read from
README.md at test time.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from e2e.harness import (LOOP, ROOT, agent_log, checklist, commits, leftovers, of, plan_night, run_events, run_to_end,
                         user_env)
from e2e.stub_api import slug
from helpers.git import git
from helpers.state import state_of

pytestmark = pytest.mark.claude

TASKS = ["Add a /health endpoint with a test", "Log each request", "Read the port from PORT",
         "Add a /version endpoint", "Document the endpoints in README.md", "Return errors as JSON"]
HOOK_EVENTS = ("PreToolUse", "PostToolUse", "PostToolUseFailure", "SessionStart")
README_HEADING = "## Real use with Claude Code"


def assert_hook_installed(settings: Path) -> None:
    hooks = json.loads(settings.read_text())["hooks"]
    for event in HOOK_EVENTS:
        commands = [h["command"] for group in hooks.get(event, []) for h in group["hooks"]]
        assert any("genesis-heartbeat.sh" in c for c in commands), f"no heartbeat hook for {event}: {hooks}"


def test_a_tasks_night_with_the_shipped_defaults(claude, fast_stub, project, hermetic):
    installed = plan_night(project, TASKS)
    settings = hermetic / ".claude" / "settings.json"
    assert str(settings) in installed
    assert_hook_installed(settings)
    env = {**user_env(fast_stub), "GENESIS_BIN": str(Path(sys.executable).parent / "genesis")}

    # Room for a seventh iteration: the loop must not need it.
    done = run_to_end(["bash", str(LOOP), "--project", str(project), "--max-iterations", "7"], env=env)

    out = done.stdout
    assert done.returncode == 0, out
    assert "hook is not installed" not in out and "refuses --dangerously-skip-permissions" not in out
    evs = run_events(project)
    start = of(evs, "loop_start")[0]
    assert start["agent"] == ["claude", "-p", "--dangerously-skip-permissions"]
    assert start["phases"] == ["Builder", "Criticizer", "Planner"]

    # Builder always; Criticizer when a task awaits review; Planner every 5th iteration or
    # when nothing is open: tasks 1-6 are built in iterations 1-6, and iteration 6's Planner
    # pass finds nothing open, so the night ends there: no idle iteration.
    ran = [(e["iteration"], e["phase"]) for e in of(evs, "phase_end")]
    assert ran == ([(i, p) for i in range(1, 5) for p in ("Builder", "Criticizer")]
                   + [(i, p) for i in (5, 6) for p in ("Builder", "Criticizer", "Planner")])
    assert all(e["status"] == "exited" and e["returncode"] == 0 and e["ending"] == "finished"
               for e in of(evs, "phase_end")), of(evs, "phase_end")
    skipped = [(e["iteration"], e["phase"]) for e in of(evs, "phase_skip")]
    assert skipped == [(i, "Planner") for i in range(1, 5)]
    assert out.count("Planner: skipped") == 4 and "Criticizer: skipped" not in out

    # Task n: the Builder of iteration n moves it [ ] -> [?] in its commit, the Criticizer of
    # the same iteration [?] -> [x]; nothing else touches the repository.
    history = commits(project)
    assert [s for _, s in history] == ["init", "Plan the night"] + [
        s for t in TASKS for s in (f"build: {t}", f"verified: {t}")]
    for n, task in enumerate(TASKS, start=1):
        (before, _), (built, _), (verified, _) = history[2 * n - 1: 2 * n + 2]
        assert checklist(project, before)[task] == " "
        assert checklist(project, built) == {**checklist(project, before), task: "?"}
        assert checklist(project, verified) == {**checklist(project, built), task: "x"}
        assert f"Built '{task}'" in agent_log(evs, n, "Builder")
        assert task in agent_log(evs, n, "Criticizer")
        assert (project / slug(task)).read_text() == f"{task}\n\nBuilt.\n"
    assert "1 task(s) still open" in agent_log(evs, 5, "Planner")
    assert "nothing is left to plan" in agent_log(evs, 6, "Planner")
    assert git(project, "status", "--porcelain") == ""

    # Every phase's Claude Code fired the user-scope hook into the loop's heartbeat file.
    for phase in ("Builder", "Criticizer", "Planner"):
        beat = json.loads((state_of(project) / "heartbeats" / f"{phase}.json").read_text())
        assert (beat["agent"], beat["run_id"]) == (phase, start["run_id"])

    ends = [(e["iteration"], e["progress"], e["breaker"], e["waited"]) for e in of(evs, "iteration_end")]
    assert ends == [(i, True, "CLOSED", False) for i in range(1, 7)]
    breaker = json.loads((project / "orchestrator" / ".circuit_breaker.json").read_text())
    assert breaker["state"] == "CLOSED" and breaker["last_progress_iteration"] == 6
    end = of(evs, "loop_end")[-1]
    assert end["exit_code"] == 0 and end["reason"].startswith("done"), end
    assert of(evs, "wait_start") == []
    assert leftovers(project) == []


def readme_steps() -> str:
    """The first ```bash block under the README's "Real use with Claude Code" heading."""
    text = (ROOT / "README.md").read_text()
    assert f"\n{README_HEADING}\n" in text, f"README.md has no '{README_HEADING}' section"
    section = text.split(f"\n{README_HEADING}\n", 1)[1].split("\n## ", 1)[0]
    found = re.search(r"^```bash\n(.*?)^```", section, re.S | re.M)
    assert found, f"no ```bash block under '{README_HEADING}' in README.md"
    return found.group(1)


def test_the_readmes_real_use_steps_run_literally(claude, fast_stub, hermetic, tmp_path):
    if not (ROOT / ".venv" / "bin" / "genesis").exists():
        pytest.skip("the README's steps use .venv/bin/genesis, which ./run-tests.sh or the demo creates")
    # What a real user already has: a git identity and a project with history.
    git(hermetic, "config", "--global", "user.name", "Night Owl")
    git(hermetic, "config", "--global", "user.email", "owl@example.invalid")
    myapp = hermetic / "src" / "myapp"
    myapp.mkdir(parents=True)
    git(myapp, "init", "-q")
    (myapp / "README.md").write_text("# myapp\n")
    git(myapp, "add", "-A")
    git(myapp, "commit", "-qm", "init")
    steps = tmp_path / "readme-steps.sh"
    steps.write_text(readme_steps())

    # Plain bash, as pasted into a terminal: no `set -e`, so whatever the loop's exit status,
    # the morning report runs.
    done = run_to_end(["bash", str(steps)], cwd=ROOT, env=user_env(fast_stub))

    out = done.stdout
    assert done.returncode == 0, out  # the last step, the report, succeeded
    # 1. The hook went into the project's .claude/settings.local.json (the user's own Claude
    # Code sessions untouched) and `hook status` says so.
    settings = myapp / ".claude" / "settings.local.json"
    assert_hook_installed(settings)
    assert f"local: installed in {settings}" in out
    assert not (hermetic / ".claude" / "settings.json").exists()
    assert "hook is not installed" not in out
    # 2-3. The loop ran the default phases on the task list: the Builder moved the task to
    # [?] in its commit, the Criticizer verified it, the Planner found nothing open, and the
    # loop ended itself (exit 0, "done") without an idle iteration.
    task = "Add a /health endpoint with a test"
    history = commits(myapp)
    subjects = [s for _, s in history]
    assert f"build: {task}" in subjects and f"verified: {task}" in subjects, subjects
    built = history[subjects.index(f"build: {task}")][0]
    assert checklist(myapp, built) == {task: "?"}
    assert checklist(myapp, "HEAD") == {task: "x"}
    assert (myapp / slug(task)).is_file()
    evs = run_events(myapp)
    assert of(evs, "loop_start")[0]["agent"] == ["claude", "-p", "--dangerously-skip-permissions"]
    assert [(e["iteration"], e["phase"]) for e in of(evs, "phase_end")] == [(1, "Builder"), (1, "Criticizer"),
                                                                              (1, "Planner")]
    assert f"Built '{task}'" in agent_log(evs, 1, "Builder")
    end = of(evs, "loop_end")[-1]
    assert end["exit_code"] == 0 and end["reason"].startswith("done"), end
    assert "breaker OPEN" not in out and "breaker HALF_OPEN" not in out
    # 4. The report printed the run's summary, as itself (not the loop's prefixed lines).
    run_id = of(evs, "loop_start")[0]["run_id"]
    lines = out.splitlines()
    heads = [i for i, line in enumerate(lines) if line.startswith(f"Genesis run {run_id} · ")]
    assert heads, out
    report = lines[heads[-1]:heads[-1] + 4]
    assert report[1].endswith("· exit 0") and report[2] == end["reason"], out
    assert leftovers(myapp) == []

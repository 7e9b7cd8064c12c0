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
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import events_of, git, state_of
from e2e.harness import GENESIS, LOOP, ROOT
from e2e.stub_api import StubAPI, slug
from e2e.test_claude_code import CLAUDE, claude  # noqa: F401  (claude is a fixture)

from genesis.procs.proctree import marked

pytestmark = pytest.mark.claude

# Only time is compressed; every other setting is the shipped default.
TIME_KNOBS = {"HEARTBEAT_CHECK_INTERVAL": "0.5", "HEARTBEAT_STALE_SECONDS": "30",
              "AGENT_MAX_RUNTIME_SECONDS": "120", "KILL_GRACE_SECONDS": "3", "ITERATION_PAUSE_SECONDS": "0"}
TASKS = ["Add a /health endpoint with a test", "Log each request", "Read the port from PORT",
         "Add a /version endpoint", "Document the endpoints in README.md", "Return errors as JSON"]
HOOK_EVENTS = ("PreToolUse", "PostToolUse", "PostToolUseFailure", "SessionStart")
README_HEADING = "## Real use with Claude Code"


@pytest.fixture
def fast_stub():
    api = StubAPI(turn_delay=0.05).start()  # these scenarios watch artefacts, not heartbeats in flight
    yield api
    api.shutdown()


def user_env(stub: StubAPI) -> dict[str, str]:
    """A user's shell: the real `claude` first on PATH, the stub as its API, time compressed."""
    env = {**os.environ, "PATH": f"{CLAUDE.parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "ANTHROPIC_BASE_URL": stub.url, "ANTHROPIC_API_KEY": "sk-ant-stub",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
           "DISABLE_AUTOUPDATER": "1", "DISABLE_ERROR_REPORTING": "1", **TIME_KNOBS}
    if os.geteuid() == 0:
        env["IS_SANDBOX"] = "1"  # Claude Code refuses to skip permissions as root otherwise
    return env


def run_to_end(argv: list[str], timeout: float = 240, **kw) -> subprocess.CompletedProcess:
    """Run with stdout and stderr combined in order; past the timeout, SIGTERM (the loop cleans
    up after itself) and fail with what was printed so far."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            text=True, start_new_session=True, **kw)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        raise AssertionError(f"{argv} did not end within {timeout:.0f}s:\n{out}") from None
    print(out)
    return subprocess.CompletedProcess(argv, proc.returncode, out, "")


def run_events(project: Path) -> list[dict]:
    """The events of the project's latest run, in order."""
    evs = events_of(project)
    run_id = [e["run_id"] for e in evs if e["event"] == "loop_start"][-1]
    return [e for e in evs if e["run_id"] == run_id]


def of(evs: list[dict], kind: str) -> list[dict]:
    return [e for e in evs if e["event"] == kind]


def agent_log(evs: list[dict], iteration: int, phase: str) -> str:
    start = [e for e in of(evs, "phase_start") if (e["iteration"], e["phase"]) == (iteration, phase)]
    assert len(start) == 1, f"{phase} started {len(start)} times in iteration {iteration}"
    return Path(start[0]["log"]).read_text()


def checklist(project: Path, rev: str) -> dict[str, str]:
    """TASKS.md at a commit: task title -> its mark (' ', '?' or 'x')."""
    text = git(project, "show", f"{rev}:TASKS.md")
    return {title: mark for mark, title in re.findall(r"^- \[([ ?x])\] (.+?)\s*$", text, re.M)}


def commits(project: Path) -> list[tuple[str, str]]:
    """(sha, subject) of every commit, oldest first."""
    log = git(project, "log", "--reverse", "--format=%H %s")
    return [tuple(line.split(" ", 1)) for line in log.splitlines()]


def leftovers(project: Path) -> list:
    return marked({"GENESIS_PROJECT_DIR": str(project.resolve())})


def assert_hook_installed(settings: Path) -> None:
    hooks = json.loads(settings.read_text())["hooks"]
    for event in HOOK_EVENTS:
        commands = [h["command"] for group in hooks.get(event, []) for h in group["hooks"]]
        assert any("genesis-heartbeat.sh" in c for c in commands), f"no heartbeat hook for {event}: {hooks}"


def plan_night(project: Path, tasks: list[str]) -> str:
    """A user's project for the night: an identity, a committed task list, the hook installed
    the user's way; returns what `genesis hook install` printed."""
    git(project, "config", "user.name", "Night Owl")
    git(project, "config", "user.email", "owl@example.invalid")
    (project / "TASKS.md").write_text("# Tasks\n" + "".join(f"- [ ] {t}\n" for t in tasks))
    git(project, "add", "TASKS.md")
    git(project, "commit", "-qm", "Plan the night")
    installed = subprocess.run(GENESIS + ["--project", str(project), "hook", "install"], capture_output=True,
                               text=True)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return installed.stdout


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
    # 1. The hook went into ~/.claude/settings.json and `hook status` says so.
    settings = hermetic / ".claude" / "settings.json"
    assert_hook_installed(settings)
    assert f"user: installed in {settings}" in out
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

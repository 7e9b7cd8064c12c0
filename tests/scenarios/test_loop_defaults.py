"""The shipped loop as users run it: default phases and triggers, the stdout rule, start-up
checks, per-run artifacts. Real bash, real git, real processes; agents are small scripts.

One night of two runs over a TASKS.md checklist (`night`, run once for the module) is checked
several ways: the triggers, the per-run logs and commits, the user's uncommitted changes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers.agent import script
from helpers.git import git, new_repo
from helpers.hermetic import cleared
from helpers.loop import GENESIS, LOOP, loop_env, run_loop
from helpers.procs import alive
from helpers.state import events_of, state_of
from helpers.waits import wait_for

from genesis.cli import cli

# Plays the three default prompts on a TASKS.md checklist, like a competent model would.
ROLE_AGENT = r"""#!/usr/bin/env bash
set -eu
echo "agent: $GENESIS_AGENT in iteration $GENESIS_ITERATION"
case "$GENESIS_AGENT" in
  Builder)
    line="$(grep -m1 -n '^- \[ \]' TASKS.md | cut -d: -f1 || true)"
    [ -n "$line" ] || { echo "nothing open"; exit 0; }
    sed -i.bak "${line}s/^- \[ \]/- [?]/" TASKS.md && rm -f TASKS.md.bak
    echo "built in $GENESIS_ITERATION" >"built-$line.txt"
    git add TASKS.md "built-$line.txt" && git commit -qm "Builder: task on line $line" ;;
  Criticizer)
    sed -i.bak 's/^- \[?\]/- [x]/' TASKS.md && rm -f TASKS.md.bak
    git commit -qam "Criticizer: verified" ;;
  Planner)
    echo "planned in $GENESIS_ITERATION" >>plans.txt ;;
esac
"""


TASKS = 7


def with_tasks(project: Path) -> Path:
    """The project with an identity and TASKS open tasks, committed."""
    git(project, "config", "user.name", "Agent")
    git(project, "config", "user.email", "agent@example.invalid")
    (project / "TASKS.md").write_text("# Tasks\n" + "".join(f"- [ ] task {n}\n" for n in range(1, TASKS + 1)))
    git(project, "add", "TASKS.md")
    git(project, "commit", "-qm", "tasks")
    return project


@pytest.fixture
def tasks_project(project, tmp_path) -> tuple[Path, Path]:
    """A project with open tasks (committed) and the role agent outside it."""
    return with_tasks(project), script(tmp_path / "agent.sh", ROLE_AGENT)


@pytest.fixture(scope="module")
def night(tmp_path_factory) -> dict:
    """Seven open tasks (committed), an edit of the user's to a tracked file and a file of theirs
    untracked. A start is refused; a first run with --allow-dirty does one iteration; a second
    run, with the shipped phases and triggers, does the six other tasks to its end."""
    root = tmp_path_factory.mktemp("defaults-night")
    (root / "home").mkdir()
    with pytest.MonkeyPatch.context() as patch:  # the suite's hermetic environment, for a whole module
        for key in [k for k in os.environ if cleared(k)]:
            patch.delenv(key)
        patch.setenv("HOME", str(root / "home"))
        patch.setenv("TMPDIR", str(root))
        patch.setenv("GENESIS_NOTIFY_DESKTOP", "false")
        env = loop_env()
    project = with_tasks(new_repo(root / "project"))
    (project / "README.md").write_text("the user's edit\n")
    (project / "scratch.txt").write_text("the user's notes\n")
    agent = str(script(root / "agent.sh", ROLE_AGENT))
    refused = run_loop(project, "--agent-cmd", agent, "--max-iterations", "1", env=env)
    after_refusal = git(project, "log", "--format=%s").splitlines()
    first = run_loop(project, "--agent-cmd", agent, "--max-iterations", "1", "--allow-dirty", env=env)
    second = run_loop(project, "--agent-cmd", agent, "--max-iterations", "7", env=env)
    assert first.returncode == second.returncode == 0, (first.stderr, second.stderr)
    runs = [e["run_id"] for e in events_of(project) if e["event"] == "loop_start"]
    listed = subprocess.run(GENESIS + ["--project", str(project), "report", "--list"], capture_output=True,
                            text=True, check=True, env=env).stdout
    return dict(project=project, refused=refused, after_refusal=after_refusal, first=first, second=second,
                runs=runs, listed=listed)


def phases_run(project: Path, run_id: str) -> list[tuple[int, str, str]]:
    """(iteration, phase, what) for every phase_end and phase_skip of the run, in order."""
    return [(e["iteration"], e["phase"], "ran" if e["event"] == "phase_end" else "skipped")
            for e in events_of(project, run_id) if e["event"] in ("phase_end", "phase_skip")]


def files_of(project: Path, sha: str) -> list[str]:
    return sorted(git(project, "show", "--format=", "--name-only", sha).split())


def test_default_triggers_are_checked_just_before_each_phase(night):
    project, done = night["project"], night["second"]
    run_id = night["runs"][-1]
    # The Criticizer reviews in the same iteration what the Builder marked [?]; the Planner
    # runs every 5th iteration and once nothing is open (after the last task), else it is
    # skipped. Its pass in iteration 6 adds nothing: the work is done, the loop ends itself.
    expected = []
    for it in range(1, 7):
        expected += [(it, "Builder", "ran"), (it, "Criticizer", "ran"),
                     (it, "Planner", "ran" if it in (5, 6) else "skipped")]
    assert phases_run(project, run_id) == expected
    end = events_of(project, run_id, kind="loop_end")[-1]
    assert end["exit_code"] == 0 and end["reason"].startswith("done"), end
    assert "iteration 6: done: every task in TASKS.md is done" in done.stderr
    assert (project / "TASKS.md").read_text() == "# Tasks\n" + "".join(f"- [x] task {n}\n"
                                                                       for n in range(1, TASKS + 1))
    subjects = git(project, "log", "--format=%s", "--reverse").splitlines()
    assert subjects[3:7] == ["Builder: task on line 2", "Criticizer: verified",
                             "Builder: task on line 3", "Criticizer: verified"]
    planned = [s for s in subjects if s.startswith("genesis: Planner")]
    assert planned == [f"genesis: Planner, iteration {n} (finished) [run {run_id}]" for n in (5, 6)]
    assert "Planner: skipped (every 5 iterations; 5 task(s) open in TASKS.md)" in done.stderr


def test_logs_are_per_run_and_commits_name_the_run_and_how_the_phase_ended(night):
    project, runs = night["project"], night["runs"]
    assert len(set(runs)) == 2
    for run_id in runs:
        run_dir = project / "orchestrator" / "logs" / run_id
        builder = (run_dir / "iter-0001-Builder.log").read_text()
        assert builder.count("agent: Builder in iteration 1") == 1  # its own file, never appended to
        assert "--- iteration 1 ---" in (run_dir / "console.log").read_text()
    subjects = git(project, "log", "--format=%s").splitlines()
    assert f"genesis: Planner, iteration 5 (finished) [run {runs[1]}]" in subjects
    assert not [s for s in subjects if s.endswith(f"[run {runs[0]}]")]  # the first run's Planner was skipped
    assert [line.split()[0] for line in night["listed"].splitlines()] == runs


def test_every_step_prints_on_stdout_only_what_the_loop_reads(tasks_project):
    """The rule: a step's stdout is what bash reads; status lines go to stderr."""
    project, agent = tasks_project
    base = GENESIS + ["--project", str(project), "--set", f"GENESIS_AGENT_CMD={agent}"]
    env = loop_env()
    run_id = "20261121T000000Z-1"

    def step(*args: str, code: int = 0, fds: tuple[int, ...] = ()) -> subprocess.CompletedProcess:
        done = subprocess.run(base + list(args), env=env, capture_output=True, text=True, timeout=60,
                              pass_fds=fds)
        assert done.returncode == code, (args, done.stdout, done.stderr)
        return done

    settings = step("loop-settings", "--run-id", run_id).stdout
    assert settings.splitlines() == [
        "0", "0", str(project / "hooks" / "loop_multi_agent.txt"),
        str(project / "orchestrator" / "logs" / run_id / "console.log"), "Builder Criticizer Planner",
        str(state_of(project) / "loop.lock")]
    sleeper = subprocess.Popen(["sleep", "120"])  # stands for the loop: the lock records a live pid
    lock_fd = os.open(state_of(project) / "loop.lock", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        pre = step("preflight", "--loop-pid", str(sleeper.pid), "--lock-fd", str(lock_fd), "--run-id", run_id,
                   fds=(lock_fd,))
        assert pre.stdout == "" and "[genesis " in pre.stderr
        assert step("iteration", "start", "--iteration", "1", "--run-id", run_id).stdout == ""
        for phase in ("Builder", "Criticizer"):
            done = step("run-phase", "--iteration", "1", "--phase", phase, "--run-id", run_id)
            assert done.stdout == "" and f"{phase}: finished" in done.stderr
        skipped = step("run-phase", "--iteration", "1", "--phase", "Planner", "--run-id", run_id, code=11)
        assert skipped.stdout == "" and "Planner: skipped" in skipped.stderr
        assert step("iteration", "finish", "--iteration", "1", "--run-id", run_id).stdout == ""
        fin = step("finish", "--run-id", run_id, "--reason", "test", "--code", "0")
        assert fin.stdout == "" and f"Genesis run {run_id}" in fin.stderr
    finally:
        sleeper.kill()
        sleeper.wait()
        os.close(lock_fd)
    console = (project / "orchestrator" / "logs" / run_id / "console.log").read_text()
    assert "Builder: finished" in console and "Planner: skipped" in console


def test_a_killed_agents_work_is_committed_as_partial_and_the_report_gives_the_reason(project, tmp_path):
    git(project, "config", "user.name", "Agent")
    git(project, "config", "user.email", "agent@example.invalid")
    agent = script(tmp_path / "agent.sh", '#!/usr/bin/env bash\n[ "$GENESIS_AGENT" = Builder ] || '
                   '{ echo "API Error: 401 bad key"; exit 1; }\necho half >half-done.txt\nexec sleep 300\n')
    done = run_loop(project, "--agent-cmd", str(agent), "--max-iterations", "1",
                    env=loop_env(HEARTBEAT_STALE="2s", HEARTBEAT_COUNT_OUTPUT="false"))
    assert done.returncode == 0, done.stderr
    run_id = events_of(project)[0]["run_id"]
    assert git(project, "log", "-1", "--format=%s", "--", "half-done.txt").strip() == \
        f"genesis: Builder, iteration 1 (ended: stuck, killed; partial work) [run {run_id}]"
    report = CliRunner().invoke(cli, ["--project", str(project), "report"], catch_exceptions=False)
    assert report.exit_code == 0
    # The stuck Builder was retried once (the default), stuck again, and failed for the iteration.
    assert "abnormal phases (3)" in report.stdout
    assert "iteration 1 Builder (retry 1): stuck after" in report.stdout  # retried once, stuck again
    assert "retry of a stuck phase" in report.stdout  # the retry's wait
    lines = [line.strip() for line in report.stdout.splitlines()]
    builder = lines.index(next(line for line in lines if line.startswith("iteration 1 Builder: stuck after")))
    assert lines[builder + 1].startswith("no heartbeat for")
    # Each abnormal phase is followed by the end of its transcript.
    assert lines[builder + 2].startswith("| === genesis:") and "starting:" in lines[builder + 2]
    planner = lines.index(next(line for line in lines if line.startswith("iteration 1 Planner: exited")))
    assert lines[planner + 1] == "the agent exited with status 1; its last line: API Error: 401 bad key"
    assert "| API Error: 401 bad key" in lines[planner + 2:planner + 5]
    assert "exit 0" in report.stdout and "reached GENESIS_MAX_ITERATIONS=1" in report.stdout


def test_an_agent_command_that_does_not_exist_is_refused_before_anything_runs(project):
    done = run_loop(project, "--agent-cmd", "no-such-agent-cli -p")
    assert done.returncode == 2
    assert "the agent command 'no-such-agent-cli' is not found on PATH" in done.stderr
    assert "GENESIS_AGENT_CMD" in done.stderr
    assert not (state_of(project) / "ledger.sqlite3").exists()
    script = project.parent / "agent.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    done = run_loop(project, "--agent-cmd", str(script))
    assert done.returncode == 2 and f"is not executable; run: chmod +x {script}" in done.stderr


def test_uncommitted_changes_of_the_user_are_never_committed_as_the_agents(night):
    project, refused, first = night["project"], night["refused"], night["first"]
    assert refused.returncode == 2
    assert "uncommitted changes of yours: README.md" in refused.stderr
    assert "Commit or stash them first, or start with --allow-dirty" in refused.stderr
    assert night["after_refusal"] == ["tasks", "init"]
    subjects = git(project, "log", "--format=%s", "--reverse").splitlines()
    shas = git(project, "log", "--format=%H", "--reverse").split()
    assert subjects[2] == (f"Uncommitted changes present before Genesis run {night['runs'][0]} "
                           f"(committed on the user's behalf by --allow-dirty)")
    assert files_of(project, shas[2]) == ["README.md"]
    # The agents' work comes after, in commits of its own: the Builder's, and Genesis's of the Planner's.
    assert subjects[3] == "Builder: task on line 2" and files_of(project, shas[3]) == ["TASKS.md", "built-2.txt"]
    planned = [sha for sha, subject in zip(shas, subjects) if subject.startswith("genesis: Planner")]
    assert planned and all(files_of(project, sha) == ["plans.txt"] for sha in planned)
    # The user's untracked file is left out of every auto-commit, and said so at each start.
    assert "scratch.txt" not in git(project, "log", "--format=", "--name-only")
    for done in (first, night["second"]):
        assert "untracked file(s) of yours are left out of every auto-commit: scratch.txt" in done.stderr
    assert git(project, "status", "--porcelain").strip() == "?? scratch.txt"


@pytest.mark.parametrize("args", [
    ["stop"], ["report"], ["report", "--list"], ["config", "show"], ["hook", "install", "--scope", "project"],
    ["hook", "install", "--scope", "local"], ["hook", "uninstall", "--scope", "project"], ["hook", "status"],
    ["reap", "--dry-run"], ["breaker", "show"], ["breaker", "reset"], ["heartbeat", "show", "--phase", "Builder"],
    ["preflight", "--loop-pid", "1", "--lock-fd", "9", "--run-id", "r"], ["loop-settings", "--run-id", "r"],
])
def test_a_project_that_does_not_exist_is_refused_by_every_command_and_nothing_is_created(tmp_path, args):
    missing = tmp_path / "srv" / "myap"
    done = CliRunner().invoke(cli, ["--project", str(missing), *args])  # in this process: no step runs
    assert done.exit_code == 2, done.output
    assert "does not exist" in done.stderr
    assert not (tmp_path / "srv").exists()


def test_reap_dry_run_during_a_run_tells_the_live_agent_tree_from_leftovers(project, tmp_path, procs):
    from genesis.procs.reaper import markers_for

    agent = script(tmp_path / "agent.sh", "#!/bin/sh\necho $$ >\"$AGENT_PID_FILE\"\nexec sleep 300\n")
    pid_file = tmp_path / "agent.pid"
    env = loop_env(AGENT_PID_FILE=str(pid_file), HEARTBEAT_STALE="120s",
                   GENESIS_SANDBOX="off")  # the agent tells its own pid: in a box, its namespace's ($$ is 2)
    log = tmp_path / "loop.log"
    with open(log, "wb") as out:
        loop = subprocess.Popen(["bash", str(LOOP), "--project", str(project), "--agent-cmd", str(agent)], env=env,
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        # A first start (the hook installed, the trust recorded) can take long on a loaded machine.
        try:
            wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), timeout=90, what="the agent")
        except AssertionError:
            raise AssertionError(f"no agent started; the loop said:\n{log.read_text(errors='replace')[-3000:]}")
        agent_pid = int(pid_file.read_text())
        # A leftover of an earlier run over this project: the project's marker, another run id.
        leftover = procs(["sleep", "300"], env={**markers_for(project), "GENESIS_RUN_ID": "an-earlier-run"})
        dry = subprocess.run(GENESIS + ["--project", str(project), "reap", "--dry-run"], capture_output=True,
                             text=True, timeout=60)
        assert dry.returncode == 0, dry.stderr
        assert f"running: pid {agent_pid}: sleep 300 (the live loop's agent tree, run " in dry.stdout
        assert f"would kill pid {leftover.pid}: sleep 300 (left behind by an agent of this loop)" in dry.stdout
        assert f"would kill pid {agent_pid}" not in dry.stdout
        assert alive(agent_pid) and alive(leftover.pid)
    finally:
        loop.terminate()
        assert loop.wait(timeout=60) == 143
    wait_for(lambda: not alive(agent_pid), what="the agent to be gone")

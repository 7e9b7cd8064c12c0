"""The loop script's options: a missing or malformed value is a usage error (exit 2, said as
`genesis: error: ...`), refused before anything runs; `--option=value` reads as `--option value`."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from helpers.agent import script
from helpers.git import git
from helpers.loop import LOOP, loop_env
from helpers.state import events_of

# A genesis that only notes it was called: a usage error must stop the script before it.
CALLED = """#!/usr/bin/env bash
echo "$*" >>"{calls}"
exit 1
"""


def loop(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(LOOP), *args], env=env or loop_env(), capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL, cwd=cwd)


@pytest.fixture
def refused(tmp_path):
    """Runs the loop with ARGS; returns its one error line after checking that it exited 2
    and that no genesis step ran."""
    calls = tmp_path / "calls"
    fake = script(tmp_path / "genesis", CALLED.format(calls=calls))

    def run(*args: str) -> str:
        done = loop(*args, env=loop_env(GENESIS_BIN=str(fake)), cwd=tmp_path)
        assert done.returncode == 2, (done.returncode, done.stderr)
        assert not calls.exists(), calls.read_text()
        assert done.stdout == "" and done.stderr.count("\n") == 1, done.stderr
        assert done.stderr.startswith("genesis: error: ") and "line " not in done.stderr, done.stderr
        return done.stderr.strip()
    return run


@pytest.mark.fault(70)
@pytest.mark.parametrize("args, message", [
    (["--agent-cmd", ""], "--agent-cmd needs the agent's command line, e.g. --agent-cmd 'claude -p' (see --help)"),
    (["--agent-cmd", "  "], "--agent-cmd needs the agent's command line, e.g. --agent-cmd 'claude -p' (see --help)"),
    (["--agent-cmd"], "--agent-cmd needs the agent's command line, e.g. --agent-cmd 'claude -p' (see --help)"),
    (["--max-iterations"], "--max-iterations needs a whole number, e.g. --max-iterations 40 (0: no limit) "
                           "(see --help)"),
    (["--max-iterations", ""], "--max-iterations needs a whole number, e.g. --max-iterations 40 (0: no limit) "
                               "(see --help)"),
    (["--max-iterations", "ten"], "--max-iterations needs a whole number, e.g. --max-iterations 40 "
                                  "(0: no limit), not 'ten' (see --help)"),
    (["--max-iterations=-1"], "--max-iterations needs a whole number, e.g. --max-iterations 40 (0: no limit), "
                              "not '-1' (see --help)"),
    (["--project"], "--project needs a directory, the git project to work on (see --help)"),
    (["--project", ""], "--project needs a directory, the git project to work on (see --help)"),
    (["--project", "--max-iterations", "3"], "--project needs a directory, the git project to work on, not the "
                                             "option '--max-iterations' (see --help)"),
    (["--set"], "--set needs KEY=VALUE, e.g. --set AUTO_PUSH=true (see --help)"),
    (["--set", "AUTO_PUSH"], "--set needs KEY=VALUE, e.g. --set AUTO_PUSH=true, not 'AUTO_PUSH' (see --help)"),
    (["--set", "=true"], "--set needs KEY=VALUE, e.g. --set AUTO_PUSH=true, not '=true' (see --help)"),
    (["--demo", "--set="], "--set needs KEY=VALUE, e.g. --set AUTO_PUSH=true (see --help)"),
    (["--bogus"], "unknown argument '--bogus' (see --help)"),
    (["--allow-dirty=yes"], "unknown argument '--allow-dirty=yes' (see --help)"),
])
def test_an_option_without_its_value_is_a_usage_error(refused, args, message):
    """`--agent-cmd ''` or `--max-iterations` alone said "line 253" and exited 1."""
    assert refused(*args) == f"genesis: error: {message}"


def test_a_project_given_without_project_is_named_with_the_way_to_give_it(refused, tmp_path):
    folder = tmp_path / "my app"
    folder.mkdir()
    assert refused(str(folder)) == (f"genesis: error: unknown argument '{folder}': to run the loop on that project, "
                                    f"use --project {str(folder).replace(' ', chr(92) + ' ')}")


@pytest.mark.whole
def test_option_equals_value_runs_the_loop(project, tmp_path):
    git(project, "config", "user.name", "Agent")
    git(project, "config", "user.email", "agent@example.invalid")
    agent = script(tmp_path / "agent.sh", "#!/usr/bin/env bash\necho built >>built.txt\n")
    done = loop(f"--project={project}", f"--agent-cmd=bash {agent}", "--max-iterations=1",
                "--set=GENESIS_PHASES=Builder")
    assert done.returncode == 0, done.stderr
    assert [e["reason"] for e in events_of(project) if e["event"] == "loop_end"] == \
        ["reached GENESIS_MAX_ITERATIONS=1"]
    assert (project / "built.txt").read_text() == "built\n"

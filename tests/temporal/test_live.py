"""`genesis fleet status --engine temporal` when there is nothing to show: each case says why,
with its own exit code, on the screen and in the JSON document. (A fleet read live, running
and ended, from the home's checkout and from a third clone: tests/temporal/test_fleet.py.)"""

from __future__ import annotations

import json
import subprocess

import pytest

pytest.importorskip("temporalio", reason="temporalio is not installed: pip install -e '.[test]'")

from helpers.git import git  # noqa: E402
from helpers.temporal import GENESIS  # noqa: E402

from genesis import exitcodes  # noqa: E402
from genesis.fleet.status import fleet_dir_of  # noqa: E402
from genesis.store.layout import private_dir  # noqa: E402
from genesis.temporal.binary import free_port  # noqa: E402
from genesis.temporal.mirror import Mirror  # noqa: E402
from genesis.temporal.records import fingerprint, fleet_workflow_id  # noqa: E402

pytestmark = [pytest.mark.temporal]

ROW = {"id": "t-1", "text": "do it", "state": "verified", "strategy": 0, "attempts": 1, "restarts": 0,
       "escalations": 0, "branch": "genesis/task/t-1", "reason": "", "not_before": 0.0, "updated": 10.0,
       "created": 1.0}


def argv(project, address: str, *more: str) -> list[str]:
    return [*GENESIS, "--project", str(project), "fleet", "status", "--engine", "temporal", "--temporal-address",
            address, *more]


def status(project, address: str, *more: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv(project, address, *more), capture_output=True, text=True, timeout=90)


def reading(project, address: str, *more: str) -> subprocess.Popen:
    """The status, started: read alongside others."""
    return subprocess.Popen(argv(project, address, *more), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def ended(proc: subprocess.Popen) -> subprocess.CompletedProcess:
    out, err = proc.communicate(timeout=90)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.heavy   # the dev server read by eight processes at once: beside the heavy stage's waits
def test_a_clone_whose_fleet_never_ran_on_temporal_is_told_so_and_every_read_ends_cleanly(dev_server, project,
                                                                                           tmp_path):
    """Said on the screen and in the JSON document, each with its code. Read eight times at once:
    the SDK's core threads must not outlive the command, whose interpreter's finalization with
    them alive aborts it (exit 134) after the right words, in some runs and not others."""
    git(tmp_path, "init", "-q", "--bare", str(tmp_path / "origin.git"))
    git(project, "remote", "add", "origin", str(tmp_path / "origin.git"))
    branch = git(project, "symbolic-ref", "--short", "HEAD").strip()
    fleet = fleet_workflow_id(fingerprint(str(tmp_path / "origin.git"), branch))
    reads = [reading(project, dev_server.address, *(("--json",) if n % 2 else ())) for n in range(8)]
    runs = [ended(r) for r in reads]
    assert [(r.returncode, "Fatal Python error" in r.stderr) for r in runs] == \
        [(exitcodes.NOT_RUNNING, False)] * 8, [r.stderr[-600:] for r in runs if r.returncode != exitcodes.NOT_RUNNING]
    screen, doc = runs[:2]
    assert f"no fleet {fleet} on Temporal at {dev_server.address}" in screen.stderr, screen.stderr
    got = json.loads(doc.stdout)
    assert (got["state"], got["exit_code"], got["tasks"]) == ("not_running", exitcodes.NOT_RUNNING, []), got
    assert fleet in got["error"]


def test_a_temporal_that_does_not_answer_is_an_error_or_at_home_the_copy_saying_so(project, tmp_path):
    git(project, "remote", "add", "origin", str(tmp_path / "origin.git"))
    address = f"127.0.0.1:{free_port()}"           # nothing listens there
    screen = status(project, address)
    assert screen.returncode == exitcodes.ERROR, screen.stderr
    assert f"Temporal at {address}" in screen.stderr and "Traceback" not in screen.stderr, screen.stderr
    # At the home, the copy its last read of Temporal left in the project's fleet ledger.
    private_dir(fleet_dir_of(project))
    mirror = Mirror(fleet_dir_of(project) / "ledger.sqlite3", "fleet-1")
    mirror.start(2, "genesis-fleet-x", address, 100.0)
    mirror.sync({"tasks": {"t-1": {"state": "merged", "sha": "abc"}}}, {"t-1": {"row": ROW, "attempts": []}}, {})
    mirror.end(0, "every task ended", 200.0)
    doc = status(project, address, "--json")
    assert doc.returncode == exitcodes.OK, doc.stderr
    got = json.loads(doc.stdout)
    assert (got["state"], got["source"], [t["state"] for t in got["tasks"]]) == ("ended", None, ["merged"]), got
    assert f"Temporal at {address}" in got["error"] and "this checkout's copy" in got["error"], got


def test_a_clone_without_the_remote_is_told_which_remote_names_the_fleet(project):
    screen = status(project, "127.0.0.1:7233")
    assert screen.returncode == exitcodes.USAGE
    assert "no git remote named 'origin'" in screen.stderr and "GENESIS_TEMPORAL_REMOTE" in screen.stderr


def test_a_fleet_file_is_refused_with_the_temporal_engine(project, tmp_path):
    fleet_file = tmp_path / "fleet.toml"
    fleet_file.write_text(f'[[project]]\npath = "{project}"\nparallel = 1\n')
    done = subprocess.run([*GENESIS, "fleet", "status", "--fleet", str(fleet_file), "--engine", "temporal"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == exitcodes.USAGE
    assert "--engine temporal" in done.stderr and "--project" in done.stderr


def test_a_folder_that_is_no_git_work_tree_gets_the_document_that_says_so(tmp_path):
    done = status(tmp_path, "127.0.0.1:7233", "--json")
    assert done.returncode == exitcodes.USAGE, done.stderr
    got = json.loads(done.stdout)
    assert (got["state"], got["exit_code"]) == ("not_running", exitcodes.USAGE) and "git work tree" in got["error"]

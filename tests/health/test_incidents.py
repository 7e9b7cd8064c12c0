"""Forensics for an abnormal end: a real process tree, its ports and a real repository's
status, recorded as JSON and text, listed and shown by `genesis incidents`."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import paths
from helpers.procs import free_port, listening
from helpers.state import state_of
from helpers.waits import wait_for

from genesis.cli import cli
from genesis.health import incidents
from genesis.health.capture import capture
from genesis.health.incident_text import render
from genesis.health.incidents import UnknownIncident, list_incidents, read_incident, write
from genesis.procs.proctree import identify
from genesis.store.layout import UnsafeDir

SPAWN = str(paths.SPAWN)
NOW = 1795253712.0  # 2026-11-21T09:35:12Z
CALL = {"t": NOW - 300, "event": "PreToolUse", "tool": "Bash", "id": "toolu_1", "hash": "ab12", "cmd": "pytest -x"}


def record(project: Path, root=None, extra=(), **kw):
    given = dict(phase="Builder", iteration=3, run_id="run-1", reason="stuck: inside Bash for 300s", kind="stuck",
                 heartbeat={"agent": "Builder", "epoch": NOW - 300, "tool": "Bash", "event": "PreToolUse"},
                 tool_in_flight=CALL, tool_calls=[CALL], transcript=["tool Bash: $ pytest -x"],
                 project=project, now=NOW)
    given.update(kw)
    return capture(root, list(extra), **given)


def children_of(pid: int) -> list:
    import psutil

    return psutil.Process(pid).children(recursive=True)


def test_the_incident_names_the_tree_its_listener_wchan_and_the_git_status(project, procs, tmp_path):
    port = free_port()
    root = procs(["bash", "-c", f'"$PY" "$SPAWN" sleep sleeper-tag & "$PY" "$SPAWN" listen {port} listener-tag & wait'],
                 env={"PY": sys.executable, "SPAWN": SPAWN})
    wait_for(lambda: listening(port), what="the listener")
    wait_for(lambda: len(children_of(root.pid)) == 2, what="both children")
    # Asleep, not still starting up (a loaded machine may take a moment to get there).
    wait_for(lambda: all(k.status() == "sleeping" for k in children_of(root.pid)), what="both children asleep")
    outsider = procs([sys.executable, SPAWN, "sleep", "outsider-tag"], start_new_session=True)
    (project / "README.md").write_text("changed\n")
    (project / "new.txt").write_text("new\n")

    inc = record(project, identify(root.pid), [identify(outsider.pid)])

    by_tag = {tag: p for p in inc.processes for tag in ("sleeper-tag", "listener-tag", "outsider-tag")
              if tag in p.command}
    assert set(by_tag) == {"sleeper-tag", "listener-tag", "outsider-tag"}, inc.processes
    assert inc.processes[0].pid == root.pid and inc.processes[0].origin == "root"
    assert by_tag["sleeper-tag"].ppid == root.pid and by_tag["sleeper-tag"].origin == "tree"
    assert by_tag["outsider-tag"].origin == "extra"
    sleeper = by_tag["sleeper-tag"]
    assert sleeper.status == "S" and sleeper.rss > 0 and sleeper.cpu >= 0
    wchan = Path(f"/proc/{sleeper.pid}/wchan")
    if sys.platform.startswith("linux") and wchan.exists() and wchan.read_text().strip() not in ("", "0"):
        assert sleeper.wchan, "a sleeping process's wchan was readable but not recorded"
    assert [(p.pid, p.port, p.proto) for p in inc.ports] == [(by_tag["listener-tag"].pid, port, "tcp")]
    assert inc.git_status[0].startswith("## "), inc.git_status
    assert " M README.md" in inc.git_status and "?? new.txt" in inc.git_status
    assert inc.git_error == ""

    text = render(inc, inc.base_id)
    assert "tool in flight: Bash since 2026-11-21T09:30:12Z (300s): pytest -x" in text
    assert f"tcp 127.0.0.1:{port}  pid {by_tag['listener-tag'].pid}" in text
    assert "sleeper-tag" in text and "outsider-tag (found by marker)" in text and " M README.md" in text
    json.dumps(inc.to_json(), allow_nan=False)  # JSON-able as it is


def test_write_list_show_round_trip_through_the_cli(project):
    directory = state_of(project) / "incidents"
    first = write(record(project, reason="stuck: inside Bash for 300s"), directory)
    second = write(record(project, kind="wedged", reason="doom_loop: the last 12 calls cycle"), directory)
    later = write(record(project, phase="Criticizer", iteration=4, kind="overtime", reason="over time",
                         now=NOW + 60), directory)
    assert first.name == "20261121T093512Z-Builder-i3.json"
    assert second.name == "20261121T093512Z-Builder-i3-2.json"  # same second: not overwritten
    assert stat.S_IMODE(os.lstat(directory).st_mode) == 0o700
    saved = json.loads(first.read_text())
    assert saved["id"] == "20261121T093512Z-Builder-i3" and saved["tool_in_flight"]["cmd"] == "pytest -x"

    rows = list_incidents(directory)
    assert [(r["id"], r["kind"]) for r in rows] == [("20261121T093512Z-Builder-i3", "stuck"),
                                                    ("20261121T093512Z-Builder-i3-2", "wedged"),
                                                    (later.stem, "overtime")]

    runner = CliRunner()
    listed = runner.invoke(cli, ["--project", str(project), "incidents"], catch_exceptions=False)
    assert listed.exit_code == 0, listed.output
    lines = listed.output.splitlines()
    assert len(lines) == 3 and lines[1].startswith("20261121T093512Z-Builder-i3-2  2026-11-21 09:35:12Z  wedged")
    assert "doom_loop" in lines[1] and "Criticizer iteration 4" in lines[2]

    shown = runner.invoke(cli, ["--project", str(project), "incidents", "show", second.stem], catch_exceptions=False)
    assert shown.exit_code == 0, shown.output
    assert shown.output == (directory / f"{second.stem}.txt").read_text()
    assert shown.output.startswith(f"Genesis incident {second.stem}\n")
    assert "ended: wedged: doom_loop" in shown.output and "== git status ==" in shown.output

    for bad in ("20261121T093512Z-Builder-i9", "../incidents/20261121T093512Z-Builder-i3", "a/b", ".."):
        missing = runner.invoke(cli, ["--project", str(project), "incidents", "show", bad], catch_exceptions=False)
        assert missing.exit_code == 1, (bad, missing.output)
        assert "incident" in missing.output
        with pytest.raises(UnknownIncident):
            read_incident(directory, bad)


def test_no_incidents_yet(project):
    assert list_incidents(state_of(project) / "incidents") == []
    out = CliRunner().invoke(cli, ["--project", str(project), "incidents"], catch_exceptions=False)
    assert (out.exit_code, out.output) == (0, "no incidents recorded\n")


def test_lists_are_capped_and_what_was_given_is_made_json_safe(project, procs):
    for n in range(230):
        (project / f"untracked-{n:03}.txt").write_text("x")
    root = procs(["bash", "-c", "for i in $(seq 210); do sleep 600 & done; wait"])
    wait_for(lambda: len(children_of(root.pid)) >= 210, what="210 sleepers")
    calls = [{**CALL, "id": f"toolu_{n}", "event": "PostToolUse", "ok": n % 2 == 0, "ms": 12.0} for n in range(300)]
    inc = record(project, identify(root.pid), tool_calls=calls, transcript=[f"line {n}" for n in range(100)],
                 heartbeat={"epoch": float("nan"), "deep": {"a": {"b": {"c": {"d": 1}}}}, "long": "y" * 10_000})

    assert len(inc.processes) == 200 and any("11 more processes" in n for n in inc.notes), inc.notes
    assert [c["id"] for c in inc.tool_calls] == [f"toolu_{n}" for n in range(280, 300)]
    assert inc.transcript == tuple(f"line {n}" for n in range(60, 100))
    assert len(inc.git_status) == 200 and any("31 more git status lines" in n for n in inc.notes), inc.notes
    assert inc.heartbeat["epoch"] is None and len(inc.heartbeat["long"]) <= 500
    json.dumps(inc.to_json(), allow_nan=False)


def test_only_the_newest_incidents_are_kept(project):
    directory = state_of(project) / "incidents"
    directory.mkdir(mode=0o700, parents=True)
    # 200 older incidents already there (as files: writing each would only slow the test)
    for n in range(200):
        stem = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(NOW - 10_000 + n)) + "-Builder-i1"
        (directory / f"{stem}.json").write_text(json.dumps({"at": NOW - 10_000 + n, "kind": "stuck"}))
        (directory / f"{stem}.txt").write_text("old\n")
    oldest = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(NOW - 10_000)) + "-Builder-i1"
    newest = write(record(project, root=None), directory)
    names = os.listdir(directory)
    assert len([n for n in names if n.endswith(".json")]) == 200 == incidents.MAX_INCIDENTS
    assert f"{oldest}.json" not in names and f"{oldest}.txt" not in names
    assert newest.name in names and list_incidents(directory)[-1]["id"] == newest.stem

    for n in range(3):
        write(record(project, root=None, now=NOW + n), directory, keep=2)
    assert [r["id"] for r in list_incidents(directory)] == [
        "20261121T093513Z-Builder-i3", "20261121T093514Z-Builder-i3"]


def test_a_symlink_planted_at_the_incidents_dir_is_refused(project, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    state_of(project).mkdir(mode=0o700, parents=True, exist_ok=True)
    (state_of(project) / "incidents").symlink_to(elsewhere)
    with pytest.raises(UnsafeDir):
        write(record(project), state_of(project) / "incidents")
    with pytest.raises(UnsafeDir):
        list_incidents(state_of(project) / "incidents")
    assert os.listdir(elsewhere) == []
    out = CliRunner().invoke(cli, ["--project", str(project), "incidents"], catch_exceptions=False)
    assert out.exit_code == 2 and "symlink" in out.output


def test_what_cannot_be_read_is_said_not_raised(tmp_path):
    gone = subprocess.Popen(["true"])
    ident = identify(gone.pid)
    gone.wait()
    inc = record(tmp_path, root=ident)  # not a git repository, the agent already gone
    assert inc.processes == () and inc.ports == () and inc.git_status == ()
    assert inc.git_error and (ident is None or any("already gone" in n for n in inc.notes))
    text = render(inc, inc.base_id)
    assert "(git status failed:" in text and "(none alive)" in text


@pytest.mark.fault(86)
def test_the_incident_names_the_window_that_fired_and_the_attempts_own_log(tmp_path):
    log = "/srv/shop/orchestrator/logs/run-1/iter-0003-Builder.attempt-2.log"
    inc = record(tmp_path, window="tool_silent", log=log, transcript=["tool Bash: $ pytest -x", "collected 12 items"])
    saved = json.loads(write(inc, tmp_path / "incidents").read_text())
    assert (saved["window"], saved["log"]) == ("tool_silent", log)
    assert saved["transcript"] == ["tool Bash: $ pytest -x", "collected 12 items"]
    text = render(inc, inc.base_id)
    assert "\nwindow that fired: the tool-silent window\n" in text
    assert f"\n== transcript tail (2 lines of {log}) ==\ntool Bash: $ pytest -x\ncollected 12 items\n" in text
    assert "\nwindow that fired: none\n" in render(record(tmp_path, kind="wedged"), "x")  # a doom loop is no window

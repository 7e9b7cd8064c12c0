"""`genesis alert test`, run as a user runs it: one test alert through every configured channel
now, each outcome said without a URL; exit 0 when every channel took it, 30 when one failed,
2 when none is set or a channel variable is misspelt."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
from pathlib import Path

import pytest
from helpers.git import git
from helpers.loop import GENESIS
from helpers.receiver import Receiver

from genesis import exitcodes
from genesis.alerts.tickets import Ticket


def alert_test(project: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(GENESIS + ["--project", str(project), "alert", "test", *args],
                          env={**os.environ, "GENESIS_NOTIFY_RETRIES": "0", "GENESIS_NOTIFY_TIMEOUT_SECONDS": "5",
                               **env}, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # nothing listens once it is closed


def executable(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_every_channel_gets_the_test_alert_now_whatever_its_minimum(project, tmp_path):
    out = tmp_path / "ticket.json"
    cmd = executable(tmp_path / "page-me", f"cat > {out}\n")
    with Receiver() as hook, Receiver() as push:
        done = alert_test(project, GENESIS_NOTIFY_WEBHOOK=hook.url + "/T1/B2/s3cr3tpath",
                          GENESIS_NOTIFY_NTFY=push.url + "/night-topic", GENESIS_NOTIFY_NTFY_MIN_SEVERITY="critical",
                          GENESIS_NOTIFY_CMD=str(cmd))
        assert done.returncode == 0, done.stderr
        assert (len(hook.requests), len(push.requests)) == (1, 1)
    assert done.stdout.splitlines() == [f"test alert (high) for {project}:", "  webhook: delivered (gets all)",
                                        "  ntfy: delivered (gets critical only)", "  command: delivered (gets all)"]
    sent = Ticket.from_json(hook.requests[0].json["genesis"])
    assert (sent.kind, sent.severity, sent.project, sent.final) == ("alert_test", "high", str(project), False)
    assert "test" in sent.cause
    assert Ticket.from_json(json.loads(out.read_text())).kind == "alert_test"
    assert push.requests[0].path == "/night-topic"
    # Nothing is recorded: the ledger is the nights' record.
    assert not list(tmp_path.rglob("ledger.sqlite3"))


def test_a_failing_channel_is_named_with_why_and_exits_30(project):
    port = closed_port()
    with Receiver(status=500) as hook, Receiver() as push:
        done = alert_test(project, "--severity", "low", GENESIS_NOTIFY_WEBHOOK=hook.url + "/T1/B2/s3cr3tpath",
                          GENESIS_NOTIFY_NTFY=push.url)
        closed = alert_test(project, GENESIS_NOTIFY_NTFY=f"http://127.0.0.1:{port}/topic-s3cr3t")
    assert done.returncode == exitcodes.ALERT_FAILED == 30
    assert done.stdout.splitlines()[1:] == ["  webhook: failed: HTTP 500", "  ntfy: delivered (gets all)"]
    assert "1 of 2 alert channel(s) did not take the test alert" in done.stderr
    assert len(push.requests) == 1 and push.requests[0].headers["Priority"] == "low"
    assert closed.returncode == 30
    assert closed.stdout.splitlines()[1].startswith("  ntfy: failed: could not connect")
    for said in (done.stdout + done.stderr, closed.stdout + closed.stderr):
        assert "s3cr3t" not in said and "127.0.0.1" not in said  # a URL is a secret


def test_with_no_channel_set_it_says_how_to_set_one_and_exits_2(project):
    done = alert_test(project, GENESIS_NOTIFY_DESKTOP="auto", PATH=os.environ["PATH"], DISPLAY="")
    assert done.returncode == exitcodes.USAGE
    assert "no alert channel is set" in done.stderr and "GENESIS_NOTIFY_NTFY=https://ntfy.sh/" in done.stderr
    assert done.stdout == ""


@pytest.mark.fault(89)
def test_a_misspelt_channel_is_refused_with_the_name_it_meant(project):
    with Receiver() as hook:
        done = alert_test(project, GENESIS_NOTIFY_WEBHOK=hook.url)
    assert done.returncode == exitcodes.USAGE
    assert "GENESIS_NOTIFY_WEBHOK is set in the environment but is not an alert setting; did you mean " \
           "GENESIS_NOTIFY_WEBHOOK?" in done.stderr
    assert hook.requests == []


def test_a_command_genesis_conf_names_runs_only_once_approved(project, tmp_path):
    ran = tmp_path / "ran"
    (project / "orchestrator").mkdir()
    conf = project / "orchestrator" / "genesis.conf"
    conf.write_text(f"GENESIS_NOTIFY_CMD='touch {ran}'\n")
    git(project, "add", "-A")
    git(project, "commit", "-qm", "conf")
    trusted = subprocess.run(GENESIS + ["--project", str(project), "config", "trust"], capture_output=True,
                             text=True, timeout=60)
    assert trusted.returncode == 0, trusted.stderr
    assert alert_test(project).returncode == 0 and ran.exists()
    ran.unlink()
    conf.write_text(f"GENESIS_NOTIFY_CMD='touch {ran}; echo changed'\n")  # as an agent could write it
    done = alert_test(project)
    assert done.returncode == 30
    assert "command: not run: GENESIS_NOTIFY_CMD in orchestrator/genesis.conf is not approved" in done.stdout
    assert not ran.exists()

"""Secrets and huge files never enter history, and no secret reaches what Genesis writes or
shows, through the real loop script, real git and a real bare remote with AUTO_PUSH: an agent
that writes `.env` with an API key, `id_rsa`, `config.py` with an AWS secret and a 1 GB file,
and prints the key and a private key block in its transcript; and an agent that commits a
`.env` itself. The first runs in the box where the machine has one (the default), the second
without it: what Genesis commits and shows does not depend on it."""

from __future__ import annotations

import base64
import json
import secrets
import sqlite3
import subprocess
from pathlib import Path

import pytest
from helpers.agent import script
from helpers.git import git
from helpers.loop import GENESIS, loop_env, run_loop
from helpers.state import events_of, state_of
from helpers.waits import wait_for

# The secrets are made per test run: nothing here is a real key.
API_KEY = "sk-ant-api03-" + secrets.token_urlsafe(48)
AWS_SECRET = base64.b64encode(secrets.token_bytes(30)).decode()
KEY_LINES = [base64.b64encode(secrets.token_bytes(48)).decode() for _ in range(4)]
PRIVATE_KEY = "\n".join(["-----BEGIN RSA PRIVATE KEY-----", *KEY_LINES, "-----END RSA PRIVATE KEY-----"])
# Every piece of a secret that must not be anywhere Genesis writes or shows.
SECRETS = [API_KEY, AWS_SECRET, *KEY_LINES]

# Does its work, leaves secrets and a 1 GB sparse file about, prints the key and the key block,
# then works on past its runtime cap: killed, its partial work committed, an incident captured.
LEAKY = f"""#!/usr/bin/env bash
echo "the agent's real work" >work.txt
printf 'ANTHROPIC_API_KEY=%s\\n' "{API_KEY}" >.env
printf 'EXAMPLE_KEY=\\n' >.env.example
cat >id_rsa <<'KEY'
{PRIVATE_KEY}
KEY
cat >config.py <<'PY'
AWS_ACCESS_KEY_ID = "AKIA{secrets.token_hex(8).upper()}"
aws_secret_access_key = "{AWS_SECRET}"
PY
truncate -s 1G big.bin
echo "using ANTHROPIC_API_KEY={API_KEY} for the call"
echo "curl -H 'x-api-key: {API_KEY}' https://api.example.invalid"
cat id_rsa
exec sleep 300
"""
# Commits a .env itself (its own doing), then some work of its own for the auto-commit.
COMMITS_ITS_OWN = f"""#!/usr/bin/env bash
printf 'ANTHROPIC_API_KEY=%s\\n' "{API_KEY}" >.env
git add .env && git -c user.name=Agent -c user.email=agent@example.invalid commit -qm "add settings"
echo "more work" >work.txt
"""


def genesis(project: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(GENESIS + ["--project", str(project), *args], capture_output=True, text=True, timeout=60)


@pytest.fixture
def remote(project: Path, tmp_path: Path) -> Path:
    """A real bare remote the project's branch tracks."""
    bare = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    git(project, "remote", "add", "origin", str(bare))
    git(project, "push", "-q", "-u", "origin", "HEAD")
    return bare


def everything_in_history(repo: Path) -> str:
    return git(repo, "log", "--all", "-p", "--format=%H %s")


def ledger_dump(project: Path) -> str:
    conn = sqlite3.connect(state_of(project) / "ledger.sqlite3")
    try:
        return "\n".join(conn.iterdump())
    finally:
        conn.close()


def files_under(*folders: Path, suffixes: tuple[str, ...]) -> dict[Path, str]:
    return {path: path.read_text(errors="replace") for folder in folders if folder.exists()
            for path in folder.rglob("*") if path.is_file() and path.name.endswith(suffixes)}


def assert_no_secret(where: str, text: str) -> None:
    for value in SECRETS:
        assert value not in text, f"a secret is in {where}"


@pytest.mark.fault(82)
def test_secrets_and_a_1gb_file_are_never_committed_or_pushed_and_no_output_shows_the_key(project, remote, tmp_path):
    agent = script(tmp_path / "leaky.sh", LEAKY)
    done = run_loop(project, "--agent-cmd", str(agent), "--max-iterations", "1",
                    env=loop_env(GENESIS_PHASES="Builder", HEARTBEAT_STALE="120s", PHASE_RETRIES="0",
                                 AGENT_MAX_RUNTIME="4s", HEARTBEAT_COUNT_OUTPUT="true", AUTO_PUSH="true"))
    assert done.returncode == 0, done.stderr

    # The agent's work is committed and pushed; the secrets and the 1 GB file are in neither history.
    branch = git(project, "symbolic-ref", "--short", "HEAD").strip()
    committed = git(project, "log", "--format=", "--name-only", "HEAD").split()
    assert "work.txt" in committed and ".env.example" in committed
    assert git(remote, "rev-parse", branch) == git(project, "rev-parse", "HEAD")
    for repo in (project, remote):
        history = everything_in_history(repo)
        for name in (".env\n", "id_rsa", "config.py", "big.bin", "PRIVATE KEY"):
            assert f"b/{name}" not in history and name not in history.replace(".env.example", ""), (repo, name)
        assert_no_secret(f"the history of {repo.name}", history)
    # What was left out is still there, uncommitted, and the next auto-commit leaves it out again.
    status = git(project, "status", "--porcelain", "--untracked-files=all").split("\n")
    assert {"?? .env", "?? id_rsa", "?? config.py", "?? big.bin"} <= set(status)
    assert (project / "big.bin").stat().st_size == 1 << 30

    # Each is named with its reason: in the ledger, on the console, in the report.
    left = [f for e in events_of(project) if e["event"] == "commit_left_out" for f in e["files"]]
    reasons = {f["path"]: f["reason"] for f in left}
    assert set(reasons) == {".env", "id_rsa", "config.py", "big.bin"}, reasons
    assert reasons[".env"].startswith("looks like a secret by its name: an environment file")
    assert reasons["id_rsa"].startswith("looks like a secret by its name: an SSH private key")
    assert reasons["config.py"].startswith("detect-secrets found ")
    assert reasons["big.bin"].startswith("1024 MB, over the 10 MB cap")
    assert "4 file(s) left out of the commit" in done.stderr
    report = genesis(project, "report", "--html", str(tmp_path / "report.html"))
    assert report.returncode == 0, report.stderr
    assert "4 files left out of commits" in report.stdout
    assert "left out of commits (4;" in report.stdout
    for path, why in reasons.items():
        assert path in report.stdout and why[:40] in report.stdout, path
    html = (tmp_path / "report.html").read_text()
    assert "Left out of commits (4)" in html and "big.bin" in html
    as_json = genesis(project, "report", "--json")
    assert as_json.returncode == 0
    assert {r["path"] for r in json.loads(as_json.stdout)["runs"][0]["left_out"]} == set(reasons)

    # The key, the AWS secret and the key block: in no output Genesis writes or shows.
    assert "its last line" in done.stderr or "overtime" in done.stderr or "over time" in done.stderr
    incidents = files_under(state_of(project) / "incidents", suffixes=(".json", ".txt"))
    assert incidents, "the overtime phase left no incident"
    consoles = files_under(project / "orchestrator" / "logs", state_of(project) / "consoles", suffixes=("console.log",))
    consoles.update(files_under(state_of(project) / "consoles", suffixes=(".log",)))
    assert consoles, "no console log"
    outputs = {"the loop's console output": done.stderr + done.stdout, "the report": report.stdout,
               "the HTML report": html, "the JSON report": as_json.stdout, "the ledger": ledger_dump(project),
               **{f"incident {p.name}": text for p, text in incidents.items()},
               **{f"console log {p}": text for p, text in consoles.items()}}
    for where, text in outputs.items():
        assert_no_secret(where, text)
    # They were there to hide: the transcript's lines the console and the incident quote.
    assert "[redacted]" in "".join(incidents.values())
    assert "[redacted]" in report.stdout  # the overtime phase's transcript tail
    assert all("[redacted]" in text for text in consoles.values())
    # The agent's own transcript is its raw record, and does hold them: they were printed.
    transcripts = files_under(project / "orchestrator" / "logs", suffixes=(".log",))
    assert any(API_KEY in text for p, text in transcripts.items() if p.name != "console.log")


@pytest.mark.fault(82)
def test_a_secret_the_agent_commits_itself_is_named_and_alerted_and_its_phase_is_not_pushed(project, remote, tmp_path):
    agent = script(tmp_path / "own.sh", COMMITS_ITS_OWN)
    done = run_loop(project, "--agent-cmd", str(agent), "--max-iterations", "1",
                    env=loop_env(GENESIS_PHASES="Builder", HEARTBEAT_STALE="120s", HEARTBEAT_COUNT_OUTPUT="true",
                                 AUTO_PUSH="true", GENESIS_SANDBOX="off"))  # the same without the box
    assert done.returncode == 0, done.stderr
    own = git(project, "log", "--format=%h", "--diff-filter=A", "HEAD", "--", ".env").strip()
    assert own, "the agent's own commit of .env is kept: Genesis never rewrites it"
    assert f"the agent itself committed 1 file(s) that look like secrets (.env in {own})" in done.stderr
    events = events_of(project)
    leaked = [e for e in events if e["event"] == "agent_committed_secret"]
    assert [(f["path"], f["commit"]) for f in leaked[0]["files"]] == [(".env", own)]
    # The auto-commit took the rest, and nothing of the phase went to the remote.
    assert "work.txt" in git(project, "show", "--name-only", "--format=", "HEAD").split()
    assert ".env" not in everything_in_history(remote)
    remote_head = git(remote, "rev-parse", git(project, "symbolic-ref", "--short", "HEAD").strip())
    assert remote_head != git(project, "rev-parse", "HEAD")
    report = genesis(project, "report")
    assert "committed by the agent itself, looking like a secret (1;" in report.stdout
    assert "1 secret-looking file committed by the agent" in report.stdout
    assert_no_secret("the report", report.stdout)
    assert_no_secret("the ledger", ledger_dump(project))
    # An alert was raised for it (the detached deliverer records its ticket).
    wait_for(lambda: any(e["event"] == "alert" and e["ticket"]["kind"] == "agent_committed_secret"
                         for e in events_of(project)), timeout=30, what="the alert about the agent's .env")

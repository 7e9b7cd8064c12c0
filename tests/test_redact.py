"""The redaction every output goes through (genesis/redact.py): private key blocks whole or
cut, the token shapes detect-secrets knows, secret-named variables, long mixed-case base64
runs; and redact_all over the records the views render. Ordinary text stays."""

from __future__ import annotations

import base64
import io
import secrets
import sqlite3
import time
from dataclasses import dataclass

import pytest

from genesis.console import say
from genesis.health.capture import Incident
from genesis.health.incidents import read_incident, write
from genesis.ledger.store import Ledger
from genesis.redact import MARK, redact, redact_all
from genesis.status.screen import _safe

ENV: dict[str, str] = {}
BODY = [base64.b64encode(secrets.token_bytes(48)).decode() for _ in range(3)]
BLOCK = "\n".join(["-----BEGIN OPENSSH PRIVATE KEY-----", *BODY, "-----END OPENSSH PRIVATE KEY-----"])


@pytest.mark.fault(82)
def test_a_private_key_block_goes_whole_and_so_do_its_pieces_when_a_tail_or_a_cut_split_it():
    assert redact(f"cat id_rsa\n{BLOCK}\ndone", ENV) == f"cat id_rsa\n{MARK}\ndone"
    head_only = "\n".join(BLOCK.splitlines()[:2])          # cut after its first line
    assert redact(f"x\n{head_only}", ENV) == f"x\n{MARK}"
    tail_only = "\n".join(BLOCK.splitlines()[2:])          # a tail that starts mid-key
    assert redact(tail_only, ENV) == MARK
    for line in BLOCK.splitlines():                         # each line said on its own (a console's "  | line")
        assert not any(piece in redact(f"  | {line}", ENV) for piece in BODY)
    assert redact("-----BEGIN CERTIFICATE-----", ENV) == "-----BEGIN CERTIFICATE-----"


# text -> what it becomes (None: it stays as it is)
CASES = {
    "ANTHROPIC_API_KEY=sk-ant-api03-abcdEFGH1234": f"ANTHROPIC_API_KEY={MARK}",
    "SECRET_KEY=django-insecure-1234 DB_PASS='p w'": f"SECRET_KEY={MARK} DB_PASS={MARK}",
    "export GITLAB_TOKEN=glpat-abcdefghij12345": f"export GITLAB_TOKEN={MARK}",
    'aws_secret_access_key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY"': f"aws_secret_access_key = {MARK}",
    "key wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY in the log": f"key {MARK} in the log",
    "sk_live_abcdefghijklmnop1234": MARK,
    "npm_abcdefghijklmnopqrstuvwxyz0123": MARK,
    "AIzaSyA-abcdefghijklmnopqrstuvwxyz01234": MARK,
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U": MARK,
    # ordinary text stays: hex digests, paths, words, counts
    "commit 3f786850e387550fdab836ed7e6dc881de23001b and sha256 "
    "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08": None,
    "/tmp/pytest-of-root/pytest-1/popen-gw1/test_a_hanging_filter_in_add_i0/project": None,
    "input_tokens=500 INPUT_TOKENS=5 sort_key=name the KEY=value form": None,
    "iter-0001-Builder.log 20261124T000254Z-9826": None,
}


@pytest.mark.fault(82)
def test_the_shapes_of_secrets_go_and_ordinary_text_stays():
    for text, expected in CASES.items():
        assert redact(text, ENV) == (text if expected is None else expected), text


@dataclass(frozen=True)
class Row:
    reason: str
    lines: tuple[str, ...]
    count: int


@pytest.mark.fault(82)
def test_redact_all_walks_records_lists_and_dicts_and_leaves_other_values_be():
    key = "sk-ant-api03-" + secrets.token_urlsafe(30)
    value = {"detail": f"printed {key}", "n": 3, "ok": True, "none": None,
             "rows": [Row(f"token={key}", ("fine", key), 7)], "pair": ("a", key)}
    out = redact_all(value, ENV)
    assert out == {"detail": f"printed {MARK}", "n": 3, "ok": True, "none": None,
                   "rows": [Row(f"token={MARK}", ("fine", MARK), 7)], "pair": ("a", MARK)}
    assert key in value["detail"]  # the original is not changed


@pytest.mark.fault(82)
def test_the_values_of_secret_named_environment_variables_go_too():
    env = {"MY_SERVICE_TOKEN": "plain-words-but-secret", "HOME": "/home/someone-long"}
    assert redact("x plain-words-but-secret y /home/someone-long", env) == f"x {MARK} y /home/someone-long"
    assert redact_all(["plain-words-but-secret"], env) == [MARK]


# --- applied everywhere: each output, fed a key, keeps none of it -------------------------------

KEY = "sk-ant-api03-" + secrets.token_urlsafe(40)


@pytest.mark.fault(82)
def test_the_ledger_keeps_no_secret_of_an_event_nor_of_its_projections(tmp_path):
    path = tmp_path / "ledger.sqlite3"
    with Ledger.open(path) as led:
        led.record("r1", "loop_start", project=str(tmp_path), pid=1, agent=["claude", "--api-key", KEY])
        led.record("r1", "phase_end", iteration=1, phase="Builder", status="exited", returncode=1, duration=1.0,
                   ending="failed", detail=f"the agent exited with status 1; its last line: {BLOCK}")
        events = led.events("r1")
        reason = led.query("SELECT detail FROM phases WHERE run_id = ?", ("r1",))[0][0]
    dump = "\n".join(sqlite3.connect(path).iterdump())
    assert KEY not in dump and not any(piece in dump for piece in BODY)
    assert events[0]["agent"] == ["claude", "--api-key", MARK]
    assert reason == f"the agent exited with status 1; its last line: {MARK}"


@pytest.mark.fault(82)
def test_the_console_and_its_log_keep_no_secret(tmp_path):
    log, shown = tmp_path / "console.log", io.StringIO()
    say(f"Builder: exited; its last line: export ANTHROPIC_API_KEY={KEY}", "warn", stream=shown, copy_to=(log,))
    for text in (log.read_text(), shown.getvalue()):
        assert KEY not in text and f"ANTHROPIC_API_KEY={MARK}" in text


@pytest.mark.fault(82)
def test_an_incident_keeps_no_secret_of_the_transcript_it_captured(tmp_path):
    incident = Incident(at=time.time(), kind="stuck", reason=f"hung after printing {KEY}", phase="Builder",
                        iteration=1, run_id="r1", project=str(tmp_path), processes=(), ports=(), tool_in_flight=None,
                        tool_calls=({"tool": "Bash", "input": f"curl -H 'Authorization: Bearer {KEY}'"},),
                        heartbeat=None, transcript=tuple(BLOCK.splitlines()), git_status=())
    target = write(incident, tmp_path / "incidents")
    stored = target.read_text() + target.with_suffix(".txt").read_text()
    shown = read_incident(tmp_path / "incidents", target.stem)
    for text in (stored, shown):
        assert KEY not in text and not any(piece in text for piece in BODY)
    assert MARK in shown


@pytest.mark.fault(82)
def test_status_shows_no_secret_of_what_it_quotes():
    assert KEY not in _safe(f"Bash curl -H 'x-api-key: {KEY}'") and MARK in _safe(f"token {KEY}")

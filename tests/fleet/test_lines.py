"""The fleet's console lines: what a merge's failing test or an agent's reason quotes is shown
without its secrets or terminal escapes, from the local monitor and the Temporal home alike."""

from __future__ import annotations

from genesis.fleet import lines, monitor
from genesis.redact import MARK
from genesis.temporal import starting


def test_a_quoted_secret_and_escape_codes_never_reach_the_fleets_console(capsys):
    key = "sk-ant-api03-" + "Q" * 40
    lines.say(f"the merge of 'the task' failed: tests failed:\nFAILED test_x - token {key}\n\x1b]0;owned\x07done",
              "error")
    err = capsys.readouterr().err
    assert key not in err and MARK in err and "\x1b" not in err and "\x07" not in err
    assert err.splitlines()[1:] == [f"FAILED test_x - token {MARK}", "done"]   # its lines kept, each made safe
    assert monitor.say is lines.say and starting.say is lines.say               # one console for both fleets


def test_a_workers_own_lines_are_cleaned_as_the_fleets(capsys):
    from genesis.temporal import worker
    key = "sk-ant-api03-" + "R" * 40
    worker._say(f"could not fetch: remote said {key}\x1b[2J", "warning")
    err = capsys.readouterr().err
    assert err == f"genesis worker: warning: could not fetch: remote said {MARK}\n"

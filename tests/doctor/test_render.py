"""The doctor's words: a marked line per check, the fix under a problem, the verdict last."""

from __future__ import annotations

import io

from genesis.console import coloured
from genesis.doctor.checks import FAIL, OK, WARN, Check
from genesis.doctor.render import as_json, ready, text

CHECKS = [Check("git", OK, "git version 2.39.5"),
          Check("box", WARN, "off (GENESIS_SANDBOX=off)", "export GENESIS_SANDBOX=auto"),
          Check("hook", FAIL, "not installed", "genesis --project /p hook install --scope local")]


def test_one_marked_line_a_check_the_fix_under_it_and_the_verdict():
    assert text(CHECKS) == [
        "ok git   git version 2.39.5",
        "-- box   off (GENESIS_SANDBOX=off)",
        "         fix: export GENESIS_SANDBOX=auto",
        "!! hook  not installed",
        "         fix: genesis --project /p hook install --scope local",
        "1 thing to fix before a night",
    ]
    two = CHECKS + [Check("root", FAIL, "as root", "export IS_SANDBOX=1")]
    assert text(two)[-1] == "2 things to fix before a night"


def test_warnings_alone_leave_it_ready():
    assert text(CHECKS[:2])[-1] == "ready for a night" and ready(CHECKS[:2]) and not ready(CHECKS)


def test_colour_only_on_a_terminal_without_no_color(monkeypatch):
    assert text(CHECKS, colour=True)[0] == "\033[32mok\033[0m git   git version 2.39.5"
    assert text(CHECKS, colour=True)[3].startswith("\033[31m!!\033[0m hook")

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    assert coloured(Terminal()) and not coloured(io.StringIO())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not coloured(Terminal())


def test_json_says_every_check_and_the_verdict():
    assert as_json(CHECKS) == {
        "ready": False, "failures": 1, "warnings": 1,
        "checks": [{"name": "git", "level": "ok", "found": "git version 2.39.5", "fix": ""},
                   {"name": "box", "level": "warn", "found": "off (GENESIS_SANDBOX=off)",
                    "fix": "export GENESIS_SANDBOX=auto"},
                   {"name": "hook", "level": "fail", "found": "not installed",
                    "fix": "genesis --project /p hook install --scope local"}]}

"""The alert knobs: defaults, every value parsed, and a wrong one refused naming the knob."""

from __future__ import annotations

import pytest

from genesis.alerts.settings import KNOBS, LEVELS, AlertSettings, misspelt, parse
from genesis.alerts.tickets import SEVERITIES


def test_nothing_set_gives_the_defaults():
    s = parse({})
    assert s == AlertSettings()
    assert (s.desktop, s.webhook, s.ntfy, s.command, s.timeout, s.retries, s.triage_command, s.triage_timeout) == (
        "auto", None, None, None, 10.0, 2, None, 60.0)
    assert parse({"GENESIS_NOTIFY_WEBHOOK": "  ", "GENESIS_NOTIFY_RETRIES": ""}) == AlertSettings()


def test_every_knob_is_read():
    s = parse({"GENESIS_NOTIFY_DESKTOP": "off", "GENESIS_NOTIFY_WEBHOOK": "https://hooks.example.com/T1/B2/xyz",
               "GENESIS_NOTIFY_NTFY": "https://ntfy.sh/night-watch", "GENESIS_NOTIFY_CMD": "notify-me --to 'my phone'",
               "GENESIS_NOTIFY_TIMEOUT_SECONDS": "2.5", "GENESIS_NOTIFY_RETRIES": "0",
               "GENESIS_TRIAGE_CMD": "claude -p 'Triage this ticket'", "GENESIS_TRIAGE_TIMEOUT_SECONDS": "90"})
    assert s.desktop == "false"
    assert s.command == ("notify-me", "--to", "my phone")
    assert s.triage_command == ("claude", "-p", "Triage this ticket")
    assert (s.timeout, s.retries, s.triage_timeout) == (2.5, 0, 90.0)
    assert AlertSettings.from_json(s.to_json()) == s


@pytest.mark.parametrize("knobs, message", [
    ({"GENESIS_NOTIFY_WEBHOOK": "ftp://example.com/hook"}, "GENESIS_NOTIFY_WEBHOOK: ftp scheme; expected an http"),
    ({"GENESIS_NOTIFY_NTFY": "ntfy.sh/topic"}, "GENESIS_NOTIFY_NTFY: no scheme; expected an http"),
    ({"GENESIS_NOTIFY_NTFY": "file:///etc/passwd"}, "GENESIS_NOTIFY_NTFY: file scheme"),
    ({"GENESIS_NOTIFY_WEBHOOK": "https:///path-only"}, "GENESIS_NOTIFY_WEBHOOK: the URL names no host"),
    ({"GENESIS_NOTIFY_WEBHOOK": "http://example.com:99999/"}, "GENESIS_NOTIFY_WEBHOOK: the URL's port"),
    ({"GENESIS_NOTIFY_WEBHOOK": "http://exa mple.com/"}, "GENESIS_NOTIFY_WEBHOOK: not a URL"),
    ({"GENESIS_NOTIFY_TIMEOUT_SECONDS": "-1"}, "GENESIS_NOTIFY_TIMEOUT_SECONDS='-1' is not a duration: write 90s"),
    ({"GENESIS_NOTIFY_TIMEOUT_SECONDS": "soon"}, "GENESIS_NOTIFY_TIMEOUT_SECONDS='soon' is not a duration"),
    ({"GENESIS_NOTIFY_TIMEOUT_SECONDS": "6m"}, "GENESIS_NOTIFY_TIMEOUT_SECONDS='6m': expected a duration above 0, "
                                               "at most 300s"),
    ({"GENESIS_TRIAGE_TIMEOUT_SECONDS": "0"}, "GENESIS_TRIAGE_TIMEOUT_SECONDS='0': expected a duration above 0"),
    ({"GENESIS_TRIAGE_TIMEOUT_SECONDS": "nan"}, "GENESIS_TRIAGE_TIMEOUT_SECONDS='nan'"),
    ({"GENESIS_NOTIFY_RETRIES": "11"}, "GENESIS_NOTIFY_RETRIES='11': expected a whole number from 0 to 10"),
    ({"GENESIS_NOTIFY_RETRIES": "1.5"}, "GENESIS_NOTIFY_RETRIES='1.5': expected a whole number"),
    ({"GENESIS_NOTIFY_DESKTOP": "sometimes"}, "GENESIS_NOTIFY_DESKTOP='sometimes': expected auto, true or false"),
    ({"GENESIS_NOTIFY_CMD": "notify 'unclosed"}, "GENESIS_NOTIFY_CMD: No closing quotation; check its quotes"),
    ({"GENESIS_TRIAGE_CMD": "judge \"half"}, "GENESIS_TRIAGE_CMD: No closing quotation"),
])
def test_a_bad_value_is_refused_naming_the_knob_and_what_it_accepts(knobs, message):
    with pytest.raises(ValueError) as caught:
        parse(knobs)
    assert str(caught.value).startswith(message)


def test_the_knob_table_names_every_knob_parse_reads_with_its_default():
    names = {name for name, _, _ in KNOBS}
    assert names == {"GENESIS_NOTIFY_DESKTOP", "GENESIS_NOTIFY_WEBHOOK", "GENESIS_NOTIFY_NTFY", "GENESIS_NOTIFY_ACTIONS_URL", "GENESIS_NOTIFY_CMD",
                     "GENESIS_NOTIFY_TIMEOUT_SECONDS", "GENESIS_NOTIFY_RETRIES", "GENESIS_TRIAGE_CMD",
                     "GENESIS_TRIAGE_TIMEOUT_SECONDS", "GENESIS_NOTIFY_DESKTOP_MIN_SEVERITY",
                     "GENESIS_NOTIFY_WEBHOOK_MIN_SEVERITY", "GENESIS_NOTIFY_NTFY_MIN_SEVERITY",
                     "GENESIS_NOTIFY_CMD_MIN_SEVERITY"}
    defaults = {name: default for name, default, _ in KNOBS if default is not None}
    assert parse(defaults) == AlertSettings()


# --- each channel's minimum severity ------------------------------------------------------------

def test_each_channel_gets_alerts_from_its_minimum_severity_up_low_by_default():
    assert LEVELS == SEVERITIES
    s = parse({"GENESIS_NOTIFY_NTFY_MIN_SEVERITY": "High", "GENESIS_NOTIFY_CMD_MIN_SEVERITY": " critical ",
               "GENESIS_NOTIFY_WEBHOOK_MIN_SEVERITY": ""})
    assert [s.minimum(name) for name in ("desktop", "webhook", "ntfy", "command")] == ["low", "low", "high", "critical"]
    assert [s.wants("ntfy", level) for level in LEVELS] == [False, False, True, True]
    assert [s.wants("command", level) for level in LEVELS] == [False, False, False, True]
    assert all(s.wants("webhook", level) for level in LEVELS)
    assert AlertSettings.from_json(s.to_json()) == s
    # A deliverer handed settings written before the minimums existed sends as before.
    old = {k: v for k, v in s.to_json().items() if k != "minimum"}
    assert AlertSettings.from_json(old).minimum("ntfy") == "low"
    with pytest.raises(ValueError, match="alert settings are malformed"):
        AlertSettings.from_json({**s.to_json(), "minimum": {"ntfy": "loud"}})


@pytest.mark.parametrize("key", ["GENESIS_NOTIFY_DESKTOP_MIN_SEVERITY", "GENESIS_NOTIFY_NTFY_MIN_SEVERITY"])
def test_a_minimum_that_is_no_severity_is_refused_naming_the_knob(key):
    with pytest.raises(ValueError) as caught:
        parse({key: "urgent"})
    assert str(caught.value) == f"{key}='urgent': expected low, medium, high or critical"


# --- a misspelt channel is refused --------------------------------------------------------------

@pytest.mark.fault(89)
@pytest.mark.parametrize("typo, meant", [
    ("GENESIS_NOTIFY_WEBHOK", "GENESIS_NOTIFY_WEBHOOK"),
    ("GENESIS_NOTIFY_COMMAND", "GENESIS_NOTIFY_CMD"),
    ("GENESIS_NOTIFY_WEBHOOK_URL", "GENESIS_NOTIFY_WEBHOOK"),
    ("GENESIS_NOTIFY_NTFY_MIN_SEVERTY", "GENESIS_NOTIFY_NTFY_MIN_SEVERITY"),
])
def test_a_misspelt_alert_variable_is_refused_with_the_name_it_meant(typo, meant):
    said = misspelt({"PATH": "/bin", "GENESIS_NOTIFY_NTFY": "https://ntfy.sh/t", typo: "x"})
    assert said == (f"{typo} is set in the environment but is not an alert setting; did you mean {meant}? A misspelt "
                    f"channel would mean a night without alerts: rename or unset it")


def test_an_alert_variable_near_no_setting_is_refused_with_the_channels():
    said = misspelt({"GENESIS_NOTIFY_EMAIL": "me@example.com"})
    assert said.startswith("GENESIS_NOTIFY_EMAIL is set in the environment but is not an alert setting; the "
                           "channels are GENESIS_NOTIFY_DESKTOP, GENESIS_NOTIFY_WEBHOOK, GENESIS_NOTIFY_NTFY, "
                           "GENESIS_NOTIFY_CMD")
    assert misspelt({name: "x" for name, _, _ in KNOBS}) is None
    assert misspelt({"GENESIS_ALERT_TEXT": "x", "GENESIS_MAX_ITERATONS": "1"}) is None

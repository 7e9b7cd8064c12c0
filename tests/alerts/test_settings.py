"""The alert knobs: defaults, every value parsed, and a wrong one refused naming the knob."""

from __future__ import annotations

import pytest

from genesis.alerts.settings import KNOBS, AlertSettings, parse


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
    ({"GENESIS_NOTIFY_TIMEOUT_SECONDS": "-1"}, "GENESIS_NOTIFY_TIMEOUT_SECONDS='-1': expected seconds above 0"),
    ({"GENESIS_NOTIFY_TIMEOUT_SECONDS": "soon"}, "GENESIS_NOTIFY_TIMEOUT_SECONDS='soon': expected a number"),
    ({"GENESIS_TRIAGE_TIMEOUT_SECONDS": "0"}, "GENESIS_TRIAGE_TIMEOUT_SECONDS='0': expected seconds above 0"),
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
    assert names == {"GENESIS_NOTIFY_DESKTOP", "GENESIS_NOTIFY_WEBHOOK", "GENESIS_NOTIFY_NTFY", "GENESIS_NOTIFY_CMD",
                     "GENESIS_NOTIFY_TIMEOUT_SECONDS", "GENESIS_NOTIFY_RETRIES", "GENESIS_TRIAGE_CMD",
                     "GENESIS_TRIAGE_TIMEOUT_SECONDS"}
    defaults = {name: default for name, default, _ in KNOBS if default is not None}
    assert parse(defaults) == AlertSettings()

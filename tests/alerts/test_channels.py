"""Which channels are set, and the start's line that names them with what each gets."""

from __future__ import annotations

import stat
from pathlib import Path

from genesis.alerts.channels import ChannelState, banner, configured
from genesis.alerts.settings import parse

TEST = "genesis --project /src/myapp alert test"


def tool(folder: Path, name: str) -> Path:
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_the_banner_names_each_channel_with_what_it_gets_and_why_desktop_is_off(tmp_path):
    s = parse({"GENESIS_NOTIFY_WEBHOOK": "https://hooks.example.com/T1/B2/secret",
               "GENESIS_NOTIFY_NTFY": "https://ntfy.sh/night", "GENESIS_NOTIFY_NTFY_MIN_SEVERITY": "high",
               "GENESIS_NOTIFY_CMD": "page-me", "GENESIS_NOTIFY_CMD_MIN_SEVERITY": "critical"})
    env = {"PATH": str(tool(tmp_path / "bin", "notify-send").parent)}
    states = configured(s, env, platform="linux")
    assert states == [ChannelState("desktop", "low", "no desktop session", str(tmp_path / "bin" / "notify-send")),
                      ChannelState("webhook", "low"), ChannelState("ntfy", "high"), ChannelState("command", "critical")]
    line = banner(states, TEST)
    assert line == ("alerts: webhook (all), ntfy (high and up), command (critical only), desktop (off: no desktop "
                    f"session); test them: {TEST}")
    assert "hooks.example.com" not in line and "ntfy.sh" not in line  # a URL is a secret


def test_a_desktop_session_turns_auto_on_and_false_leaves_it_out(tmp_path):
    env = {"PATH": str(tool(tmp_path / "bin", "notify-send").parent), "DISPLAY": ":0"}
    assert banner(configured(parse({"GENESIS_NOTIFY_DESKTOP_MIN_SEVERITY": "medium"}), env, platform="linux"),
                  TEST) == f"alerts: desktop (medium and up); test them: {TEST}"
    assert configured(parse({"GENESIS_NOTIFY_DESKTOP": "false"}), env, platform="linux") == []
    # true without the tool is on, and fails when it sends, saying so (notify.py)
    [forced] = configured(parse({"GENESIS_NOTIFY_DESKTOP": "true"}), {"PATH": str(tmp_path / "none")},
                          platform="linux")
    assert (forced.off, forced.tool) == ("", None)


def test_with_no_channel_the_banner_says_how_to_set_one(tmp_path):
    env = {"PATH": str(tmp_path / "empty")}
    assert banner(configured(parse({}), env, platform="linux"), TEST) == \
        "alerts: none set (GENESIS_NOTIFY_WEBHOOK / _NTFY / _CMD; desktop off: notify-send not found)"
    assert banner(configured(parse({"GENESIS_NOTIFY_DESKTOP": "off"}), env, platform="linux"), TEST) == \
        "alerts: none set (GENESIS_NOTIFY_WEBHOOK / _NTFY / _CMD)"

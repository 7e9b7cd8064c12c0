"""Which alert channels are set, and the one line that says so at the loop's start.

Light on purpose (no network code): the loop's start says the channels, notify.py sends
through them, and `genesis alert test` tries them, all from this one list.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from typing import Callable, Mapping

from genesis.alerts.settings import CHANNEL_KEYS, LEVELS, PREFIX, AlertSettings

__all__ = ["ChannelState", "configured", "banner", "desktop_tool", "reach"]

NO_SESSION = "no desktop session"


@dataclass(frozen=True)
class ChannelState:
    name: str              # desktop, webhook, ntfy, command
    minimum: str           # the lowest severity it gets
    off: str = ""          # why a channel the settings allow cannot send (desktop `auto` only); "" when on
    tool: str | None = None  # the desktop's notify-send or osascript, where found


def desktop_tool(env: Mapping[str, str], which: Callable[..., str | None] = shutil.which,
                 platform: str = sys.platform) -> str | None:
    return which("osascript" if platform == "darwin" else "notify-send", path=env.get("PATH"))


def _has_session(platform: str, env: Mapping[str, str]) -> bool:
    return platform == "darwin" or any(env.get(k) for k in ("DISPLAY", "WAYLAND_DISPLAY", "DBUS_SESSION_BUS_ADDRESS"))


def configured(settings: AlertSettings, env: Mapping[str, str] | None = None,
               which: Callable[..., str | None] = shutil.which, platform: str = sys.platform) -> list[ChannelState]:
    """Every channel the settings name, in notify order. Desktop `auto` is listed off (with
    why) without its tool or a desktop session; `true` is on even then (and fails, saying so);
    `false` is not listed."""
    env = dict(os.environ if env is None else env)
    found: list[ChannelState] = []
    if settings.desktop != "false":
        tool = desktop_tool(env, which, platform)
        off = ""
        if settings.desktop == "auto" and tool is None:
            off = f"{'osascript' if platform == 'darwin' else 'notify-send'} not found"
        elif settings.desktop == "auto" and not _has_session(platform, env):
            off = NO_SESSION
        found.append(ChannelState("desktop", settings.minimum("desktop"), off, tool))
    for name, value in (("webhook", settings.webhook), ("ntfy", settings.ntfy), ("command", settings.command)):
        if value:
            found.append(ChannelState(name, settings.minimum(name)))
    return found


def reach(minimum: str) -> str:
    """What a channel gets, in a few words."""
    if minimum == LEVELS[0]:
        return "all"
    if minimum == LEVELS[-1]:
        return f"{minimum} only"
    return f"{minimum} and up"


def banner(states: list[ChannelState], test_command: str) -> str:
    """The start's line: each channel and what it gets, or that none is set."""
    on = [s for s in states if not s.off]
    if not on:
        unset = " / ".join([PREFIX + CHANNEL_KEYS[1][1]] + [f"_{key}" for _, key in CHANNEL_KEYS[2:]])
        desktop = "".join(f"; desktop off: {s.off}" for s in states if s.off)
        return f"alerts: none set ({unset}{desktop})"
    said = [f"{s.name} ({reach(s.minimum)})" for s in on] + [f"{s.name} (off: {s.off})" for s in states if s.off]
    return f"alerts: {', '.join(said)}; test them: {test_command}"

"""The alert knobs: where notifications go, how long each try may take, and the optional
triage command. Parsed once, in the loop, so a typo is refused at start, not at 3 a.m."""

from __future__ import annotations

import shlex
import urllib.parse
from dataclasses import dataclass
from typing import Mapping

__all__ = ["AlertSettings", "parse", "KNOBS", "DESKTOP_MODES"]

DESKTOP_MODES = ("auto", "true", "false")
MAX_URL = 2048
MAX_NOTIFY_TIMEOUT = 300.0
MAX_TRIAGE_TIMEOUT = 1800.0
MAX_RETRIES = 10

# (name, default, one-line help), for the loop's knob table.
KNOBS: tuple[tuple[str, str | None, str], ...] = (
    ("GENESIS_NOTIFY_DESKTOP", "auto", "desktop notifications (notify-send, or osascript on macOS): auto (when "
     "present and a desktop session is there), true or false"),
    ("GENESIS_NOTIFY_WEBHOOK", None, "an http(s) URL that gets each alert as a Slack-compatible JSON POST"),
    ("GENESIS_NOTIFY_NTFY", None, "an ntfy topic URL (e.g. https://ntfy.sh/my-topic) that gets each alert as a push"),
    ("GENESIS_NOTIFY_CMD", None, "a command run for each alert, the ticket JSON on its stdin, "
     "GENESIS_ALERT_SEVERITY and GENESIS_ALERT_TEXT in its environment; exit 0 is delivered"),
    ("GENESIS_NOTIFY_TIMEOUT_SECONDS", "10", "bound on each try of each notification channel"),
    ("GENESIS_NOTIFY_RETRIES", "2", "tries after a failed one, per channel (1 s, then 2 s apart; 0-10)"),
    ("GENESIS_TRIAGE_CMD", None, "a command that decides whether a ticket is worth telling (ticket JSON on stdin; "
     "its answer starts with dismiss or intervene); unset, or failing: the built-in rules decide"),
    ("GENESIS_TRIAGE_TIMEOUT_SECONDS", "60", "bound on the triage command; past it the rules decide"),
)


@dataclass(frozen=True)
class AlertSettings:
    desktop: str = "auto"                       # auto, true, false
    webhook: str | None = None
    ntfy: str | None = None
    command: tuple[str, ...] | None = None
    timeout: float = 10.0                       # seconds per try of a channel
    retries: int = 2
    triage_command: tuple[str, ...] | None = None
    triage_timeout: float = 60.0
    backoff: tuple[float, ...] = (1.0, 2.0)     # seconds before the 2nd, 3rd... try (the last repeats)

    def to_json(self) -> dict:
        return {"desktop": self.desktop, "webhook": self.webhook, "ntfy": self.ntfy,
                "command": list(self.command) if self.command else None, "timeout": self.timeout,
                "retries": self.retries, "triage_command": list(self.triage_command) if self.triage_command else None,
                "triage_timeout": self.triage_timeout, "backoff": list(self.backoff)}

    @classmethod
    def from_json(cls, data: object) -> "AlertSettings":
        if not isinstance(data, dict):
            raise ValueError("alert settings are a JSON object")
        try:
            return cls(desktop=str(data.get("desktop", "auto")), webhook=data.get("webhook"), ntfy=data.get("ntfy"),
                       command=tuple(map(str, data["command"])) if data.get("command") else None,
                       timeout=float(data.get("timeout", 10.0)), retries=int(data.get("retries", 2)),
                       triage_command=tuple(map(str, data["triage_command"])) if data.get("triage_command") else None,
                       triage_timeout=float(data.get("triage_timeout", 60.0)),
                       backoff=tuple(float(b) for b in data.get("backoff", (1.0, 2.0))) or (1.0,))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"alert settings are malformed ({exc})") from None


def parse(settings: Mapping[str, str]) -> AlertSettings:
    """AlertSettings from the knobs (unset or empty: the default); ValueError names the knob
    and what it accepts."""

    def get(key: str) -> str:
        return str(settings.get(key) or "").strip()

    desktop = get("GENESIS_NOTIFY_DESKTOP").lower() or "auto"
    desktop = {"1": "true", "yes": "true", "on": "true", "0": "false", "no": "false", "off": "false"}.get(desktop,
                                                                                                       desktop)
    if desktop not in DESKTOP_MODES:
        raise ValueError(f"GENESIS_NOTIFY_DESKTOP={get('GENESIS_NOTIFY_DESKTOP')!r}: expected auto, true or false")
    return AlertSettings(
        desktop=desktop,
        webhook=_url("GENESIS_NOTIFY_WEBHOOK", get("GENESIS_NOTIFY_WEBHOOK")),
        ntfy=_url("GENESIS_NOTIFY_NTFY", get("GENESIS_NOTIFY_NTFY")),
        command=_command("GENESIS_NOTIFY_CMD", get("GENESIS_NOTIFY_CMD")),
        timeout=_seconds("GENESIS_NOTIFY_TIMEOUT_SECONDS", get("GENESIS_NOTIFY_TIMEOUT_SECONDS") or "10",
                         MAX_NOTIFY_TIMEOUT),
        retries=_retries(get("GENESIS_NOTIFY_RETRIES") or "2"),
        triage_command=_command("GENESIS_TRIAGE_CMD", get("GENESIS_TRIAGE_CMD")),
        triage_timeout=_seconds("GENESIS_TRIAGE_TIMEOUT_SECONDS", get("GENESIS_TRIAGE_TIMEOUT_SECONDS") or "60",
                                MAX_TRIAGE_TIMEOUT))


def _url(key: str, raw: str) -> str | None:
    if not raw:
        return None
    if len(raw) > MAX_URL or any(c.isspace() or ord(c) < 32 for c in raw):
        raise ValueError(f"{key}: not a URL (spaces, control characters, or longer than {MAX_URL} characters)")
    parts = urllib.parse.urlsplit(raw)
    if parts.scheme.lower() not in ("http", "https"):
        raise ValueError(f"{key}: {parts.scheme or 'no'} scheme; expected an http:// or https:// URL")
    try:
        parts.port  # noqa: B018  (a bad port raises here)
    except ValueError:
        raise ValueError(f"{key}: the URL's port is not a number from 0 to 65535") from None
    if not parts.hostname:
        raise ValueError(f"{key}: the URL names no host; expected e.g. https://ntfy.sh/my-topic")
    return raw


def _command(key: str, raw: str) -> tuple[str, ...] | None:
    if not raw:
        return None
    try:
        words = shlex.split(raw)
    except ValueError as exc:
        raise ValueError(f"{key}: {exc}; check its quotes") from None
    return tuple(words) or None


def _seconds(key: str, raw: str, high: float) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{key}={raw!r}: expected a number of seconds") from None
    if not 0 < value <= high:
        raise ValueError(f"{key}={raw!r}: expected seconds above 0, at most {high:g}")
    return value


def _retries(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"GENESIS_NOTIFY_RETRIES={raw!r}: expected a whole number from 0 to {MAX_RETRIES}") from None
    if not 0 <= value <= MAX_RETRIES:
        raise ValueError(f"GENESIS_NOTIFY_RETRIES={raw!r}: expected a whole number from 0 to {MAX_RETRIES}")
    return value

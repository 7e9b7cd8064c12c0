"""The alert knobs: where notifications go, how long each try may take, and the optional
triage command. Parsed once, in the loop, so a typo is refused at start, not at 3 a.m."""

from __future__ import annotations

import difflib
import shlex
import urllib.parse
from dataclasses import dataclass
from typing import Mapping

from genesis.durations import seconds as duration_seconds
from genesis.durations import unit_of

__all__ = ["AlertSettings", "parse", "KNOBS", "DURATIONS", "DEFAULTS", "DESKTOP_MODES", "LEVELS", "CHANNEL_KEYS",
           "PREFIX", "misspelt", "refusal", "at_least"]

DESKTOP_MODES = ("auto", "true", "false")
MAX_URL = 2048
MAX_NOTIFY_TIMEOUT = 300.0
MAX_TRIAGE_TIMEOUT = 1800.0
MAX_RETRIES = 10
LEVELS = ("low", "medium", "high", "critical")   # the tickets' severities (tickets.SEVERITIES), lowest first
PREFIX = "GENESIS_NOTIFY_"
# Each channel's name (as notify.py and the ledger say it) and its knob's suffix.
CHANNEL_KEYS = (("desktop", "DESKTOP"), ("webhook", "WEBHOOK"), ("ntfy", "NTFY"), ("command", "CMD"))
MIN_SUFFIX = "_MIN_SEVERITY"
CLOSE = 0.6   # difflib's ratio, on the part after GENESIS_NOTIFY_, for "most likely meant"

# (name, default, one-line help), for the loop's knob table.
KNOBS: tuple[tuple[str, str | None, str], ...] = (
    ("GENESIS_NOTIFY_DESKTOP", "auto", "desktop notifications (notify-send, or osascript on macOS): auto (when "
     "present and a desktop session is there), true or false"),
    ("GENESIS_NOTIFY_WEBHOOK", None, "an http(s) URL that gets each alert as a Slack-compatible JSON POST"),
    ("GENESIS_NOTIFY_NTFY", None, "an ntfy topic URL (e.g. https://ntfy.sh/my-topic) that gets each alert as a push"),
    ("GENESIS_NOTIFY_ACTIONS_URL", None, "the dashboard's address as your phone reaches it (`genesis serve`'s, "
     "e.g. http://laptop.tailnet:8765): the ntfy and webhook alerts then carry one-tap action links to it (signed, "
     "single-use, expiring); unset: none"),
    ("GENESIS_NOTIFY_CMD", None, "a command run for each alert, the ticket JSON on its stdin, "
     "GENESIS_ALERT_SEVERITY and GENESIS_ALERT_TEXT in its environment; exit 0 is delivered"),
    *((f"{PREFIX}{key}{MIN_SUFFIX}", "low", f"the lowest severity the {name} channel gets: low (every alert "
       f"triage lets through), medium, high or critical; the loop's end by its own severity, a resolved "
       f"follow-up wherever its alert went") for name, key in CHANNEL_KEYS),
    ("GENESIS_NOTIFY_TIMEOUT_SECONDS", "10", "bound on each try of each notification channel"),
    ("GENESIS_NOTIFY_RETRIES", "2", "tries after a failed one, per channel (1 s, then 2 s apart; 0-10)"),
    ("GENESIS_TRIAGE_CMD", None, "a command that decides whether a ticket is worth telling (ticket JSON on stdin; "
     "its answer starts with dismiss or intervene); unset, or failing: the built-in rules decide"),
    ("GENESIS_TRIAGE_TIMEOUT_SECONDS", "60", "bound on the triage command; past it the rules decide"),
)
DURATIONS = ("GENESIS_NOTIFY_TIMEOUT_SECONDS", "GENESIS_TRIAGE_TIMEOUT_SECONDS")
DEFAULTS = {name: default for name, default, _ in KNOBS if default is not None}


@dataclass(frozen=True)
class AlertSettings:
    desktop: str = DEFAULTS["GENESIS_NOTIFY_DESKTOP"]   # auto, true, false
    webhook: str | None = None
    ntfy: str | None = None
    actions_url: str | None = None      # the dashboard's address for the alerts' action links
    command: tuple[str, ...] | None = None
    timeout: float = float(DEFAULTS["GENESIS_NOTIFY_TIMEOUT_SECONDS"])   # seconds per try of a channel
    retries: int = int(DEFAULTS["GENESIS_NOTIFY_RETRIES"])
    triage_command: tuple[str, ...] | None = None
    triage_timeout: float = float(DEFAULTS["GENESIS_TRIAGE_TIMEOUT_SECONDS"])
    backoff: tuple[float, ...] = (1.0, 2.0)     # seconds before the 2nd, 3rd... try (the last repeats)
    # The lowest severity each channel gets (GENESIS_NOTIFY_<CHANNEL>_MIN_SEVERITY).
    desktop_min: str = DEFAULTS["GENESIS_NOTIFY_DESKTOP_MIN_SEVERITY"]
    webhook_min: str = DEFAULTS["GENESIS_NOTIFY_WEBHOOK_MIN_SEVERITY"]
    ntfy_min: str = DEFAULTS["GENESIS_NOTIFY_NTFY_MIN_SEVERITY"]
    command_min: str = DEFAULTS["GENESIS_NOTIFY_CMD_MIN_SEVERITY"]

    def __post_init__(self) -> None:
        for name, _ in CHANNEL_KEYS:
            if getattr(self, f"{name}_min") not in LEVELS:
                raise ValueError(f"{name}'s minimum severity {getattr(self, f'{name}_min')!r} is not one of "
                                 f"{', '.join(LEVELS)}")

    def minimum(self, channel: str) -> str:
        """The lowest severity the channel gets (low for a channel it does not know)."""
        return getattr(self, f"{channel}_min", "low") if channel in dict(CHANNEL_KEYS) else "low"

    def wants(self, channel: str, severity: str) -> bool:
        """Whether a ticket of this severity goes to the channel."""
        return at_least(severity, self.minimum(channel))

    def to_json(self) -> dict:
        return {"desktop": self.desktop, "webhook": self.webhook, "ntfy": self.ntfy, "actions_url": self.actions_url,
                "command": list(self.command) if self.command else None, "timeout": self.timeout,
                "retries": self.retries, "triage_command": list(self.triage_command) if self.triage_command else None,
                "triage_timeout": self.triage_timeout, "backoff": list(self.backoff),
                "minimum": {name: self.minimum(name) for name, _ in CHANNEL_KEYS}}

    @classmethod
    def from_json(cls, data: object) -> "AlertSettings":
        if not isinstance(data, dict):
            raise ValueError("alert settings are a JSON object")
        minimum = data.get("minimum") or {}
        unset = cls()   # what a document written before a field existed meant
        try:
            if not isinstance(minimum, dict):
                raise ValueError("minimum is not an object")
            return cls(desktop=str(data.get("desktop", unset.desktop)), webhook=data.get("webhook"),
                       ntfy=data.get("ntfy"), actions_url=data.get("actions_url"),
                       command=tuple(map(str, data["command"])) if data.get("command") else None,
                       timeout=float(data.get("timeout", unset.timeout)),
                       retries=int(data.get("retries", unset.retries)),
                       triage_command=tuple(map(str, data["triage_command"])) if data.get("triage_command") else None,
                       triage_timeout=float(data.get("triage_timeout", unset.triage_timeout)),
                       backoff=tuple(float(b) for b in data.get("backoff", unset.backoff)) or (1.0,),
                       **{f"{name}_min": str(minimum.get(name, unset.minimum(name))) for name, _ in CHANNEL_KEYS})
        except (TypeError, ValueError) as exc:
            raise ValueError(f"alert settings are malformed ({exc})") from None


def parse(settings: Mapping[str, str]) -> AlertSettings:
    """AlertSettings from the knobs (unset or empty: the default); ValueError names the knob
    and what it accepts."""

    def get(key: str) -> str:
        return str(settings.get(key) or "").strip()

    desktop = get("GENESIS_NOTIFY_DESKTOP").lower() or DEFAULTS["GENESIS_NOTIFY_DESKTOP"]
    desktop = {"1": "true", "yes": "true", "on": "true", "0": "false", "no": "false", "off": "false"}.get(desktop,
                                                                                                       desktop)
    if desktop not in DESKTOP_MODES:
        raise ValueError(f"GENESIS_NOTIFY_DESKTOP={get('GENESIS_NOTIFY_DESKTOP')!r}: expected auto, true or false")
    return AlertSettings(
        desktop=desktop,
        webhook=_url("GENESIS_NOTIFY_WEBHOOK", get("GENESIS_NOTIFY_WEBHOOK")),
        ntfy=_url("GENESIS_NOTIFY_NTFY", get("GENESIS_NOTIFY_NTFY")),
        actions_url=_url("GENESIS_NOTIFY_ACTIONS_URL", get("GENESIS_NOTIFY_ACTIONS_URL")),
        command=_command("GENESIS_NOTIFY_CMD", get("GENESIS_NOTIFY_CMD")),
        timeout=_seconds("GENESIS_NOTIFY_TIMEOUT_SECONDS", settings, MAX_NOTIFY_TIMEOUT),
        retries=_retries(get("GENESIS_NOTIFY_RETRIES") or DEFAULTS["GENESIS_NOTIFY_RETRIES"]),
        triage_command=_command("GENESIS_TRIAGE_CMD", get("GENESIS_TRIAGE_CMD")),
        triage_timeout=_seconds("GENESIS_TRIAGE_TIMEOUT_SECONDS", settings, MAX_TRIAGE_TIMEOUT),
        **{f"{name}_min": _level(f"{PREFIX}{key}{MIN_SUFFIX}", get(f"{PREFIX}{key}{MIN_SUFFIX}"))
           for name, key in CHANNEL_KEYS})


def at_least(severity: str, minimum: str) -> bool:
    """Whether severity is minimum or above (an unknown severity counts as the highest: told)."""
    rank = {level: n for n, level in enumerate(LEVELS)}
    return rank.get(severity, len(LEVELS)) >= rank.get(minimum, 0)


def misspelt(env: Mapping[str, str]) -> str | None:
    """Why the environment is refused: a GENESIS_NOTIFY_ variable that is no alert setting,
    with the one it most likely meant. A misspelt channel is a night without alerts, so it is
    refused where another misspelt knob is only warned about."""
    names = [name for name, _, _ in KNOBS if name.startswith(PREFIX)]
    tails = {name[len(PREFIX):]: name for name in names}
    for key in sorted(env):
        if key.startswith(PREFIX) and key not in names:
            near = difflib.get_close_matches(key[len(PREFIX):], list(tails), n=1, cutoff=CLOSE)
            return refusal(key, tails[near[0]] if near else None)
    return None


def refusal(key: str, meant: str | None) -> str:
    """The words refusing KEY, a variable of the environment that is no alert setting."""
    said = f"did you mean {meant}?" if meant else \
        (f"the channels are {', '.join(PREFIX + k for _, k in CHANNEL_KEYS)} (each with a {MIN_SUFFIX[1:]}), "
         f"with {PREFIX}TIMEOUT_SECONDS and {PREFIX}RETRIES.")
    return (f"{key} is set in the environment but is not an alert setting; {said} A misspelt channel would "
            f"mean a night without alerts: rename or unset it")


def _level(key: str, raw: str) -> str:
    value = raw.lower() or DEFAULTS[key]
    if value not in LEVELS:
        raise ValueError(f"{key}={raw!r}: expected {', '.join(LEVELS[:-1])} or {LEVELS[-1]}")
    return value


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


def _seconds(key: str, settings: Mapping[str, str], high: float) -> float:
    """A duration knob (unset or empty: its default) in seconds, above 0 and at most high."""
    raw = str(settings.get(key) or "").strip() or DEFAULTS[key]
    value = duration_seconds(key, raw, unit_of(key))
    if not 0 < value <= high:
        raise ValueError(f"{key}={raw!r}: expected a duration above 0, at most {high:g}s")
    return value


def _retries(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"GENESIS_NOTIFY_RETRIES={raw!r}: expected a whole number from 0 to {MAX_RETRIES}") from None
    if not 0 <= value <= MAX_RETRIES:
        raise ValueError(f"GENESIS_NOTIFY_RETRIES={raw!r}: expected a whole number from 0 to {MAX_RETRIES}")
    return value

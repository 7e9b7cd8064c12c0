"""Command settings need the user's word: a command Genesis runs that genesis.conf names is run
only once the user approved that exact value.

genesis.conf lives in the project, which the agent can write: a `GENESIS_NOTIFY_CMD` it
appends there would otherwise run at the next start, outside the agent's supervision. So
every command-valued setting taken from the file (`*_CMD`, `when:` triggers and done
rules, a fleet's escalation naming an agent command) is fingerprinted, and the fingerprints
the user approved are kept in Genesis's private state. Values from the environment and
`--set` are the user's own word and need no approval. With no record at all (Genesis never
started here) the file's commands are trusted on first use, and the start says so.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Protocol

from genesis.store.atomicio import CorruptFile, quarantine, read_json, write_json

__all__ = ["TRUST_FILE", "CommandSetting", "Verdict", "command_settings", "is_command_key", "judge", "approve",
           "trust_file"]

TRUST_FILE = "trusted-commands.json"
FILE_SOURCE = "file"      # config.Setting.source of a value read from genesis.conf
ESCALATION_STRATEGIES = ("fallback", "longer")  # GENESIS_FLEET_ESCALATION's entries that name no command
SHOWN_CHARS = 400         # a value longer than this is shown cut, with its length


class _Setting(Protocol):
    value: str
    source: str


@dataclass(frozen=True)
class CommandSetting:
    key: str
    value: str
    state: str = ""       # "new" | "changed" | "" (approved)

    @property
    def digest(self) -> str:
        return hashlib.sha256(f"{self.key}\0{self.value}".encode("utf-8", "surrogateescape")).hexdigest()

    def shown(self) -> str:
        value = self.value if len(self.value) <= SHOWN_CHARS else \
            f"{self.value[:SHOWN_CHARS]}... ({len(self.value)} characters)"
        return f"{self.key}={value!r}"


@dataclass(frozen=True)
class Verdict:
    commands: tuple[CommandSetting, ...]     # every command setting from genesis.conf
    unapproved: tuple[CommandSetting, ...]   # those not approved (new or changed)
    first_use: bool                          # no record existed: trusted on first use
    kept_aside: Path | None = None           # an unreadable record, moved aside


def trust_file(state_dir: Path) -> Path:
    return Path(state_dir) / TRUST_FILE


def is_command_key(key: str, value: str) -> bool:
    """Whether this setting names a command Genesis would run."""
    if key.endswith("_CMD"):
        return True
    if key == "GENESIS_FLEET_ESCALATION":  # an entry other than these is an agent command line a child runs
        return any(e.strip() not in ESCALATION_STRATEGIES for e in value.split("|") if e.strip())
    if key == "GENESIS_DONE_WHEN" or (key.startswith("PHASE_") and key.endswith("_TRIGGER")):
        return "when:" in value
    return False


def command_settings(settings: Mapping[str, _Setting]) -> tuple[CommandSetting, ...]:
    """The command-valued settings whose effective value comes from genesis.conf."""
    return tuple(CommandSetting(key, s.value) for key, s in sorted(settings.items())
                 if s.source == FILE_SOURCE and s.value.strip() and is_command_key(key, s.value))


def _approved(path: Path, now: float) -> tuple[dict[str, str] | None, Path | None]:
    """The approved fingerprints by key; None when no record exists. A record that cannot be
    read is kept aside and counts as one that approves nothing (never as no record)."""
    try:
        data = read_json(path)
    except (CorruptFile, OSError):
        try:
            return {}, quarantine(path, now)
        except OSError:
            return {}, None
    if data is None:
        return None, None
    approved = data.get("approved") if isinstance(data, dict) else None
    if not isinstance(approved, dict):
        return {}, None
    return {str(k): str(v) for k, v in approved.items()}, None


def judge(settings: Mapping[str, _Setting], state_dir: Path, now: float | None = None) -> Verdict:
    """Which of genesis.conf's commands the user has not approved."""
    now = time.time() if now is None else now
    approved, kept = _approved(trust_file(state_dir), now)
    commands = command_settings(settings)
    if approved is None:
        return Verdict(commands, (), first_use=True, kept_aside=kept)
    commands = tuple(c if approved.get(c.key) == c.digest else
                     CommandSetting(c.key, c.value, "changed" if c.key in approved else "new") for c in commands)
    return Verdict(commands, tuple(c for c in commands if c.state), first_use=False, kept_aside=kept)


def approve(commands: tuple[CommandSetting, ...], state_dir: Path, now: float | None = None) -> Path:
    """Record these values as the user's word; the record holds exactly these (a key
    approved before and now gone from genesis.conf needs approval again)."""
    now = time.time() if now is None else now
    path = trust_file(state_dir)
    write_json(path, {"approved": {c.key: c.digest for c in commands},
                      "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))})
    return path

"""Codex's heartbeat hook: `$CODEX_HOME/hooks.json` (default ~/.codex), and its trust.

Codex runs a user's hook only once it is trusted, and skips an untrusted one without a word.
Its `/hooks` review records the trust in `$CODEX_HOME/config.toml`, one table per hook:

    [hooks.state."/home/me/.codex/hooks.json:pre_tool_use:0:0"]
    trusted_hash = "sha256:<hex>"

The key is the hooks file's path, the event in snake case, and the positions of the group
and of the handler in it; the hash is SHA-256 over the hook's normalized definition (event,
matcher, command, timeout) as compact JSON with sorted keys. A changed hook no longer
matches its hash and is skipped again until reviewed. `genesis hook install --agent codex`
records the same trust for the entries it writes (and only for those), so that the hook
runs without `--dangerously-bypass-hook-trust`; uninstall takes that trust away again.
config.toml is the user's: only our tables change, the rest of its text stays as it was,
and an edit that would not read back exactly as intended is refused, the file untouched.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import time
import tomllib
from pathlib import Path
from typing import Any, Mapping

from genesis.agents.hook.replace import UNTOUCHED, SettingsError, read_owned, write_owned
from genesis.agents.hook.settingsfile import Change, read_settings
from genesis.agents.hook.spec import SCRIPT_NAME, GroupedHooks, home_dir

__all__ = ["CodexHooks", "CODEX_HOOKS", "config_dir", "trust_entries", "hook_hash", "hook_key", "trusted",
           "set_trust", "drop_trust", "CONFIG_FILE"]

CONFIG_FILE = "config.toml"
HOOK_EVENTS = ("PreToolUse", "PostToolUse", "SessionStart")  # PostToolUse also follows a failed command
DEFAULT_TIMEOUT = 600                                       # Codex's timeout for a hook that names none
NO_MATCHER = frozenset({"UserPromptSubmit", "Stop", "Interrupt"})  # events whose matcher Codex ignores
SHORT_TIMEOUT = frozenset({"SessionEnd", "Interrupt"})            # events whose timeout it clamps to 1-3 s


def config_dir(env: Mapping[str, str]) -> Path:
    """$CODEX_HOME, else ~/.codex."""
    return Path(os.path.abspath(env["CODEX_HOME"])) if env.get("CODEX_HOME") else home_dir(env) / ".codex"


def snake(event: str) -> str:
    """PreToolUse -> pre_tool_use, as Codex writes an event in a trust key."""
    return re.sub(r"(?<!^)([A-Z])", r"_\1", event).lower()


def hook_key(source: Path | str, event: str, group: int, handler: int) -> str:
    return f"{source}:{snake(event)}:{group}:{handler}"


def hook_hash(event: str, matcher: str | None, handler: Mapping[str, Any]) -> str:
    """The hash Codex records when a person trusts this command hook."""
    timeout = handler.get("timeout", handler.get("timeoutSec"))
    timeout = timeout if isinstance(timeout, int) and not isinstance(timeout, bool) else None
    if event in SHORT_TIMEOUT:
        timeout = min(max(timeout or 1, 1), 3)
    else:
        timeout = max(DEFAULT_TIMEOUT if timeout is None else timeout, 1)
    normalized: dict[str, Any] = {"type": "command", "command": handler.get("command"), "timeout": timeout,
                                  "async": handler.get("async") is True}
    if isinstance(handler.get("statusMessage"), str):
        normalized["statusMessage"] = handler["statusMessage"]
    identity: dict[str, Any] = {"event_name": snake(event), "hooks": [normalized]}
    if matcher is not None and event not in NO_MATCHER:
        identity["matcher"] = matcher
    canonical = json.dumps(identity, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def trust_entries(path: Path, events: tuple[str, ...] | None = None) -> dict[str, str]:
    """{trust key: hash} of our handlers in the hooks file (of `events`, when given); {} when
    it has none. Codex keys a linked $CODEX_HOME by its resolved path (measured), the default
    ~/.codex as it is spelled: a file reached through a link gets a key under each spelling."""
    data = read_settings(path) or {}
    hooks = data.get("hooks") if isinstance(data.get("hooks"), dict) else {}
    sources = [str(path)]
    real = os.path.realpath(path)
    if real != str(path):
        sources.append(real)
    found: dict[str, str] = {}
    for event, groups in hooks.items():
        if events is not None and event not in events or not isinstance(groups, list):
            continue
        for g, group in enumerate(groups):
            handlers = group.get("hooks") if isinstance(group, dict) else None
            matcher = group.get("matcher") if isinstance(group, dict) else None
            matcher = matcher if isinstance(matcher, str) else None
            for h, handler in enumerate(handlers if isinstance(handlers, list) else ()):
                if isinstance(handler, dict) and SCRIPT_NAME in str(handler.get("command", "")):
                    for source in sources:
                        found[hook_key(source, event, g, h)] = hook_hash(event, matcher, handler)
    return found


# --- config.toml ------------------------------------------------------------------------

def _load(config: Path) -> tuple[str, dict]:
    """The file's text ("" when absent) and its data; SettingsError when it is not TOML we can edit."""
    text = read_owned(config) or ""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"{config} is not valid TOML ({exc}); fix it by hand ({UNTOUCHED})") from None
    hooks = data.get("hooks", {})
    if not isinstance(hooks, dict) or not isinstance(hooks.get("state", {}), dict):
        raise SettingsError(f"{config}: \"hooks\" or \"hooks.state\" is not a table; fix it by hand ({UNTOUCHED})")
    return text, data


def _states(data: dict) -> dict:
    return data.get("hooks", {}).get("state", {})


def trusted(config: Path, entries: Mapping[str, str]) -> list[str]:
    """The keys among `entries` that config.toml does not trust with their hash."""
    try:
        _, data = _load(config)
    except SettingsError:
        return list(entries)
    states = _states(data)
    return [key for key, digest in entries.items()
            if not (isinstance(states.get(key), dict) and states[key].get("trusted_hash") == digest)]


def _header(key: str) -> re.Pattern[str]:
    """The line `[hooks.state."KEY"]` (as Codex and Genesis write it), spaces and a comment allowed."""
    return re.compile(r"^[ \t]*\[[ \t]*hooks[ \t]*\.[ \t]*state[ \t]*\.[ \t]*" + re.escape(json.dumps(key))
                      + r"[ \t]*\][ \t]*(?:#.*)?$", re.MULTILINE)


def _section(text: str, key: str) -> tuple[int, int] | None:
    """Where the table of `key` is in the text: its header's start and its end (the next table)."""
    m = _header(key).search(text)
    if m is None:
        return None
    following = re.compile(r"^[ \t]*\[", re.MULTILINE).search(text, m.end())
    return m.start(), following.start() if following else len(text)


HASH_LINE = re.compile(r"^[ \t]*trusted_hash[ \t]*=.*(?:\n|$)", re.MULTILINE)


def _pruned(value: Any) -> Any:
    """A table without its empty tables: how they read makes no difference to Codex."""
    if not isinstance(value, dict):
        return value
    kept = {k: _pruned(v) for k, v in value.items()}
    return {k: v for k, v in kept.items() if v != {}}


def _save(config: Path, old: str, new: str, expected: dict, now: float | None, dry: bool = False) -> Path | None:
    """Write `new` when it reads back as `expected` (dry: only see that it would); else refuse,
    the file untouched."""
    try:
        got = tomllib.loads(new)
    except tomllib.TOMLDecodeError:
        got = None
    if got is None or _pruned(got) != _pruned(expected):
        raise SettingsError(f"{config}: the hook's trust could not be changed without changing other "
                            f"settings ({UNTOUCHED}); trust the hook in codex's /hooks instead")
    if new == old or dry:
        return None
    return write_owned(config, new, now)[1]


def set_trust(config: Path, entries: Mapping[str, str], now: float | None = None,
              dry: bool = False) -> tuple[list[str], Path | None]:
    """Record each entry's trust as Codex's review does: (the keys written, the backup); dry:
    only check that it can be done."""
    text, data = _load(config)
    expected = copy.deepcopy(data)
    states = expected.setdefault("hooks", {}).setdefault("state", {})
    new, written = text, []
    for key, digest in entries.items():
        state = states.get(key)
        if isinstance(state, dict) and state.get("trusted_hash") == digest:
            continue
        line = f"trusted_hash = {json.dumps(digest)}\n"
        where = _section(new, key)
        if state is None or where is None:
            new += ("" if not new or new.endswith("\n") else "\n") + ("\n" if new else "")
            new += f"[hooks.state.{json.dumps(key)}]\n" + line
        else:
            start, end = where
            body = new[start:end]
            cut = body.find("\n") + 1 or len(body)
            head, rest = body[:cut], body[cut:]
            if HASH_LINE.search(rest):
                rest = HASH_LINE.sub(line, rest, count=1)
            else:
                head, rest = (head if head.endswith("\n") else head + "\n"), line + rest
            new = new[:start] + head + rest + new[end:]
        states[key] = {**(state if isinstance(state, dict) else {}), "trusted_hash": digest}
        written.append(key)
    return written, _save(config, text, new, expected, now, dry)


def drop_trust(config: Path, entries: Mapping[str, str], now: float | None = None) -> tuple[list[str], Path | None]:
    """Take away the trust recorded for these entries (only where it is their hash)."""
    if not (config.exists() or config.is_symlink()):
        return [], None
    text, data = _load(config)
    expected = copy.deepcopy(data)
    states = _states(expected)
    new, dropped = text, []
    for key, digest in entries.items():
        state = states.get(key)
        where = _section(new, key)
        if not (isinstance(state, dict) and state.get("trusted_hash") == digest) or where is None:
            continue
        start, end = where
        body = new[start:end]
        rest = [line for line in body.splitlines()[1:] if line.strip() and not line.strip().startswith("#")]
        if len(rest) == 1 and HASH_LINE.match(rest[0]):
            before = new[:start]
            if before.endswith("\n\n"):
                before = before[:-1]   # the blank line set before the table
            new = before + new[end:]
        else:
            new = new[:start] + HASH_LINE.sub("", body, count=1) + new[end:]
        del state["trusted_hash"]
        dropped.append(key)
    return dropped, _save(config, text, new, expected, now)


# --- the hook -----------------------------------------------------------------------------

class CodexHooks(GroupedHooks):
    """Claude Code's layout in hooks.json, with Codex's trust recorded in config.toml."""

    def config(self, path: Path) -> Path:
        return path.with_name(CONFIG_FILE)

    def install(self, path: Path, command: str, state_dir: Path, now: float | None = None) -> Change:
        now = time.time() if now is None else now
        config = self.config(path)
        # A config.toml that cannot take the trust refuses before hooks.json changes.
        set_trust(config, {hook_key(path, "PreToolUse", 1 << 20, 0): "sha256:probe"}, now, dry=True)
        change = super().install(path, command, state_dir, now)
        set_trust(config, trust_entries(path, self.events), now)
        return change

    def uninstall(self, path: Path, state_dir: Path, now: float | None = None) -> Change:
        now = time.time() if now is None else now
        entries = trust_entries(path) if path.exists() else {}
        change = super().uninstall(path, state_dir, now)
        if entries:
            drop_trust(self.config(path), entries, now)
        return change

    def untrusted(self, path: Path) -> list[str]:
        """Keys of our installed handlers that Codex would skip as untrusted."""
        try:
            entries = trust_entries(path, self.events)
        except SettingsError:
            return []
        real = os.path.realpath(path)
        # One spelling of the path trusted is enough: Codex uses one of them.
        by_slot: dict[str, list[str]] = {}
        for key in entries:
            slot = key[len(real):] if key.startswith(real + ":") else key[len(str(path)):]
            by_slot.setdefault(slot, []).append(key)
        missing = set(trusted(self.config(path), entries))
        return sorted(keys[0] for keys in by_slot.values() if all(k in missing for k in keys))

    def payload(self, session: str, project: Path) -> bytes:
        """A PostToolUse as Codex sends it after a shell command."""
        return json.dumps({"session_id": session, "turn_id": session, "transcript_path": "",
                           "cwd": str(project), "hook_event_name": self.post_event, "model": "",
                           "permission_mode": "bypassPermissions", "tool_name": "Bash",
                           "tool_input": {"command": "true"}, "tool_response": "",
                           "tool_use_id": "genesis-self-test"}).encode()


CODEX_HOOKS = CodexHooks("codex", config_dir, "hooks.json", HOOK_EVENTS, "PostToolUse")

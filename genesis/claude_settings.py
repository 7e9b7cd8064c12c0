"""Installing the heartbeat hook into Claude Code's settings, and nothing else."""

from __future__ import annotations

import copy
import os
import shlex
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from .atomicio import CorruptFile, read_json, write_json
from .layout import private_dir

__all__ = ["SettingsError", "settings_path", "hook_command", "install", "uninstall", "installed_events",
           "HOOK_EVENTS", "ENV_DEFAULTS"]

HOOK_EVENTS = ("PreToolUse", "PostToolUse", "PostToolUseFailure", "SessionStart")
TOOL_EVENTS = {"PreToolUse", "PostToolUse", "PostToolUseFailure"}
ENV_DEFAULTS = {"BASH_DEFAULT_TIMEOUT_MS": "1800000", "BASH_MAX_TIMEOUT_MS": "7200000"}
HOOK_TIMEOUT = 10
SCRIPT_NAME = "genesis-heartbeat.sh"


class SettingsError(ValueError):
    """The settings file cannot be changed safely; it was left untouched."""


@dataclass(frozen=True)
class Change:
    path: Path
    added_events: tuple[str, ...]
    added_env: tuple[str, ...]
    backup: Path | None


def settings_path(scope: str, project: Path, home: Path | None = None) -> Path:
    home = Path(home or os.path.expanduser("~"))
    return {"user": home / ".claude" / "settings.json",
            "project": Path(project) / ".claude" / "settings.json",
            "local": Path(project) / ".claude" / "settings.local.json"}[scope]


def hook_command(script: Path) -> str:
    """Run through bash directly: it saves an exec of /usr/bin/env on every tool call."""
    return f"bash {shlex.quote(str(script))}"


def _load(path: Path) -> dict:
    try:
        data = read_json(path)
    except CorruptFile as exc:
        raise SettingsError(f"{path} {exc.reason}; fix it by hand (it was left untouched)") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SettingsError(f"{path} is not a JSON object; fix it by hand (it was left untouched)")
    for key, kind in (("hooks", dict), ("env", dict)):
        if key in data and not isinstance(data[key], kind):
            raise SettingsError(f"{path}: \"{key}\" is not an object; fix it by hand (it was left untouched)")
    for event, groups in data.get("hooks", {}).items():
        if not isinstance(groups, list) or not all(isinstance(g, dict) for g in groups):
            raise SettingsError(f"{path}: hooks.{event} is not a list of objects; "
                                f"fix it by hand (it was left untouched)")
    return data


def _is_ours(hook: object) -> bool:
    return isinstance(hook, dict) and SCRIPT_NAME in str(hook.get("command", ""))


def _without_ours(groups: list) -> list:
    kept = []
    for group in groups:
        hooks = group.get("hooks")
        if isinstance(hooks, list) and any(_is_ours(h) for h in hooks):
            rest = [h for h in hooks if not _is_ours(h)]
            if not rest:
                continue
            group = {**group, "hooks": rest}
        kept.append(group)
    return kept


def installed_events(path: Path, command: str | None = None) -> list[str]:
    """Events whose hooks include ours (with exactly `command`, if given)."""
    try:
        data = _load(path)
    except SettingsError:
        return []
    found = []
    for event, groups in data.get("hooks", {}).items():
        for group in groups:
            for hook in group.get("hooks", []) if isinstance(group.get("hooks"), list) else []:
                if _is_ours(hook) and (command is None or hook.get("command") == command):
                    found.append(event)
    return sorted(set(found))


def _write(path: Path, old: dict | None, new: dict, now: float) -> Path | None:
    path.parent.mkdir(parents=True, exist_ok=True)
    backup = None
    if old is not None and path.exists():
        backup = path.with_name(f"{path.name}.bak-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(now))}")
        shutil.copy2(path, backup)
    write_json(path, new)
    return backup


def _ledger(state_dir: Path) -> Path:
    return state_dir / "hook-installs.json"


def _read_ledger(state_dir: Path) -> dict:
    try:
        data = read_json(_ledger(state_dir))
    except CorruptFile:
        return {}
    return data if isinstance(data, dict) else {}


def install(path: Path, command: str, state_dir: Path, now: float | None = None) -> Change:
    """Merge our hook and env defaults into the settings file; a no-op when already there."""
    now = time.time() if now is None else now
    existed = path.exists()
    data = _load(path)
    new = copy.deepcopy(data)
    hooks = new.setdefault("hooks", {})
    added_events = []
    for event in HOOK_EVENTS:
        groups = hooks.get(event, [])
        if any(h.get("command") == command for g in groups for h in g.get("hooks", []) if _is_ours(h)):
            continue
        entry = {"type": "command", "command": command, "timeout": HOOK_TIMEOUT}
        group = {"matcher": "*", "hooks": [entry]} if event in TOOL_EVENTS else {"hooks": [entry]}
        hooks[event] = _without_ours(groups) + [group]
        added_events.append(event)
    env = new.setdefault("env", {})
    added_env = [k for k in ENV_DEFAULTS if k not in env]
    for key in added_env:
        env[key] = ENV_DEFAULTS[key]
    if new == data:
        return Change(path, (), (), None)
    backup = _write(path, data if existed else None, new, now)
    if added_env:
        ledger = _read_ledger(state_dir)
        entry = ledger.setdefault(str(path.resolve()), {"env": []})
        entry["env"] = sorted(set(entry.get("env", [])) | set(added_env))
        write_json(_ledger(private_dir(state_dir)), ledger)
    return Change(path, tuple(added_events), tuple(added_env), backup)


def uninstall(path: Path, state_dir: Path, now: float | None = None) -> Change:
    """Remove our hook entries, and the env entries we added (if still at our values)."""
    now = time.time() if now is None else now
    if not path.exists():
        return Change(path, (), (), None)
    data = _load(path)
    new = copy.deepcopy(data)
    removed_events = []
    for event, groups in list(new.get("hooks", {}).items()):
        kept = _without_ours(groups)
        if kept != groups:
            removed_events.append(event)
            if kept:
                new["hooks"][event] = kept
            else:
                del new["hooks"][event]
    if "hooks" in new and not new["hooks"]:
        del new["hooks"]
    ledger = _read_ledger(state_dir)
    ours = ledger.get(str(path.resolve()), {}).get("env", [])
    removed_env = [k for k in ours if new.get("env", {}).get(k) == ENV_DEFAULTS.get(k)]
    for key in removed_env:
        del new["env"][key]
    if "env" in new and not new["env"]:
        del new["env"]
    if new == data:
        return Change(path, (), (), None)
    backup = _write(path, data, new, now)
    if str(path.resolve()) in ledger:
        del ledger[str(path.resolve())]
        write_json(_ledger(private_dir(state_dir)), ledger)
    return Change(path, tuple(removed_events), tuple(removed_env), backup)

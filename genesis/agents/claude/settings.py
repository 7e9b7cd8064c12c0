"""Where Claude Code's settings live, and the heartbeat hook's place in them.

The hook goes into `hooks` for every tool event (with matcher "*") and SessionStart, and
two Bash timeout defaults go into `env`; the file is edited the careful way of
`agents.hook.settingsfile` (only what changes, mode and owner kept, backed up, atomic).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Mapping

from genesis.agents.hook.replace import SettingsError
from genesis.agents.hook.settingsfile import Change, read_settings
from genesis.agents.hook.spec import SCRIPT_NAME, GroupedHooks, HookSpec

__all__ = ["SettingsError", "Change", "settings_path", "user_settings_dir", "claude_paths", "managed_settings_dir",
           "hook_command", "install", "uninstall", "installed_events", "read_settings", "is_ours", "HOOK_EVENTS",
           "ENV_DEFAULTS", "SCRIPT_NAME", "SCOPES", "CLAUDE_HOOKS"]

HOOK_EVENTS = ("PreToolUse", "PostToolUse", "PostToolUseFailure", "SessionStart")
TOOL_EVENTS = frozenset({"PreToolUse", "PostToolUse", "PostToolUseFailure"})
ENV_DEFAULTS = {"BASH_DEFAULT_TIMEOUT_MS": "1800000", "BASH_MAX_TIMEOUT_MS": "7200000"}
SCOPES = ("user", "project", "local")


def user_settings_dir(env: Mapping[str, str] | None = None, home: Path | None = None) -> Path:
    """Claude Code's own directory: $CLAUDE_CONFIG_DIR when set (it replaces ~/.claude), else ~/.claude."""
    env = os.environ if env is None else env
    if env.get("CLAUDE_CONFIG_DIR"):
        return Path(env["CLAUDE_CONFIG_DIR"])
    return Path(home or env.get("HOME") or os.path.expanduser("~")) / ".claude"


def claude_paths(env: Mapping[str, str]) -> tuple[Path, ...]:
    """Claude Code's own places under HOME: its folder, and its state file (~/.claude.json, which
    holds the login of an API-key or OAuth account) beside it, or inside $CLAUDE_CONFIG_DIR."""
    folder = user_settings_dir(env)
    state = folder / ".claude.json" if env.get("CLAUDE_CONFIG_DIR") else folder.parent / ".claude.json"
    return (folder, state)


def managed_settings_dir() -> Path:
    """Where an administrator's managed-settings.json (and managed-settings.d/) live."""
    return Path("/Library/Application Support/ClaudeCode" if sys.platform == "darwin" else "/etc/claude-code")


def settings_path(scope: str, project: Path, home: Path | None = None,
                  env: Mapping[str, str] | None = None) -> Path:
    return {"user": user_settings_dir(env, home) / "settings.json",
            "project": Path(project) / ".claude" / "settings.json",
            "local": Path(project) / ".claude" / "settings.local.json"}[scope]


CLAUDE_HOOKS: HookSpec = GroupedHooks("claude", user_settings_dir, "settings.json", HOOK_EVENTS, "PostToolUse",
                                      matcher="*", matched=TOOL_EVENTS, env_defaults=ENV_DEFAULTS,
                                      link_hint="use --scope project or --scope local instead, or replace "
                                                "the link with a file")


def hook_command(script: Path) -> str:
    return CLAUDE_HOOKS.command_for(script)


def is_ours(hook: object) -> bool:
    return isinstance(hook, dict) and SCRIPT_NAME in str(hook.get("command", ""))


def installed_events(path: Path, command: str | None = None) -> list[str]:
    return CLAUDE_HOOKS.installed_events(path, command)


def install(path: Path, command: str, state_dir: Path, now: float | None = None) -> Change:
    return CLAUDE_HOOKS.install(path, command, state_dir, now)


def uninstall(path: Path, state_dir: Path, now: float | None = None) -> Change:
    return CLAUDE_HOOKS.uninstall(path, state_dir, now)

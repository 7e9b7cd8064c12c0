"""Copilot CLI's heartbeat hook: a file of ours in its hooks folder.

Copilot CLI reads every `*.json` in `~/.copilot/hooks/` (`$COPILOT_HOME/hooks/` when set),
each `{"version": 1, "hooks": {EVENT: [{"type": "command", "bash": C, "timeoutSec": N}]}}`
with flat lists of entries, and runs them in prompt mode (`-p`) with no trust step. Ours
goes in `genesis-heartbeat.json`. With camelCase event names its stdin is camelCase and
names no event (`{"sessionId", "timestamp", "cwd", "toolName", "toolArgs", ...}`), so each
event's command passes it: `bash '<script>' --event preToolUse || true`. (Under PascalCase
names, PreToolUse ..., it sends Claude Code's payload instead, tool names too: Bash, Read.)

A preToolUse hook that fails denies the tool call ("Denied by preToolUse hook ... (hook
errored)"): the script always exits 0, and `|| true` keeps a missing script (Genesis moved
or removed, the hook left behind) from denying every tool call of every Copilot session;
the self-test before each phase still finds such a hook broken. A failing shell command is
still a successful tool call (postToolUse); postToolUseFailure is a tool that could not run
(bad arguments, unknown tool); a tool call denied for its path fires preToolUse only.
"""

from __future__ import annotations

import copy
import json
import os
import time
from pathlib import Path
from typing import Mapping

from genesis.agents.hook.jsonedit import same
from genesis.agents.hook.replace import SettingsError
from genesis.agents.hook.settingsfile import Change, open_for_edit, read_settings, save
from genesis.agents.hook.spec import HOOK_TIMEOUT, SCRIPT_NAME, HookSpec, home_dir
from genesis.store.layout import private_dir

__all__ = ["CopilotHooks", "COPILOT_HOOKS", "config_dir", "FILE_NAME", "HOOK_EVENTS"]

HOOK_EVENTS = ("preToolUse", "postToolUse", "postToolUseFailure")
FILE_NAME = "genesis-heartbeat.json"
VERSION = 1


def config_dir(env: Mapping[str, str] | None = None) -> Path:
    """Copilot CLI's own directory: $COPILOT_HOME when set (a leading ~ is the home), else ~/.copilot."""
    env = os.environ if env is None else env
    value = env.get("COPILOT_HOME", "")
    if value == "~" or value.startswith("~/"):
        return home_dir(env) / value[2:]
    return Path(value).absolute() if value else home_dir(env) / ".copilot"


def is_ours(entry: object) -> bool:
    return isinstance(entry, dict) and any(SCRIPT_NAME in str(entry.get(key, "")) for key in ("bash", "command"))


class CopilotHooks(HookSpec):
    cli = "copilot"
    events = HOOK_EVENTS
    post_event = "postToolUse"
    trust = ""

    def path(self, env: Mapping[str, str] | None = None) -> Path:
        return config_dir(env) / "hooks" / FILE_NAME

    @staticmethod
    def for_event(command: str, event: str) -> str:
        """The command as installed for one event: the payload does not name it; it fails open."""
        return f"{command} --event {event} || true"

    def entry(self, command: str, event: str) -> dict:
        return {"type": "command", "bash": self.for_event(command, event), "timeoutSec": HOOK_TIMEOUT}

    def install(self, path: Path, command: str, state_dir: Path, now: float | None = None) -> Change:
        """Add our entry to each event's list (replacing an older one of ours); a no-op when there."""
        now = time.time() if now is None else now
        target, old_text, st, data = open_for_edit(path, ("hooks",))
        new = copy.deepcopy(data)
        new.setdefault("version", VERSION)
        hooks = new.setdefault("hooks", {})
        added = []
        for event in self.events:
            entries = hooks.get(event, [])
            if any(is_ours(e) and e.get("bash") == self.for_event(command, event) for e in entries):
                continue
            hooks[event] = [e for e in entries if not is_ours(e)] + [self.entry(command, event)]
            added.append(event)
        if same(new, data) and old_text is not None:
            return Change(path, (), (), None, target)
        private_dir(state_dir)  # refuse an unsafe state directory before the file changes
        backup = save(path, target, old_text, st, data, new, now)
        return Change(path, tuple(added), (), backup, target)

    def uninstall(self, path: Path, state_dir: Path, now: float | None = None) -> Change:
        """Take our entries out; the file goes too when nothing but ours was in it."""
        now = time.time() if now is None else now
        if not (path.exists() or path.is_symlink()):
            return Change(path, (), (), None)
        target, old_text, st, data = open_for_edit(path, ("hooks",))
        new = copy.deepcopy(data)
        hooks = new.get("hooks", {})
        removed = []
        for event, entries in list(hooks.items()):
            kept = [e for e in entries if not is_ours(e)]
            if kept != entries:
                removed.append(event)
                if kept:
                    hooks[event] = kept
                else:
                    del hooks[event]
        if not removed:
            return Change(path, (), (), None, target)
        if not new.get("hooks") and set(new) <= {"version", "hooks"} and target == path:
            os.unlink(path)  # wholly ours: nothing of the user's to keep
            return Change(path, tuple(removed), (), None, target)
        backup = save(path, target, old_text, st, data, new, now)
        return Change(path, tuple(removed), (), backup, target)

    def _entries(self, path: Path) -> dict:
        try:
            data = read_settings(path) or {}
        except SettingsError:
            return {}
        hooks = data.get("hooks")
        return hooks if isinstance(hooks, dict) else {}

    def installed_events(self, path: Path, command: str | None = None) -> list[str]:
        found = []
        for event, entries in self._entries(path).items():
            for entry in entries if isinstance(entries, list) else ():
                if is_ours(entry) and (command is None or entry.get("bash") == self.for_event(command, event)):
                    found.append(event)
        return sorted(set(found))

    def installed_command(self, path: Path) -> str | None:
        entries = self._entries(path).get(self.post_event)
        for entry in entries if isinstance(entries, list) else ():
            if is_ours(entry) and isinstance(entry.get("bash"), str):
                return entry["bash"]
        return None

    def payload(self, session: str, project: Path) -> bytes:
        """postToolUse's stdin as Copilot CLI 1.0.102 sends it (camelCase, no event name)."""
        return json.dumps({"sessionId": session, "timestamp": int(time.time() * 1000), "cwd": str(project),
                           "toolName": "genesis-self-test", "toolArgs": {},
                           "toolResult": {"resultType": "success", "textResultForLlm": ""}}).encode()


COPILOT_HOOKS = CopilotHooks()

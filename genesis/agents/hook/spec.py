"""How each CLI's heartbeat hook is installed, found, and played for the self-test.

Every CLI runs the same script (genesis/data/genesis-heartbeat.sh) on its tool events; what
differs is the file the hook goes in and its layout. `GroupedHooks` is the layout Claude
Code made common, `{"hooks": {EVENT: [{"matcher": M, "hooks": [{"type": "command",
"command": C, "timeout": 10}]}]}}`, used by Claude Code, Qwen Code, Gemini CLI and Codex;
other layouts subclass `HookSpec` with the primitives of `settingsfile` and `replace`.
"""

from __future__ import annotations

import copy
import json
import os
import shlex
import time
from pathlib import Path
from typing import Callable, Mapping

from genesis.agents.hook.jsonedit import same
from genesis.agents.hook.record import forget, install_record, remember
from genesis.agents.hook.replace import SettingsError
from genesis.agents.hook.settingsfile import Change, open_for_edit, read_settings, save
from genesis.store.layout import private_dir

__all__ = ["HookSpec", "GroupedHooks", "SCRIPT_NAME", "HOOK_TIMEOUT", "home_dir", "self_test_session"]

SCRIPT_NAME = "genesis-heartbeat.sh"
HOOK_TIMEOUT = 10


def home_dir(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    return Path(env.get("HOME") or os.path.expanduser("~"))


def self_test_session(token: str) -> str:
    """The session id the self-test's payload carries: the watcher ignores such beats."""
    return f"genesis-self-test.{token}"


class HookSpec:
    """One CLI's heartbeat hook: where it goes, how it is merged in and out, how it is run."""

    cli = ""
    events: tuple[str, ...] = ()   # the CLI's event names the hook is installed for
    post_event = ""                # the event the self-test plays (a tool call that ended)
    trust = ""                     # what the user must still do for the CLI to run it ("" nothing)

    def path(self, env: Mapping[str, str] | None = None) -> Path:
        """The user-level file the hook goes in."""
        raise NotImplementedError

    def command_for(self, script: Path) -> str:
        """Run through bash directly: it saves an exec of /usr/bin/env on every tool call."""
        return f"bash {shlex.quote(str(script))}"

    def install(self, path: Path, command: str, state_dir: Path, now: float | None = None) -> Change:
        raise NotImplementedError

    def uninstall(self, path: Path, state_dir: Path, now: float | None = None) -> Change:
        raise NotImplementedError

    def installed_events(self, path: Path, command: str | None = None) -> list[str]:
        """Events whose hooks include ours (with exactly `command`, if given); [] for a bad file."""
        raise NotImplementedError

    def installed_command(self, path: Path) -> str | None:
        """Our command as installed for post_event, to run it the way the CLI would."""
        raise NotImplementedError

    def payload(self, session: str, project: Path) -> bytes:
        """The stdin the CLI sends on post_event, with the self-test's session id."""
        return json.dumps({"session_id": session, "cwd": str(project),
                           "hook_event_name": self.post_event, "tool_name": "genesis-self-test",
                           "tool_input": {}, "tool_response": {}}).encode()


def _is_ours(hook: object, key: str) -> bool:
    return isinstance(hook, dict) and SCRIPT_NAME in str(hook.get(key, ""))


class GroupedHooks(HookSpec):
    """`hooks.EVENT` lists of groups, each with its `hooks` list of command entries."""

    def __init__(self, cli: str, config_dir: Callable[[Mapping[str, str]], Path], file: str,
                 events: tuple[str, ...], post_event: str, matcher: str | None = None,
                 matched: frozenset[str] = frozenset(), env_defaults: Mapping[str, str] | None = None,
                 trust: str = "", link_hint: str = "replace the link with a file") -> None:
        self.cli, self.config_dir, self.file, self.link_hint = cli, config_dir, file, link_hint
        self.events, self.post_event, self.trust = events, post_event, trust
        self.matcher, self.matched = matcher, matched       # the events whose groups carry the matcher
        self.env_defaults = dict(env_defaults or {})        # settings "env" entries added when absent

    def path(self, env: Mapping[str, str] | None = None) -> Path:
        return self.config_dir(os.environ if env is None else env) / self.file

    def entry(self, command: str) -> dict:
        return {"type": "command", "command": command, "timeout": HOOK_TIMEOUT}

    def _objects(self) -> tuple[str, ...]:
        return ("hooks", "env") if self.env_defaults else ("hooks",)

    def _ours(self, groups: list, command: str | None = None) -> bool:
        return any(isinstance(g.get("hooks"), list) and any(_is_ours(h, "command") and
                                                            (command is None or h.get("command") == command)
                                                            for h in g["hooks"]) for g in groups)

    @staticmethod
    def _without_ours(groups: list) -> list:
        kept = []
        for group in groups:
            hooks = group.get("hooks")
            if isinstance(hooks, list) and any(_is_ours(h, "command") for h in hooks):
                rest = [h for h in hooks if not _is_ours(h, "command")]
                if not rest:
                    continue
                group = {**group, "hooks": rest}
            kept.append(group)
        return kept

    def install(self, path: Path, command: str, state_dir: Path, now: float | None = None) -> Change:
        """Merge our hook (and env defaults) into the file; a no-op when already there."""
        now = time.time() if now is None else now
        target, old_text, st, data = open_for_edit(path, self._objects(), self.link_hint)
        new = copy.deepcopy(data)
        created = [key for key in self._objects() if key not in data]
        hooks = new.setdefault("hooks", {})
        added_events = []
        for event in self.events:
            groups = hooks.get(event, [])
            if self._ours(groups, command):
                continue
            group = {"hooks": [self.entry(command)]}
            if event in self.matched and self.matcher is not None:
                group = {"matcher": self.matcher, **group}
            hooks[event] = self._without_ours(groups) + [group]
            added_events.append(event)
        added_env = []
        if self.env_defaults:
            env = new.setdefault("env", {})
            added_env = [k for k in self.env_defaults if k not in env]
            for key in added_env:
                env[key] = self.env_defaults[key]
        if same(new, data) and old_text is not None:
            return Change(path, (), (), None, target)
        private_dir(state_dir)  # refuse an unsafe state directory before the file changes
        backup = save(path, target, old_text, st, data, new, now)
        remember(state_dir, path, added_env, created)  # what uninstall may take away again
        return Change(path, tuple(added_events), tuple(added_env), backup, target)

    def uninstall(self, path: Path, state_dir: Path, now: float | None = None) -> Change:
        """Remove our hook entries, and the env entries we added (if still at our values)."""
        now = time.time() if now is None else now
        if not (path.exists() or path.is_symlink()):
            return Change(path, (), (), None)
        target, old_text, st, data = open_for_edit(path, self._objects(), self.link_hint)
        new = copy.deepcopy(data)
        record = install_record(state_dir, path)
        # no record: an emptied object was ours
        created = list(self._objects()) if record.created is None else record.created
        removed_events = []
        for event, groups in list(new.get("hooks", {}).items()):
            kept = self._without_ours(groups)
            if kept != groups:
                removed_events.append(event)
                if kept:
                    new["hooks"][event] = kept
                else:
                    del new["hooks"][event]
        if removed_events and not new["hooks"] and "hooks" in created:
            del new["hooks"]
        ours = record.env
        removed_env = [k for k in ours if new.get("env", {}).get(k) == self.env_defaults.get(k)]
        for key in removed_env:
            del new["env"][key]
        if removed_env and not new["env"] and "env" in created:
            del new["env"]
        if same(new, data):
            return Change(path, (), (), None, target)
        backup = save(path, target, old_text, st, data, new, now)
        forget(state_dir, path)
        return Change(path, tuple(removed_events), tuple(removed_env), backup, target)

    def installed_events(self, path: Path, command: str | None = None) -> list[str]:
        try:
            data = read_settings(path) or {}
        except SettingsError:
            return []
        hooks = data.get("hooks")
        found = []
        for event, groups in (hooks.items() if isinstance(hooks, dict) else ()):
            if isinstance(groups, list) and self._ours([g for g in groups if isinstance(g, dict)], command):
                found.append(event)
        return sorted(set(found))

    def installed_command(self, path: Path) -> str | None:
        try:
            data = read_settings(path) or {}
        except SettingsError:
            return None
        groups = (data.get("hooks") or {}).get(self.post_event) if isinstance(data.get("hooks"), dict) else None
        for group in groups if isinstance(groups, list) else ():
            for hook in (group.get("hooks") or []) if isinstance(group, dict) else ():
                if _is_ours(hook, "command") and isinstance(hook.get("command"), str):
                    return hook["command"]
        return None

"""Does the heartbeat hook really fire? Run it the way Claude Code would, and look.

Claude Code merges the hooks of every settings file it reads (user, project, local and
managed) and runs each distinct command through /bin/sh in the project, in a session of
its own, with the event's JSON on stdin. Some settings turn hooks off: `disableAllHooks`
(in managed settings: every hook; anywhere else: every hook but the managed ones),
`allowManagedHooksOnly` and `strictPluginOnlyCustomization` in managed settings, and
CLAUDE_CODE_SIMPLE / CLAUDE_CODE_SAFE_MODE in the environment. A settings file that is
not valid JSON, or whose `disableAllHooks` is not a boolean, is not loaded at all.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from genesis.agents.claude.settings import (SCOPES, SCRIPT_NAME, SettingsError, is_ours, managed_settings_dir,
                                            read_settings, settings_path)
from genesis.agents.hook.selftest import (BROKEN, MALFORMED, NOT_INSTALLED, WORKING, HookCheck, HookCopy, Run, run_hook,
                                          why_not)
from genesis.hints import hint

__all__ = ["HookCheck", "HookCopy", "self_test", "WORKING", "NOT_INSTALLED", "BROKEN", "MALFORMED"]

EVENT = "PostToolUse"
TRUTHY = {"1", "true", "yes", "on"}  # how Claude Code reads a boolean environment variable


@dataclass(frozen=True)
class _Source:
    scope: str
    path: Path
    data: dict


def _truthy(value: str | None) -> bool:
    return value is not None and value.strip().lower() in TRUTHY


def _load(scope: str, path: Path, malformed: list[tuple[Path, str]]) -> _Source | None:
    try:
        data = read_settings(path)
    except SettingsError as exc:
        malformed.append((path, str(exc).split("; ", 1)[0]))
        return None
    if data is None:
        return None
    if "disableAllHooks" in data and not isinstance(data["disableAllHooks"], bool):
        malformed.append((path, f"{path}: disableAllHooks is {json.dumps(data['disableAllHooks'])}, "
                                f"not true or false"))
        return None
    return _Source(scope, path, data)


def _sources(project: Path, env: Mapping[str, str], home: Path | None,
             managed: Path) -> tuple[list[_Source], list[_Source], list[tuple[Path, str]]]:
    """The settings files Claude Code reads, in its order (later wins), and the unparseable ones."""
    malformed: list[tuple[Path, str]] = []
    seen, ours = set(), []
    for scope in SCOPES:
        path = settings_path(scope, project, home, env)
        real = os.path.realpath(path)
        if real in seen:
            continue  # the project is the home directory: one file, read once
        seen.add(real)
        source = _load(scope, path, malformed)
        if source:
            ours.append(source)
    drop_in_dir = managed / "managed-settings.d"  # merged over managed-settings.json in name order
    drop_ins = sorted(drop_in_dir.glob("*.json")) if drop_in_dir.is_dir() else []
    policy = [s for s in (_load("managed", p, []) for p in [managed / "managed-settings.json", *drop_ins]) if s]
    return ours, policy, malformed


def _last(sources: list[_Source], key: str) -> tuple[Any, Path | None]:
    value, where = None, None
    for source in sources:
        if key in source.data:
            value, where = source.data[key], source.path
    return value, where


def _gate(sources: list[_Source], policy: list[_Source], env: Mapping[str, str]) -> tuple[set[str], str]:
    """The scopes whose hooks Claude Code runs, and why the others do not run."""
    if _truthy(env.get("CLAUDE_CODE_SIMPLE")):
        return set(), (f"hooks are disabled by CLAUDE_CODE_SIMPLE={env['CLAUDE_CODE_SIMPLE']} in the loop's "
                       f"environment; unset it")
    off, where = _last(policy, "disableAllHooks")
    if off is True:
        return set(), f"hooks are disabled by disableAllHooks in the managed settings {where}; ask your administrator"
    for key in ("allowManagedHooksOnly", "strictPluginOnlyCustomization"):
        value, where = _last(policy, key)
        if value is True or (key == "strictPluginOnlyCustomization" and isinstance(value, list) and "hooks" in value):
            return {"managed"}, (f"only managed hooks run ({key} in {where}); ask your administrator to add the "
                                 f"heartbeat hook to the managed settings")
    if _truthy(env.get("CLAUDE_CODE_SAFE_MODE")):
        return {"managed"}, (f"hooks are disabled by CLAUDE_CODE_SAFE_MODE={env['CLAUDE_CODE_SAFE_MODE']} in the "
                             f"loop's environment; unset it")
    off, where = _last(sources + policy, "disableAllHooks")
    if off is True:
        return {"managed"}, f"hooks are disabled by \"disableAllHooks\": true in {where}; remove it"
    return {*SCOPES, "managed"}, ""


def _copies(sources: list[_Source]) -> list[tuple[_Source, str, str]]:
    """(source, command, matcher) of every PostToolUse command hook that runs our script."""
    found = []
    for source in sources:
        hooks = source.data.get("hooks")
        groups = hooks.get(EVENT) if isinstance(hooks, dict) else None
        for group in groups if isinstance(groups, list) else ():
            entries = group.get("hooks") if isinstance(group, dict) else None
            for hook in entries if isinstance(entries, list) else ():
                if is_ours(hook) and hook.get("type") == "command" and isinstance(hook.get("command"), str):
                    found.append((source, hook["command"], str(group.get("matcher") or "*")))
    return found


def _payload(token: str, project: Path) -> bytes:
    """A PostToolUse event shaped like Claude Code's (see the reference sample)."""
    return json.dumps({
        "session_id": token, "transcript_path": f"/nonexistent/genesis-self-test/{token}.jsonl",
        "cwd": str(project), "permission_mode": "bypassPermissions", "hook_event_name": EVENT,
        "tool_name": "Bash", "tool_input": {"command": "true", "description": "Genesis hook self-test"},
        "tool_response": {"stdout": "", "stderr": "", "interrupted": False, "isImage": False},
        "tool_use_id": f"toolu_{token}", "duration_ms": 1}).encode()


def _claude_env(project: Path) -> Callable[[str], Mapping[str, str]]:
    """What Claude Code adds to a hook's environment."""
    return lambda session: {"CLAUDE_PID": str(os.getpid()), "CLAUDE_PROJECT_DIR": str(project), "CLAUDECODE": "1",
                            "CLAUDE_CODE_SESSION_ID": session}


def _fix(scope: str, project: Path) -> str:
    return f"run: {hint(project, 'hook', 'install', '--scope', scope)}" if scope != "managed" else \
        "ask your administrator"


def self_test(project: Path, env: Mapping[str, str], heartbeat: Path, home: Path | None = None,
              timeout: float = 10.0, *, managed: Path | None = None) -> HookCheck:
    """Find our PostToolUse hook where Claude Code would, run it as installed, and check its heartbeat lands."""
    project = Path(project).resolve()
    heartbeat = Path(heartbeat)
    sources, policy, malformed = _sources(project, env, home, managed or managed_settings_dir())
    allowed, blocked = _gate(sources, policy, env)
    copies: list[HookCopy] = []
    runs: dict[str, Run] = {}
    for source, command, matcher in _copies(policy + sources):
        if source.scope not in allowed:
            copies.append(HookCopy(source.scope, source.path, command, False, blocked))
            continue
        if command not in runs:  # Claude Code runs an identical command once
            runs[command] = run_hook(command, project, env, heartbeat, timeout,
                                     lambda session: _payload(session, project), _claude_env(project))
        run = runs[command]
        only = "" if matcher in ("*", "") else f" (only for tools matching {matcher!r})"
        detail = (f"ran in {run.ms:.0f} ms and its heartbeat landed{only}" if run.landed
                  else why_not(run, command, _fix(source.scope, project), heartbeat, timeout))
        copies.append(HookCopy(source.scope, source.path, command, run.landed, detail))
    return _verdict(copies, malformed, project, env, home)


def _verdict(copies: list[HookCopy], malformed: list[tuple[Path, str]], project: Path, env: Mapping[str, str],
             home: Path | None) -> HookCheck:
    good = [c for c in copies if c.ok]
    why: dict[str, list[str]] = {}  # one reason, said once for every copy it stops
    for copy in copies:
        if not copy.ok:
            why.setdefault(copy.detail, []).append(str(copy.path))
    bad = "; also ".join(f"the hook in {' and '.join(paths)} does not work: {detail}" for detail, paths in why.items())
    unread = "; also ".join(f"{why}, so Claude Code ignores that whole file until it is fixed" for _, why in malformed)
    if good:
        first = good[0]
        notes = "".join(f"; note: {x}" for x in (bad, unread) if x)
        return HookCheck(WORKING, f"working: the hook in {first.path} {first.detail}{notes}", first.scope,
                         first.path, first.command, tuple(copies))
    first = copies[0] if copies else None
    scope, path, command = (first.scope, first.path, first.command) if first else (None, None, None)
    if malformed:
        return HookCheck(MALFORMED, f"malformed settings: {unread}" + (f"; also {bad}" if bad else ""),
                         scope, path or malformed[0][0], command, tuple(copies))
    if not copies:
        files = ", ".join(str(settings_path(s, project, home, env)) for s in SCOPES)
        return HookCheck(NOT_INSTALLED, f"not installed: no {EVENT} hook runs {SCRIPT_NAME} in {files}; "
                         f"run: {hint(project, 'hook', 'install', '--scope', 'local')} (for this project "
                         f"alone; without --scope, for every Claude Code session of yours)", None, None, None)
    return HookCheck(BROKEN, f"broken: {bad}", scope, path, command, tuple(copies))

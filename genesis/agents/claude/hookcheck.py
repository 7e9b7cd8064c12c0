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
import secrets
import selectors
import shlex
import signal
import stat
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ...atomicio import write_text
from .settings import (SCOPES, SCRIPT_NAME, SettingsError, is_ours, managed_settings_dir, read_settings,
                              settings_path)
from ...heartbeat import read_heartbeat

__all__ = ["HookCheck", "HookCopy", "self_test", "WORKING", "NOT_INSTALLED", "BROKEN", "MALFORMED"]

WORKING, NOT_INSTALLED, BROKEN, MALFORMED = "working", "not_installed", "broken", "malformed"
EVENT = "PostToolUse"
TRUTHY = {"1", "true", "yes", "on"}  # how Claude Code reads a boolean environment variable
STDERR_TAIL = 300
MAX_BEAT_BYTES = 64 * 1024


@dataclass(frozen=True)
class HookCopy:
    """One installed copy of our PostToolUse hook and what became of it."""
    scope: str          # "user" | "project" | "local" | "managed"
    path: Path
    command: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class HookCheck:
    state: str            # "working" | "not_installed" | "broken" | "malformed"
    detail: str           # one human sentence: why, and what to do
    scope: str | None     # settings scope whose hook was run ("user"|"project"|"local"|"managed"), if any
    path: Path | None     # that settings file
    command: str | None   # the hook command as installed
    copies: tuple[HookCopy, ...] = ()

    @property
    def ok(self) -> bool:
        return self.state == WORKING


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


@dataclass(frozen=True)
class _Run:
    landed: bool
    code: int | None      # None: timed out and killed
    stderr: str
    ms: float


def _snapshot(path: Path) -> bytes | None:
    """The heartbeat file's bytes now (never through a symlink), None when there is none."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        return fh.read(MAX_BEAT_BYTES) if stat.S_ISREG(os.fstat(fd).st_mode) else None


def _run(command: str, project: Path, env: Mapping[str, str], heartbeat: Path, timeout: float) -> _Run:
    """Run the command as Claude Code does, with a unique session id; then take its heartbeat away again."""
    token = f"genesis-self-test.{os.getpid()}.{secrets.token_hex(6)}"
    full_env = {**env, "GENESIS_HEARTBEAT_FILE": str(heartbeat), "CLAUDE_PID": str(os.getpid()),
                "CLAUDE_PROJECT_DIR": str(project), "CLAUDECODE": "1", "CLAUDE_CODE_SESSION_ID": token}
    before = _snapshot(heartbeat)
    started = time.monotonic()
    proc = subprocess.Popen(["/bin/sh", "-c", command], cwd=project, env=full_env, stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        proc.stdin.write(_payload(token, project))  # far below a pipe's buffer: never blocks
        proc.stdin.close()
    except OSError:
        pass  # it did not read its stdin: Claude Code would not mind either
    code, err = _wait(proc, started + timeout)
    ms = (time.monotonic() - started) * 1000
    beat, _ = read_heartbeat(heartbeat)
    landed = beat is not None and beat.session_id == token
    if landed:  # a test beat must never count as an agent's sign of life
        try:
            if before is None:
                os.unlink(heartbeat)
            else:
                write_text(heartbeat, before.decode("utf-8", "replace"))
        except OSError:
            pass
    return _Run(landed, code, err, ms)


def _wait(proc: subprocess.Popen, deadline: float) -> tuple[int | None, str]:
    """Its exit status (None when it was killed at the deadline) and the tail of its stderr."""
    tail, fd = b"", proc.stderr.fileno()
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if sel.select(max(0.0, min(deadline - time.monotonic(), 0.05))):
                chunk = os.read(fd, 65536)
                if not chunk:
                    break  # EOF: it has exited, or closed stderr
                tail = (tail + chunk)[-4096:]
            elif proc.poll() is not None:
                break  # exited, while a child of its own still holds stderr open
    proc.stderr.close()
    text = tail.decode("utf-8", "replace")
    try:
        return proc.wait(max(0.0, deadline - time.monotonic())), text
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # not reaped yet, so the group id is still its own
        proc.wait()
        return None, text


def _script(command: str) -> tuple[Path | None, bool]:
    """Our script's path in the command, and whether the command runs it directly (needs +x)."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None, False
    for i, word in enumerate(words):
        if word.endswith(SCRIPT_NAME):
            return Path(os.path.expanduser(word)), i == 0
    return None, False


def _dir_problem(heartbeat: Path) -> str:
    parent = heartbeat.parent
    try:
        st = os.lstat(parent)
    except OSError:
        return f"its directory {parent} does not exist"
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        return f"{parent} is not a plain directory (a symlink?)"
    if st.st_uid != os.geteuid():
        return f"its directory {parent} belongs to uid {st.st_uid}, not to you"
    if os.path.islink(heartbeat):
        return f"{heartbeat} is a symlink, which the hook never writes through"
    return ""


def _why(run: _Run, command: str, scope: str, heartbeat: Path, timeout: float) -> str:
    fix = f"run: genesis hook install --scope {scope}" if scope != "managed" else "ask your administrator"
    script, direct = _script(command)
    stderr = " ".join(run.stderr.split())[-STDERR_TAIL:]
    if script is not None and not script.exists():
        return f"its script {script} is missing (moved or deleted); {fix}"
    if script is not None and direct and not os.access(script, os.X_OK):
        return f"its script {script} is not executable; run: chmod +x {script}, or {fix}"
    if run.code is None:
        return f"it did not finish within {timeout:g} s and was killed; {fix}"
    if run.code != 0:
        return f"it exited {run.code}" + (f" ({stderr})" if stderr else "") + f"; {fix}"
    problem = _dir_problem(heartbeat)
    if problem:
        return f"it wrote nothing: {problem}; fix that, or set GENESIS_STATE_DIR to a directory of yours"
    return f"it exited 0 but wrote no heartbeat to {heartbeat}; {fix}"


def self_test(project: Path, env: Mapping[str, str], heartbeat: Path, home: Path | None = None,
              timeout: float = 10.0, *, managed: Path | None = None) -> HookCheck:
    """Find our PostToolUse hook where Claude Code would, run it as installed, and check its heartbeat lands."""
    project = Path(project).resolve()
    heartbeat = Path(heartbeat)
    sources, policy, malformed = _sources(project, env, home, managed or managed_settings_dir())
    allowed, blocked = _gate(sources, policy, env)
    copies: list[HookCopy] = []
    runs: dict[str, _Run] = {}
    for source, command, matcher in _copies(policy + sources):
        if source.scope not in allowed:
            copies.append(HookCopy(source.scope, source.path, command, False, blocked))
            continue
        if command not in runs:  # Claude Code runs an identical command once
            runs[command] = _run(command, project, env, heartbeat, timeout)
        run = runs[command]
        only = "" if matcher in ("*", "") else f" (only for tools matching {matcher!r})"
        detail = (f"ran in {run.ms:.0f} ms and its heartbeat landed{only}" if run.landed
                  else _why(run, command, source.scope, heartbeat, timeout))
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
                         f"run: genesis hook install", None, None, None)
    return HookCheck(BROKEN, f"broken: {bad}", scope, path, command, tuple(copies))

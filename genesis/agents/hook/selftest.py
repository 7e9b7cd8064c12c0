"""Running a CLI's installed hook the way the CLI would, and saying whether its beat landed.

Before each phase the loop plays one tool event through the hook as installed, with the
loop's environment and a self-test session id, and looks for the heartbeat where the
watcher will: a hook that does not fire would make a healthy agent look stuck all night.
The self-test's beat is taken away again; its session id also keeps the watcher off it.
"""

from __future__ import annotations

import os
import secrets
import selectors
import shlex
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping

from genesis.agents.hook.replace import SettingsError
from genesis.agents.hook.settingsfile import read_settings
from genesis.agents.hook.spec import SCRIPT_NAME, self_test_session
from genesis.health.heartbeat import read_heartbeat
from genesis.hints import hint
from genesis.store.atomicio import write_text

if TYPE_CHECKING:
    from genesis.agents.base import Adapter
    from genesis.agents.hook.spec import HookSpec

__all__ = ["HookCheck", "HookCopy", "Run", "run_hook", "why_not", "spec_self_test", "check_outside_loop", "WORKING", "NOT_INSTALLED",
           "BROKEN", "MALFORMED"]

WORKING, NOT_INSTALLED, BROKEN, MALFORMED = "working", "not_installed", "broken", "malformed"
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
class Run:
    landed: bool
    code: int | None      # None: timed out and killed
    stderr: str
    ms: float


def snapshot(path: Path) -> bytes | None:
    """The heartbeat file's bytes now (never through a symlink), None when there is none."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        return fh.read(MAX_BEAT_BYTES) if stat.S_ISREG(os.fstat(fd).st_mode) else None


def run_hook(command: str, project: Path, env: Mapping[str, str], heartbeat: Path, timeout: float,
             payload: Callable[[str], bytes], cli_env: Callable[[str], Mapping[str, str]] = lambda _: {}) -> Run:
    """Run the command as the CLI does (through /bin/sh, in the project, in a session of its
    own, the event on stdin), with a unique session id; then take its heartbeat away again.
    `payload(session)` is the event's stdin; `cli_env(session)` what the CLI adds to the environment."""
    token = self_test_session(f"{os.getpid()}.{secrets.token_hex(6)}")
    full_env = {**env, "GENESIS_HEARTBEAT_FILE": str(heartbeat), **cli_env(token)}
    before = snapshot(heartbeat)
    started = time.monotonic()
    proc = subprocess.Popen(["/bin/sh", "-c", command], cwd=project, env=full_env, stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        proc.stdin.write(payload(token))  # far below a pipe's buffer: never blocks
        proc.stdin.close()
    except OSError:
        pass  # it did not read its stdin: the CLI would not mind either
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
    return Run(landed, code, err, ms)


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


def script_of(command: str) -> tuple[Path | None, bool]:
    """Our script's path in the command, and whether the command runs it directly (needs +x)."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None, False
    for i, word in enumerate(words):
        if word.endswith(SCRIPT_NAME):
            return Path(os.path.expanduser(word)), i == 0
    return None, False


def dir_problem(heartbeat: Path) -> str:
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


def why_not(run: Run, command: str, fix: str, heartbeat: Path, timeout: float) -> str:
    """Why the hook's beat did not land; `fix` says what to run where reinstalling helps."""
    script, direct = script_of(command)
    stderr = " ".join(run.stderr.split())[-STDERR_TAIL:]
    if script is not None and not script.exists():
        return f"its script {script} is missing (moved or deleted); {fix}"
    if script is not None and direct and not os.access(script, os.X_OK):
        return f"its script {script} is not executable; run: chmod +x {script}, or {fix}"
    if run.code is None:
        return f"it did not finish within {timeout:g} s and was killed; {fix}"
    if run.code != 0:
        return f"it exited {run.code}" + (f" ({stderr})" if stderr else "") + f"; {fix}"
    problem = dir_problem(heartbeat)
    if problem:
        return f"it wrote nothing: {problem}; fix that, or set GENESIS_STATE_DIR to a directory of yours"
    return f"it exited 0 but wrote no heartbeat to {heartbeat}; {fix}"


def check_outside_loop(adapter: "Adapter", project: Path, environ: Mapping[str, str]) -> HookCheck | None:
    """The adapter's hook run as installed, outside any loop (`genesis hook status`, `genesis
    doctor`): the user's environment without Genesis's settings, and a heartbeat folder of its
    own (0700), removed after. None: the CLI has no hooks."""
    scratch = Path(tempfile.mkdtemp(prefix="genesis-hook-status-"))
    try:
        env = {k: v for k, v in environ.items() if not k.startswith("GENESIS_")}
        env.update(GENESIS_AGENT="hook-status", GENESIS_RUN_ID=f"hook-status-{os.getpid()}")
        return adapter.hook_check(project, env, scratch / "heartbeat.json")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def spec_self_test(spec: "HookSpec", project: Path, env: Mapping[str, str], heartbeat: Path,
                   timeout: float = 10.0) -> HookCheck:
    """The self-test for a CLI with one hook file: find our hook there, run it, look for the beat."""
    project, heartbeat = Path(project).resolve(), Path(heartbeat)
    path = spec.path(env)
    fix = f"run: {hint(project, 'hook', 'install', '--agent', spec.cli)}"
    try:
        read_settings(path) if path.suffix == ".json" else None
    except SettingsError as exc:
        return HookCheck(MALFORMED, f"malformed: {exc}", "user", path, None)
    command = spec.installed_command(path)
    if command is None:
        return HookCheck(NOT_INSTALLED, f"not installed: no {spec.post_event} hook runs {SCRIPT_NAME} in {path}; "
                         f"{fix}", None, None, None)
    run = run_hook(command, project, env, heartbeat, timeout, lambda session: spec.payload(session, project))
    if run.landed:
        detail = f"ran in {run.ms:.0f} ms and its heartbeat landed"
        note = f"; note: {spec.trust}" if spec.trust else ""
        return HookCheck(WORKING, f"working: the hook in {path} {detail}{note}", "user", path, command,
                         (HookCopy("user", path, command, True, detail),))
    detail = why_not(run, command, fix, heartbeat, timeout)
    return HookCheck(BROKEN, f"broken: the hook in {path} does not work: {detail}", "user", path, command,
                     (HookCopy("user", path, command, False, detail),))

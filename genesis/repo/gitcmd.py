"""How Genesis runs git in a work tree an agent controls.

Bounded in time and output, never through a shell, in a session of its own whose whole
process group (filters, hooks and their children) is killed at the deadline; with a
configuration the agent cannot reach, so that nothing the agent wrote runs (gitenv.py).
"""

from __future__ import annotations

import os
import selectors
import shlex
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from genesis.procs.group import kill_group
from genesis.repo import gitenv

__all__ = ["GitFailed", "GitTimeout", "GitRun", "NotARepository", "NotOwned", "run_git", "command_name", "GIT_TIMEOUT"]

GIT_TIMEOUT = 300          # seconds for one git command over the whole work tree
OUTPUT_LIMIT = 64 << 20    # bytes of output collected from one git command (streamed output is not held)
CHUNK = 1 << 16
EXIT_CHECK = 0.5           # while its output is silent, how often to look whether git has exited


class NotARepository(ValueError):
    pass


class NotOwned(NotARepository):
    """git refuses a repository another user owns ("dubious ownership") until it is named safe."""

    def __init__(self, project: Path, top: str):
        self.fix = f"git config --global --add safe.directory {shlex.quote(top)}"
        super().__init__(f"git refuses to work in {project}: another user owns it (git's \"dubious ownership\"); "
                         f"if you trust it, run: {self.fix}")


class GitFailed(RuntimeError):
    """A git command failed, printed too much, or ran over its time."""


class GitTimeout(GitFailed, TimeoutError):
    """A git command ran over its time; it and everything it started were killed."""

    def __init__(self, command: str, project: Path, timeout: float):
        super().__init__(f"`{command}` ran for more than {timeout:g}s in {project} and was killed with "
                         f"everything it started; look at what git runs there (a filter, hook or "
                         f"fsmonitor in its config, a hung filesystem, a huge work tree)")
        self.command = command


@dataclass(frozen=True)
class GitRun:
    returncode: int
    stdout: bytes          # empty when the output went to a sink
    stderr: str            # its last few hundred characters

    @property
    def text(self) -> str:
        return os.fsdecode(self.stdout)


def command_name(args: Sequence[str]) -> str:
    """How a git command is named in messages: its options, not the pathspecs after `--`."""
    shown = list(args[:args.index("--")] if "--" in args else args)
    text = " ".join(["git", *shown])
    return text if len(text) <= 120 else text[:117] + "..."


def run_git(project: Path, args: Sequence[str], *, timeout: float = GIT_TIMEOUT,
            config: Sequence[tuple[str, str]] = (), env: Mapping[str, str] | None = None,
            stdin: bytes | None = None, sink: Callable[[bytes], object] | None = None,
            limit: int = OUTPUT_LIMIT) -> GitRun:
    """Run git in project, never through a shell; its status is the caller's to judge.

    config entries reach git through GIT_CONFIG_COUNT, so a key holding `=` or a newline
    is still one key. Output goes to sink as it comes (never held whole) or is collected
    up to limit bytes. git runs in a new session: at the deadline, or if anything goes
    wrong here, its whole process group (filters, hooks and their children) is killed
    and GitTimeout or the error is raised. Something git started and left behind that
    still holds its output does not keep us waiting once git itself has exited.
    Neither the system's nor the user's global config is read, and no program the
    repository's config names runs (gitenv.py); config entries come after, so a caller's win.
    """
    full_env = {**os.environ, **gitenv.NEUTRAL_ENV, **(env or {})}
    _add_config(full_env, [*gitenv.config_for(Path(project)), *config])
    command = command_name(args)
    args = gitenv.args_for(args)
    deadline = time.monotonic() + timeout
    collected = bytearray()

    def collect(chunk: bytes) -> None:
        collected.extend(chunk)
        if len(collected) > limit:
            raise GitFailed(f"`{command}` printed more than {limit} bytes in {project}; stopped it "
                            f"(a huge number of files it lists? ignore them in .gitignore)")

    with tempfile.TemporaryFile() as err, tempfile.TemporaryFile() as given:
        if stdin is not None:
            given.write(stdin)
            given.seek(0)
        proc = subprocess.Popen(["git", *args], cwd=project, env=full_env, start_new_session=True,
                                stdin=given if stdin is not None else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=err)
        try:
            with proc.stdout:
                finished = _pump(proc, deadline, sink or collect)
            if not finished:
                raise GitTimeout(command, project, timeout)
            try:
                rc = proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise GitTimeout(command, project, timeout) from None
        except BaseException:
            kill_group(proc)
            raise
        return GitRun(rc, bytes(collected), _tail(err))


def _pump(proc: subprocess.Popen, deadline: float, sink: Callable[[bytes], object]) -> bool:
    """Feed git's stdout to sink until it ends, or git has exited and nothing more is
    waiting; False at the deadline."""
    fd = proc.stdout.fileno()
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        exited = False
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            # Once git has exited, everything it wrote is already in the pipe: drain, no wait.
            if not sel.select(0 if exited else min(left, EXIT_CHECK)):
                if exited:
                    return True
                exited = proc.poll() is not None
                continue
            chunk = os.read(fd, CHUNK)
            if not chunk:
                return True
            sink(chunk)


def _tail(err) -> str:
    size = err.seek(0, os.SEEK_END)
    err.seek(max(0, size - 4096))
    return err.read(4096).decode("utf-8", "replace").strip()[-300:]


def _add_config(env: dict[str, str], config: Sequence[tuple[str, str]]) -> None:
    if not config:
        return
    try:
        n = max(0, int(env.get("GIT_CONFIG_COUNT", "0") or 0))
    except ValueError:
        n = 0  # git would refuse a bogus count anyway; ours replaces it
    for key, value in config:
        env[f"GIT_CONFIG_KEY_{n}"] = key
        env[f"GIT_CONFIG_VALUE_{n}"] = value
        n += 1
    env["GIT_CONFIG_COUNT"] = str(n)



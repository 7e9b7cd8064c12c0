"""Where Genesis keeps its files inside a project, and keeping them out of git's view."""

from __future__ import annotations

import os
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .atomicio import read_bytes, write_text

__all__ = ["Layout", "UnsafeDir", "private_dir", "ensure_git_excludes", "add_git_excludes"]


class UnsafeDir(PermissionError):
    """A directory Genesis would write into could be tampered with by someone else."""


@dataclass(frozen=True)
class Layout:
    project: Path
    log_dir: Path
    stop_flag: Path

    @property
    def orchestrator(self) -> Path:
        return self.project / "orchestrator"

    @property
    def breaker_file(self) -> Path:
        return self.orchestrator / ".circuit_breaker.json"

    @property
    def state_dir(self) -> Path:
        return self.orchestrator / ".genesis"

    @property
    def loop_lock(self) -> Path:
        return self.state_dir / "loop.json"

    @property
    def baseline_file(self) -> Path:
        return self.state_dir / "baseline.json"

    @property
    def user_files(self) -> Path:
        """The user's untracked files at the run's start: never auto-committed."""
        return self.state_dir / "user-untracked.json"

    @property
    def events_file(self) -> Path:
        return self.log_dir / "events.jsonl"

    def heartbeat_file(self, phase: str) -> Path:
        return self.state_dir / "heartbeats" / f"{phase}.json"

    def run_dir(self, run_id: str) -> Path:
        """One folder per run: its agents' logs and its console copy are its own."""
        return self.log_dir / run_id

    def agent_log(self, run_id: str, iteration: int, phase: str) -> Path:
        return self.run_dir(run_id) / f"iter-{iteration:04d}-{phase}.log"

    def console_log(self, run_id: str) -> Path:
        return self.run_dir(run_id) / "console.log"

    def ignored(self) -> list[str]:
        """Patterns (relative to the work tree) for every file Genesis writes in the project."""
        rel = []
        for path, suffix in ((self.breaker_file, "*"), (self.state_dir, "/"), (self.log_dir, "/"),
                             (self.stop_flag, "")):
            try:
                rel.append("/" + path.relative_to(self.project).as_posix() + suffix)
            except ValueError:
                pass  # configured outside the project: git never sees it
        return rel


def private_dir(path: Path) -> Path:
    """Create (0700) or check a directory: ours, not a symlink, not writable by others."""
    path = Path(path)
    try:
        path.mkdir(mode=0o700, parents=True)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise UnsafeDir(f"{path} is not a plain directory (a symlink?); remove it and start again")
    if st.st_uid != os.geteuid():
        raise UnsafeDir(f"{path} belongs to uid {st.st_uid}, not to you; remove it or choose another place")
    if st.st_mode & 0o022:
        raise UnsafeDir(f"{path} is writable by others (mode {stat.S_IMODE(st.st_mode):o}); "
                        f"run: chmod go-w {path}")
    return path


def ensure_git_excludes(layout: Layout) -> list[str]:
    """Add Genesis's files to the repository's info/exclude (never the user's .gitignore)."""
    return add_git_excludes(layout.project, layout.ignored())


def add_git_excludes(project: Path, patterns: list[str]) -> list[str]:
    """Append the patterns missing from the repository's info/exclude; return them."""
    out = subprocess.run(["git", "rev-parse", "--git-path", "info/exclude"], cwd=project,
                         capture_output=True, text=True, check=True).stdout.strip()
    exclude = Path(out) if os.path.isabs(out) else Path(project) / out
    exclude.parent.mkdir(parents=True, exist_ok=True)
    try:
        current = read_bytes(exclude, 1 << 20, follow_symlinks=True).decode("utf-8", "replace")
    except FileNotFoundError:
        current = ""
    lines = current.splitlines()
    missing = [p for p in patterns if p not in lines]
    if missing:
        text = current + ("" if not current or current.endswith("\n") else "\n")
        text += "# added by Genesis\n" + "".join(f"{p}\n" for p in missing)
        write_text(exclude, text)
    return missing

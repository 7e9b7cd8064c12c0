"""Where Genesis keeps its files, and keeping them out of git's view.

The loop's working state (heartbeats, the lock, baselines, run records, the configuration
snapshot, the breaker's truth while a loop runs) lives in a private directory inside the
repository's own git directory, `<git dir>/genesis/`: git commands in the work tree never
touch it (`git clean -fdx`, `git stash -a`, `rm -rf orchestrator`), it belongs to this
repository and work tree (a linked worktree has its own git dir), and it goes when the
repository goes. What users look at or edit stays in the work tree: the breaker file,
the logs, the stop flag, genesis.conf and prompts.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from genesis.hints import program
from genesis.repo.gitcmd import GitFailed, NotARepository, NotOwned, run_git
from genesis.store.atomicio import read_bytes, write_text

__all__ = ["Layout", "UnsafeDir", "private_dir", "heal_dir", "state_dir_of", "work_tree_of", "ensure_git_excludes",
           "add_git_excludes", "GIT_TIMEOUT"]

GIT_TIMEOUT = 60.0


class UnsafeDir(PermissionError):
    """A directory Genesis would write into could be tampered with by someone else."""


def _rev_parse(path: Path, option: str, what: str, fix: str) -> Path:
    """The path `git rev-parse <option>` answers in path; NotARepository says what to do."""

    try:
        done = run_git(path, ["rev-parse", option], timeout=GIT_TIMEOUT)
    except (OSError, GitFailed) as exc:
        raise NotARepository(f"{path}: cannot ask git where its {what} is ({exc})") from None
    if done.returncode != 0 and "safe.directory" in done.stderr:  # git's "dubious ownership": say so, and the fix
        raise NotOwned(path, done.stderr.rsplit("safe.directory", 1)[1].strip() or str(path))
    if done.returncode != 0 or not done.text.strip():
        raise NotARepository(f"{path} is not {fix}")
    return Path(done.text.strip())


def state_dir_of(project: Path) -> Path:
    """`<git dir>/genesis` of the work tree at project (see the module's docstring)."""
    return _rev_parse(project, "--absolute-git-dir", "git directory",
                      "a git work tree: run this in a project where Genesis ran, or pass --project with one "
                      f"(`{program()} status --all` lists this machine's loops and fleets)") / "genesis"


def work_tree_of(path: Path) -> Path:
    """The top of the git work tree path is in (path may be a subdirectory)."""
    return _rev_parse(path, "--show-toplevel", "work tree", "in a git work tree; pass --project with a git "
                      "project, or use --all for the loops running on this machine")


@dataclass(frozen=True)
class Layout:
    project: Path
    log_dir: Path
    stop_flag: Path
    state_dir: Path                # private: see the module's docstring

    @property
    def orchestrator(self) -> Path:
        return self.project / "orchestrator"

    @property
    def breaker_file(self) -> Path:
        """What users read and delete to reset; while a loop runs, a mirror of breaker_truth."""
        return self.orchestrator / ".circuit_breaker.json"

    @property
    def breaker_truth(self) -> Path:
        return self.state_dir / "breaker.json"

    @property
    def breaker_lock(self) -> Path:
        return self.state_dir / "breaker.lock"

    @property
    def loop_lock(self) -> Path:
        """flock()ed by the loop for its whole life: the kernel releases it when the loop dies."""
        return self.state_dir / "loop.lock"

    @property
    def loop_record(self) -> Path:
        """Who holds loop_lock: pid, start time, run id (for messages; the lock is the truth)."""
        return self.state_dir / "loop.json"

    @property
    def baseline_file(self) -> Path:
        return self.state_dir / "baseline.json"

    @property
    def user_files(self) -> Path:
        """The user's untracked files at the run's start: never auto-committed."""
        return self.state_dir / "user-untracked.json"

    @property
    def untracked_copies(self) -> Path:
        """The user's untracked and ignored files copied aside per run (`<run-id>/`), for
        `genesis restore --untracked` (repo/untracked.py)."""
        return self.state_dir / "untracked"

    @property
    def safety_record(self) -> Path:
        """The branch tips and HEAD the running loop started with, beside their safety refs: an
        agent that deletes or moves a ref in the repository cannot change what they are judged by."""
        return self.state_dir / "safety.json"

    @property
    def leftovers_file(self) -> Path:
        """What the last run held uncommitted that was not the user's, per path with its
        content's digest: at the next start, those changes are the agent's (repo/ownership.py)."""
        return self.state_dir / "leftovers.json"

    @property
    def config_snapshot(self) -> Path:
        """The settings the running loop started with; edits to genesis.conf wait for the next start."""
        return self.state_dir / "config.json"

    @property
    def prompts_dir(self) -> Path:
        """Copies of the phase prompts taken at the start of the run."""
        return self.state_dir / "prompts"

    @property
    def hook_record(self) -> Path:
        """Where the heartbeat hook was found working at start, to reinstall it there if it goes."""
        return self.state_dir / "hook.json"

    @property
    def hook_removal(self) -> Path:
        """The user's `genesis hook uninstall` while the loop ran: respected, never undone."""
        return self.state_dir / "hook-removed.json"

    def health_file(self, phase: str) -> Path:
        """The running phase's health snapshot, rewritten at every check."""
        return self.heartbeat_dir / f"{phase}.health.json"

    @property
    def incidents_dir(self) -> Path:
        """Forensics of every abnormal end: `<id>.json` and `<id>.txt` (see `genesis incidents`)."""
        return self.state_dir / "incidents"

    @property
    def wait_file(self) -> Path:
        """The pending wait (a usage limit, an outage's backoff, a cooldown) of the running loop."""
        return self.state_dir / "wait.json"

    @property
    def limit_file(self) -> Path:
        """The usage limits met, each with its CLI, account and reset: that account's agent is
        not started again before it (see loop/limits.py)."""
        return self.state_dir / "limit.json"

    @property
    def limit_lock(self) -> Path:
        return self.state_dir / "limit.lock"

    @property
    def ledger_file(self) -> Path:
        """The run ledger (SQLite, WAL): every event of every run; see genesis/ledger/."""
        return self.state_dir / "ledger.sqlite3"

    @property
    def legacy_events_file(self) -> Path:
        """The events log of Genesis before the ledger, brought into a new ledger once."""
        return self.state_dir / "events.jsonl"

    @property
    def heartbeat_dir(self) -> Path:
        return self.state_dir / "heartbeats"

    def heartbeat_file(self, phase: str) -> Path:
        return self.heartbeat_dir / f"{phase}.json"

    def run_dir(self, run_id: str) -> Path:
        """One folder per run: its agents' logs and its console copy are its own."""
        return self.log_dir / run_id

    def agent_log(self, run_id: str, iteration: int, phase: str, suffix: str = ".log", attempt: int = 1) -> Path:
        """A phase's readable transcript (.log), or its raw output under another suffix, of its
        `attempt`-th start in the iteration: the first is `iter-0001-Builder.log`, a later one (a
        retry, a run after a wait) `iter-0001-Builder.attempt-2.log`, so no attempt's evidence is
        another's."""
        again = f".attempt-{attempt}" if attempt > 1 else ""
        return self.run_dir(run_id) / f"iter-{iteration:04d}-{phase}{again}{suffix}"

    def console_log(self, run_id: str) -> Path:
        return self.run_dir(run_id) / "console.log"

    def console_copy(self, run_id: str) -> Path:
        """The console log's twin in private state, to restore it if the log folder is wiped."""
        return self.state_dir / "consoles" / f"{run_id}.log"

    def ignored(self) -> list[str]:
        """Patterns (relative to the work tree) for every file Genesis writes in the project."""
        rel = []
        for path, suffix in ((self.breaker_file, "*"), (self.log_dir, "/"), (self.stop_flag, "")):
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


def heal_dir(path: Path) -> str | None:
    """Make path a private directory again, whatever an agent did to it; say what was fixed.

    Never a refusal that ends the night: a missing folder is recreated, a loose mode reset
    to 0700, a symlink or file planted in its place (or a folder that is not ours) moved
    aside. Only UnsafeDir when even that fails.
    """
    path = Path(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        private_dir(path)
        return f"{path} was missing; recreated"
    fixed = None
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        aside = path.with_name(f"{path.name}.tampered-{os.getpid()}-{st.st_ino}")
        os.rename(path, aside)
        private_dir(path)
        return f"{path} was replaced by something that is not our folder; moved it aside to {aside}"
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(path, 0o700)
        fixed = f"{path} had mode {stat.S_IMODE(st.st_mode):o}; reset to 700"
    return fixed


def ensure_git_excludes(layout: Layout) -> list[str]:
    """Add Genesis's files to the repository's info/exclude (never the user's .gitignore)."""
    return add_git_excludes(layout.project, layout.ignored())


def add_git_excludes(project: Path, patterns: list[str]) -> list[str]:
    """Append the patterns missing from the repository's info/exclude; return them."""

    done = run_git(project, ["rev-parse", "--git-path", "info/exclude"], timeout=GIT_TIMEOUT)
    if done.returncode != 0:
        raise GitFailed(f"git rev-parse --git-path info/exclude failed in {project}: {done.stderr}")
    out = done.text.strip()
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

"""The configuration every git command of Genesis runs with: one the agent cannot reach.

Genesis runs git outside the box, in a work tree the agent writes, and git runs programs
its configuration names (a filter's clean command on `git add`, a hook, fsmonitor, a diff
or merge driver, a credential helper). So git runs here with no system or global config
and no global or system attributes; hooks, fsmonitor and every other program key are
turned off on the command line (which git reads last); and every program key the
repository's own config names (includes followed) is overridden by one that runs nothing
(an empty filter command is no filter; measured on git 2.39). What the user relies on is
put back from the user's settings as they were at the run's start (identity, signing,
ssh, credential helpers, ignore file, line endings, safe directories, git-lfs when it
is the real git-lfs): kept in Genesis's state, so a phase cannot change who Genesis's
commits are signed by. Without a run (a command of its own), they are read now.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from genesis.store.atomicio import CorruptFile, read_json, write_json

__all__ = ["NEUTRAL_ENV", "FIXED", "OPTIONS", "Settings", "runs_program", "record", "save", "load",
           "settings_file", "config_for", "args_for", "env_for", "git_dir_of", "common_dir_of", "hooks_dir",
           "neutralisers", "read_config", "lfs_line", "forget"]

SETTINGS_FILE = "git-settings.json"
READ_TIMEOUT = 10.0

# No system or global config or attributes; git never asks on a terminal.
NEUTRAL_ENV: Mapping[str, str] = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
                                  "GIT_ATTR_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0"}

# What runs nothing, whatever the repository's config says: the command line wins.
FIXED: tuple[tuple[str, str], ...] = (
    ("core.hooksPath", os.devnull), ("core.fsmonitor", "false"), ("core.attributesFile", os.devnull),
    ("core.pager", "cat"), ("core.editor", ":"), ("core.askPass", ""), ("core.gitProxy", "none"),
    ("credential.helper", ""),  # an empty helper empties the list so far
    ("protocol.ext.allow", "never"), ("gc.auto", "0"), ("maintenance.auto", "false"),
    ("commit.gpgSign", "false"), ("tag.gpgSign", "false"),
    ("gpg.program", "gpg"), ("gpg.openpgp.program", "gpg"), ("gpg.x509.program", "gpgsm"),
    ("gpg.ssh.program", "ssh-keygen"),
)

# Options that keep the programs a config can name but not override out of these commands:
# external diffs, and the pack programs of a remote (git takes a remote's first one, not the last).
OPTIONS: Mapping[str, tuple[str, ...]] = {
    "diff": ("--no-ext-diff", "--no-textconv"), "log": ("--no-ext-diff", "--no-textconv"),
    "show": ("--no-ext-diff", "--no-textconv"), "push": ("--receive-pack=git-receive-pack",),
    "fetch": ("--upload-pack=git-upload-pack",), "pull": ("--upload-pack=git-upload-pack",),
    "clone": ("--upload-pack=git-upload-pack",), "ls-remote": ("--upload-pack=git-upload-pack",),
}

# The user's settings kept from the run's start (keys as `git config --list` names them).
KEPT = frozenset({
    "user.name", "user.email", "author.name", "author.email", "committer.name", "committer.email",
    "user.signingkey", "commit.gpgsign", "tag.gpgsign", "gpg.format", "gpg.program", "gpg.openpgp.program",
    "gpg.x509.program", "gpg.ssh.program", "gpg.ssh.defaultkeycommand", "gpg.ssh.allowedsignersfile",
    "core.sshcommand", "core.excludesfile", "core.autocrlf", "core.eol", "core.safecrlf", "core.hookspath",
    "credential.helper", "credential.username", "credential.usehttppath", "safe.directory",
})
KEPT_PREFIXES = ("http.", "url.")
LFS = "git-lfs"
MERGE_AS_TEXT = "git merge-file -L ours -L base -L theirs --marker-size=%L %A %O %B"  # git's own text merge


def _split(key: str) -> tuple[str, str, str]:
    """(section, subsection, variable); section and variable lowercased as git compares them."""
    section, _, rest = key.partition(".")
    sub, _, var = rest.rpartition(".")
    return section.lower(), sub, var.lower()


def runs_program(key: str, value: str = "") -> bool:
    """Whether a config key makes git run a program (or read config or hooks from elsewhere)."""
    section, sub, var = _split(key)
    if section == "filter":
        return var in ("clean", "smudge", "process")
    if section == "diff":
        return var in ("textconv", "command", "external")
    if section == "merge":
        return bool(sub) and var == "driver"
    if section == "core":
        return var in ("fsmonitor", "hookspath", "sshcommand", "editor", "pager", "askpass", "gitproxy",
                       "alternaterefscommand", "worktree", "attributesfile")
    if section == "credential":
        return var == "helper"
    if section == "gpg":
        return var in ("program", "defaultkeycommand")
    if section in ("include", "includeif"):
        return var == "path"
    if section in ("uploadpack", "sequence", "pager"):
        return section != "uploadpack" or var == "packobjectshook"
    if section == "remote":
        return var in ("uploadpack", "receivepack", "vcs")
    if section == "trailer":
        return var in ("cmd", "command")
    if section == "protocol":
        return var == "allow" and value.lower() == "always"
    if section in ("alias", "submodule"):
        return value.startswith("!")
    return False


def _neutral(key: str) -> list[tuple[str, str]]:
    """The command-line entries that make key run nothing."""
    section, sub, var = _split(key)
    if section == "filter" and var in ("clean", "smudge", "process"):
        return [(f"filter.{sub}.{var}", ""), (f"filter.{sub}.required", "false")]
    if section == "diff" and sub and var == "textconv":
        return [(f"diff.{sub}.textconv", "cat")]  # an empty one is an error where git converts
    if section == "merge" and sub and var == "driver":
        return [(f"merge.{sub}.driver", MERGE_AS_TEXT)]
    if section == "core" and var == "sshcommand":  # GIT_SSH, which a config's sshCommand would beat, or ssh
        return [("core.sshCommand", os.environ.get("GIT_SSH_COMMAND") or os.environ.get("GIT_SSH") or "ssh")]
    if section == "trailer" and sub and var in ("cmd", "command"):
        return [(f"trailer.{sub}.{var}", "")]
    return []  # the rest: FIXED, or a command-line option (OPTIONS), or never run by Genesis


# --- where the repository keeps its files, read without running git -------------------------

def git_dir_of(project: Path) -> Path | None:
    """The git dir of the work tree whose top is project (`.git`, or where a `.git` file points)."""
    dot = Path(project) / ".git"
    try:
        if dot.is_dir():
            return dot
        text = dot.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None
    if not text.startswith("gitdir:"):
        return None
    path = Path(text[len("gitdir:"):].strip())
    return path if path.is_absolute() else Path(project) / path


def _config_dir_of(path: Path) -> Path | None:
    """Where the config files of the repository at path are: a work tree's git dir
    (git_dir_of), or path itself when it is a bare repository (Genesis's ref store). For the
    neutralisers' stamp only: what is read there is git's own view of the config."""
    found = git_dir_of(path)
    if found is None and (Path(path) / "HEAD").is_file() and (Path(path) / "config").is_file():
        return Path(path)
    return found


def common_dir_of(git_dir: Path) -> Path:
    try:
        named = (git_dir / "commondir").read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return git_dir
    return Path(named) if os.path.isabs(named) else git_dir / named


def hooks_dir(project: Path) -> str:
    """Where the user's hooks are, as the run started (for GIT_HOOKS): core.hooksPath or .git/hooks."""
    named = dict(_settings(Path(project)).entries).get("core.hookspath", "")
    if named:
        return os.path.expanduser(named)
    git_dir = git_dir_of(Path(project))
    return str(common_dir_of(git_dir) / "hooks") if git_dir else "hooks"


# --- the user's settings ---------------------------------------------------------------------

@dataclass(frozen=True)
class Settings:
    entries: tuple[tuple[str, str], ...] = ()   # (key, value), in git's order; multi-valued keys repeat
    lfs: str = ""                                # the git-lfs whose filters run ("": none do)

    def config(self) -> list[tuple[str, str]]:
        """As command-line config; the hooks' place only where hooks are asked for (hooks_dir)."""
        return [(k, v) for k, v in self.entries if k.lower() != "core.hookspath"]


def read_config(project: Path, env: Mapping[str, str], *args: str) -> list[tuple[str, str]] | None:
    """`git config --list` as (key, value) pairs under env; None if git could not say. Reading
    config runs nothing (an include is a file read)."""
    try:
        done = subprocess.run(["git", "config", "--list", "--null", *args], cwd=project, env=dict(env),
                              stdin=subprocess.DEVNULL, capture_output=True, timeout=READ_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    pairs = []
    for entry in done.stdout.split(b"\0"):
        if entry:
            key, _, value = os.fsdecode(entry).partition("\n")
            pairs.append((key, value))
    return pairs


def _lfs_filter(pairs: list[tuple[str, str]]) -> tuple[list[tuple[str, str]], str]:
    """The lfs filter as configured, when its commands are git-lfs's own and git-lfs is on PATH:
    then with git-lfs named by its full path (found now, so a later PATH does not change it)."""
    found = shutil.which(LFS)
    mine = [(k, v) for k, v in pairs if _split(k)[:2] == ("filter", "lfs")]
    commands = [v for k, v in mine if _split(k)[2] in ("clean", "smudge", "process")]
    if not found or not commands or not all(v.split(" ", 1)[0] == LFS for v in commands):
        return [], ""
    return [(k, found + v[len(LFS):] if v.startswith(LFS + " ") else v) for k, v in mine], found


def record(project: Path, environ: Mapping[str, str] | None = None) -> Settings:
    """The user's settings now (every scope: this is before any agent runs)."""
    pairs = read_config(Path(project), {**(environ or os.environ), "GIT_TERMINAL_PROMPT": "0"}) or []
    kept = [(k, v) for k, v in pairs if k.lower() in KEPT or k.lower().startswith(KEPT_PREFIXES)
            or (_split(k)[0] == "credential" and _split(k)[2] == "helper")]
    lfs, program = _lfs_filter(pairs)
    return Settings(tuple(kept + lfs), program)


def lfs_line(settings: Settings) -> str:
    if settings.lfs:
        return f"git-lfs: its filters run in Genesis's git as configured at the start ({settings.lfs})"
    return ""


def settings_file(state_dir: Path) -> Path:
    return Path(state_dir) / SETTINGS_FILE


def save(path: Path, run_id: str, settings: Settings) -> None:
    write_json(path, {"run_id": run_id, "entries": [list(e) for e in settings.entries], "lfs": settings.lfs})


def load(path: Path) -> Settings | None:
    try:
        data = read_json(path)
    except (CorruptFile, OSError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("entries"), list):
        return None
    entries = tuple((str(e[0]), str(e[1])) for e in data["entries"] if isinstance(e, list) and len(e) == 2)
    return Settings(entries, str(data.get("lfs") or ""))


_SETTINGS: dict[str, tuple[object, Settings]] = {}
_NEUTRALISERS: dict[str, tuple[object, list[tuple[str, str]]]] = {}


def forget() -> None:
    """Drop what this process has read (tests; a run's start)."""
    _SETTINGS.clear()
    _NEUTRALISERS.clear()


def _stamp(*paths: Path) -> tuple:
    """What changes when a file is written, moved or touched (ctime cannot be set back)."""
    out = []
    for path in paths:
        try:
            st = os.stat(path)
            out.append((st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
        except OSError:
            out.append(None)
    return tuple(out)


def _settings(project: Path) -> Settings:
    git_dir = git_dir_of(project)
    path = settings_file(git_dir / "genesis") if git_dir else None
    key = str(project)
    saved = _stamp(path) if path else (None,)
    # Without a run's record, read again when a config file changed.
    home = Path(os.environ.get("HOME") or "~").expanduser()
    xdg = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config")
    stamp = saved + (() if saved != (None,) else _stamp(
        *((git_dir / "config", common_dir_of(git_dir) / "config") if git_dir else ()),
        home / ".gitconfig", xdg / "git" / "config"))
    held = _SETTINGS.get(key)
    if held is not None and held[0] == stamp:
        return held[1]
    settings = (load(path) if saved != (None,) else None) or record(project)
    _SETTINGS[key] = (stamp, settings)
    return settings


def neutralisers(project: Path) -> list[tuple[str, str]]:
    """The entries that silence every program key the repository's config names now (read again
    whenever a config file changed; every time when it includes other files)."""
    git_dir = _config_dir_of(project)
    stamp = None
    if git_dir is not None:
        common = common_dir_of(git_dir)
        stamp = _stamp(git_dir / "config", common / "config", git_dir / "config.worktree",
                       common / "config.worktree")
        held = _NEUTRALISERS.get(str(project))
        if held is not None and held[0] == stamp:
            return held[1]
    pairs = read_config(project, {**os.environ, **NEUTRAL_ENV}) or []
    out: list[tuple[str, str]] = []
    for key, value in pairs:
        if runs_program(key, value):
            out += [e for e in _neutral(key) if e not in out]
    if stamp is not None and not any(_split(k)[0] in ("include", "includeif") for k, _ in pairs):
        _NEUTRALISERS[str(project)] = (stamp, out)
    return out


def args_for(args: list[str] | tuple[str, ...]) -> list[str]:
    """The command with the options that keep what config cannot turn off from running (OPTIONS)."""
    args = list(args)
    return [args[0], *OPTIONS[args[0]], *args[1:]] if args and args[0] in OPTIONS else args


def config_for(project: Path) -> list[tuple[str, str]]:
    """Command-line config for a git command in project: nothing runs, the user's settings kept."""
    project = Path(project)
    return [*FIXED, *neutralisers(project), *_settings(project).config()]


def env_for(project: Path) -> dict[str, str]:
    """The environment entries (NEUTRAL_ENV and the config as GIT_CONFIG_*) for a git Genesis
    does not start itself (GitPython)."""
    env = dict(NEUTRAL_ENV)
    config = config_for(project)
    for n, (key, value) in enumerate(config):
        env[f"GIT_CONFIG_KEY_{n}"] = key
        env[f"GIT_CONFIG_VALUE_{n}"] = value
    env["GIT_CONFIG_COUNT"] = str(len(config))
    return env

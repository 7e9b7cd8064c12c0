"""Git configuration an agent planted during a phase: found, kept as evidence, undone, named.

The agent writes the repository's git dir and HOME, and what it plants there would run
outside the box: a filter or driver in `.git/config` or `~/.gitconfig` (Genesis's own git
turns them off: gitenv.py; the user's git in every repository would not), a hook the
user's first `git commit` of the morning runs, an `info/attributes` that points files at a
filter. So the git files are read at a phase's start and compared after it: a program key
that is new in a config file is removed again (the rest of the file, a remote or an
upstream, stays as it was left), a new or changed hook is taken out (the start's put
back), an attributes file is put back as it was, and each is kept under the run's log
folder. A `.gitattributes` that newly names a filter, diff or merge driver
is the agent's work and is committed (with no driver running), but named.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from genesis.repo import gitenv

__all__ = ["GitFiles", "Planted", "snapshot", "undo", "MAX_HOOK_BYTES"]

MAX_HOOK_BYTES = 1 << 20    # a hook bigger than this is kept by digest only (not put back)
DRIVER = re.compile(rb"(?:^|\s)(filter|diff|merge)=([^\s]+)")
READ_TIMEOUT = 10.0


@dataclass(frozen=True)
class GitFiles:
    """The git files an agent could plant code in, as they were."""
    configs: Mapping[str, bytes | None]            # each config file's bytes (None: absent), by path
    attribute_files: Mapping[str, bytes | None]    # info/attributes and the user's global attributes
    hooks: Mapping[str, tuple[int, str, bytes | None]] = field(default_factory=dict)  # name: mode, sha256, bytes
    attributes: bytes | None = None                # the work tree's top .gitattributes
    hooks_dir: str = ""
    shown: Mapping[str, str] = field(default_factory=dict)  # path: as the user knows it (.git/config, ~/.gitconfig)


@dataclass(frozen=True)
class Planted:
    where: str          # the file, as the user knows it (.git/config, .git/hooks/pre-commit)
    what: str           # what was planted there
    undone: bool
    kept: str = ""      # the copy kept as evidence

    def line(self) -> str:
        done = "undone" if self.undone else "committed with no driver run by Genesis's git"
        kept = f", kept at {self.kept}" if self.kept else ""
        return f"the agent planted {self.what} in {self.where}; {done}{kept}"

    def record(self) -> dict:
        return {"where": self.where, "what": self.what, "undone": self.undone, "kept": self.kept}


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None


def _places(project: Path, environ: Mapping[str, str]) -> tuple[dict[Path, str], dict[Path, str], Path | None]:
    """The config files and attribute files (each with how it is shown), and the hooks folder.
    The user's global ones too: HOME is writable in the box, and they reach every repository."""
    home = Path(environ.get("HOME") or os.path.expanduser("~"))
    xdg = Path(environ.get("XDG_CONFIG_HOME") or home / ".config")
    configs = {home / ".gitconfig": "~/.gitconfig", xdg / "git" / "config": "~/.config/git/config"}
    attributes = {xdg / "git" / "attributes": "~/.config/git/attributes"}
    git_dir = gitenv.git_dir_of(project)
    if git_dir is None:
        return configs, attributes, None
    common = gitenv.common_dir_of(git_dir)
    configs = {common / "config": ".git/config", common / "config.worktree": ".git/config.worktree",
               git_dir / "config.worktree": ".git/config.worktree", **configs}
    return configs, {common / "info" / "attributes": ".git/info/attributes", **attributes}, common / "hooks"


def _hooks(folder: Path) -> dict[str, tuple[int, str, bytes | None]]:
    found = {}
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return found
    for entry in entries:
        if entry.name.endswith(".sample") or not entry.is_file(follow_symlinks=False) and not entry.is_symlink():
            continue
        try:
            st = entry.stat(follow_symlinks=False)
            data = os.readlink(entry.path).encode() if entry.is_symlink() else Path(entry.path).read_bytes()
        except OSError:
            continue
        kept = data if len(data) <= MAX_HOOK_BYTES else None
        found[entry.name] = (st.st_mode, hashlib.sha256(data).hexdigest(), kept)
    return found


def snapshot(project: Path, environ: Mapping[str, str] | None = None) -> GitFiles:
    configs, attributes, hooks = _places(Path(project), os.environ if environ is None else environ)
    return GitFiles({str(p): _read(p) for p in configs}, {str(p): _read(p) for p in attributes},
                    _hooks(hooks) if hooks else {}, _read(Path(project) / ".gitattributes"),
                    str(hooks) if hooks else "", {str(p): shown for p, shown in {**configs, **attributes}.items()})


def _evidence_name(shown: str) -> str:
    return shown.lstrip("~/.").replace("/", "-") + ".found"


def _entries(data: bytes | None) -> list[tuple[str, str]]:
    """A config file's (key, value) pairs, includes not followed (reading runs nothing)."""
    if not data:
        return []
    with tempfile.NamedTemporaryFile(prefix="genesis-config-") as copy:
        copy.write(data)
        copy.flush()
        return gitenv.read_config(Path(tempfile.gettempdir()), {**os.environ, **gitenv.NEUTRAL_ENV},
                                  "--file", copy.name, "--no-includes") or []


def _config_git(path: Path, *args: str) -> None:
    subprocess.run(["git", "config", "--file", str(path), *args], env={**os.environ, **gitenv.NEUTRAL_ENV},
                   stdin=subprocess.DEVNULL, capture_output=True, timeout=READ_TIMEOUT, check=False)


def describe(key: str, value: str) -> str:
    section, _, rest = key.partition(".")
    sub, _, var = rest.rpartition(".")
    section, var = section.lower(), var.lower()
    if section == "filter":
        return f"a git {var} filter `{sub}` ({key} = {value[:80]!r})"
    if section in ("diff", "merge") and sub:
        return f"a {section} driver `{sub}` ({key} = {value[:80]!r})"
    return f"{key} = {value[:80]!r}"


def _keep(source: Path | bytes, evidence: Path, name: str) -> str:
    evidence.mkdir(parents=True, exist_ok=True)
    target = evidence / name
    if isinstance(source, bytes):
        target.write_bytes(source)
    else:
        shutil.copyfile(source, target, follow_symlinks=False)
    return str(target)


def _undo_config(path: Path, shown: str, start: bytes | None, evidence: Path) -> list[Planted]:
    now = _read(path)
    if now == start:
        return []
    before = set(_entries(start))
    planted = [(k, v) for k, v in _entries(now) if gitenv.runs_program(k, v) and (k, v) not in before]
    if not planted:
        return []
    kept = _keep(now or b"", evidence, _evidence_name(shown))
    for key in dict.fromkeys(k for k, _ in planted):
        _config_git(path, "--unset-all", key)
        for k, v in before:
            if k == key:
                _config_git(path, "--add", key, v)
    return [Planted(shown, describe(k, v), _entries(_read(path)).count((k, v)) == 0, kept) for k, v in planted]


def _undo_hooks(start: GitFiles, evidence: Path) -> list[Planted]:
    folder = Path(start.hooks_dir)
    found = []
    for name, (mode, digest, _) in _hooks(folder).items():
        was = start.hooks.get(name)
        if was is not None and was[:2] == (mode, digest):
            continue
        path = folder / name
        kept = _keep(path, evidence / "hooks", name)
        path.unlink()
        if was is not None and was[2] is not None and stat.S_ISLNK(was[0]):
            os.symlink(os.fsdecode(was[2]), path)
        elif was is not None and was[2] is not None:
            path.write_bytes(was[2])
            os.chmod(path, was[0] & 0o7777)
        what = f"a changed git hook `{name}`" if was is not None else f"a git hook `{name}`"
        found.append(Planted(f".git/hooks/{name}", what, True, kept))
    return found


def _undo_attributes(path: Path, shown: str, start: bytes | None, evidence: Path) -> list[Planted]:
    now = _read(path)
    if now == start or not now and not start:
        return []
    kept = _keep(now or b"", evidence, _evidence_name(shown))
    if start is None:
        path.unlink(missing_ok=True)
    else:
        path.write_bytes(start)
    drivers = sorted({f"{m[0].decode()}={m[1].decode(errors='replace')}" for m in DRIVER.findall(now or b"")})
    what = f"git attributes ({', '.join(drivers)})" if drivers else "git attributes"
    return [Planted(shown, what, True, kept)]


def _named_attributes(project: Path, start: GitFiles) -> list[Planted]:
    now = _read(Path(project) / ".gitattributes")
    new = set(DRIVER.findall(now or b"")) - set(DRIVER.findall(start.attributes or b""))
    if not new:
        return []
    drivers = ", ".join(sorted(f"{k.decode()}={v.decode(errors='replace')}" for k, v in new))
    return [Planted(".gitattributes", f"attributes naming a driver ({drivers})", False)]


def undo(project: Path, start: GitFiles, evidence: Path) -> list[Planted]:
    """What the agent planted since start: undone where it is git's own file, each kept under
    evidence (made only when something is kept)."""
    found: list[Planted] = []
    for path, data in start.configs.items():
        found += _undo_config(Path(path), start.shown[path], data, evidence)
    if start.hooks_dir:
        found += _undo_hooks(start, evidence)
    for path, data in start.attribute_files.items():
        found += _undo_attributes(Path(path), start.shown[path], data, evidence)
    return found + _named_attributes(Path(project), start)

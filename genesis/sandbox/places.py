"""What the agent's box must keep visible, and what it must keep out of the agent's hands.

Under bubblewrap the agent gets a private /tmp: a fresh tmpfs, so no pre-existing server
socket there (tmux's, an editor's, a database's) is reachable. What the agent was given
that lives under /tmp (the project, HOME, TMPDIR, the agent's program and PATH folders, the
install root of the program and of its interpreter, a file its command line or environment
names) is bound back in; a socket never is.

In a repository with linked worktrees (`git worktree add`, a fleet's children) the agent's
own git must write the common git dir (objects, refs) for its commits, while the other work
trees (the main one, the siblings, the default root `<common dir>/genesis-worktrees`), their
git dirs and Genesis's state in the common dir (`<common dir>/genesis`: the main loop's and
the fleet's) are kept read-only. `layers` says it in mount order, parents first.
"""

from __future__ import annotations

import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from genesis.sandbox.home import Allowed, kept
from genesis.sandbox.sockets import Hidden, hidden

__all__ = ["Places", "places_for", "code_paths", "install_paths", "worktree_layers", "TMP", "WORKTREE_ROOT"]

TMP = "/tmp"
WORKTREE_ROOT = "genesis-worktrees"   # the fleet's worktrees, by default, inside the common git dir
MAX_WORKTREES = 512                   # linked worktrees read, at most


@dataclass(frozen=True)
class Places:
    project: str
    cwd: str
    home: str | None
    tmpdir: str | None
    visible: tuple[str, ...]       # under /tmp, bound again inside the private /tmp (parents first)
    protected: tuple[str, ...]     # read-only in the box: Genesis's state, its settings file, its code
    beats: str                     # the heartbeat folder inside the state: writable again (the hook beats)
    # Linked worktrees: (path, writable) in mount order, between `visible` and `protected`.
    layers: tuple[tuple[str, bool], ...] = ()
    git_writable: tuple[str, ...] = ()  # where the agent's git writes in the common git dir (for Landlock)
    # The private HOME (home.py): HOME covered, what of it is kept (path, writable) in mount order,
    # the credentials files inside kept caches covered again; the sockets covered (sockets.py);
    # what GENESIS_BOX_ALLOW gives back, last.
    private_home: str | None = None
    home_kept: tuple[tuple[str, bool], ...] = ()
    home_hidden: tuple[str, ...] = ()
    hidden: Hidden = Hidden((), ())
    allow: tuple[Allowed, ...] = ()
    code: tuple[str, ...] = ()        # Genesis's code (code_paths), outermost first, wherever it is
    code_open: tuple[str, ...] = ()   # of it, what cannot be made read-only: it holds the project, HOME or TMPDIR
    # (what lies inside such a folder is still protected by its own entry: the package, the venv)


def _real(path: str | Path | None) -> str | None:
    if not path:
        return None
    try:
        return os.path.realpath(path)
    except (OSError, ValueError):
        return None


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def _exists_not_socket(path: str) -> bool:
    try:
        return not stat.S_ISSOCK(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def _holds_socket(folder: str, most: int = 1000) -> bool:
    """Whether a folder holds a socket among its first `most` entries (or cannot be read)."""
    try:
        with os.scandir(folder) as entries:
            for n, entry in enumerate(entries):
                if n >= most or (not entry.is_symlink() and stat.S_ISSOCK(entry.stat().st_mode)):
                    return True
    except OSError:
        return True
    return False


def _named(value: str) -> str | None:
    """What an environment value under /tmp asks to keep: the path if it exists (a socket never),
    else the folder it would be made in (a test's or a tool's output file), unless that is /tmp
    itself or holds a socket."""
    path = _real(value)
    if path is None or not _under(path, TMP) or path == TMP:
        return None
    if os.path.lexists(path):
        if not _exists_not_socket(path) or (os.path.isdir(path) and _holds_socket(path)):
            return None
        return path
    parent = os.path.dirname(path)
    if parent != TMP and os.path.isdir(parent) and not _holds_socket(parent):
        return parent
    return None


def _outermost(paths: list[str]) -> tuple[str, ...]:
    """Each path once, without those inside another of them, parents first."""
    kept: list[str] = []
    for path in sorted(set(paths), key=lambda p: (p.count("/"), p)):
        if not any(_under(path, top) for top in kept):
            kept.append(path)
    return tuple(kept)


def code_paths(package: Path) -> list[str]:
    """Every file that becomes code in a Genesis process: the package folder (the hook script is
    in it), the virtualenv running it, the base interpreter that venv was made from (its stdlib,
    where a `sitecustomize.py` runs in every process), every folder Python imports from (site
    dirs with their `.pth` files, a user site with `usercustomize.py`), and beside an editable
    checkout its loop script and `.venv`."""
    found = [str(package), sys.prefix, sys.base_prefix]
    found += [p for p in sys.path if p and os.path.isabs(p) and os.path.isdir(p)]
    home = package.parent
    for name in ("start-multi-agent-loop.sh", ".venv"):
        if (home / name).exists():
            found.append(str(home / name))
    return found


def _program(argv: tuple[str, ...], env: Mapping[str, str], cwd: str) -> str | None:
    """The program argv runs, as its command or PATH names it (a symlink not yet followed)."""
    if not argv:
        return None
    program = argv[0]
    if "/" in program:
        return os.path.normpath(os.path.join(cwd, program))
    for folder in env.get("PATH", "").split(os.pathsep):
        candidate = os.path.join(folder, program)
        if folder and os.access(candidate, os.X_OK):
            return os.path.abspath(candidate)
    return None


def _root_of(path: str | None) -> str | None:
    """The install root a program's path lies in: the outermost `node_modules` (an npm package
    and its dependencies), or the prefix above its `bin` folder when that holds a venv
    (pyvenv.cfg) or an installation (lib/)."""
    if not path:
        return None
    at = path.find("/node_modules/")
    if at >= 0:
        return path[:at] + "/node_modules"
    folder = os.path.dirname(path)
    prefix = os.path.dirname(folder)
    if os.path.basename(folder) == "bin" and prefix != "/" and (
            os.path.isfile(os.path.join(prefix, "pyvenv.cfg")) or os.path.isdir(os.path.join(prefix, "lib"))):
        return prefix
    return None


def _interpreter(script: str, env: Mapping[str, str]) -> str | None:
    """The interpreter a script's `#!` line names (through `env`, found on PATH), or None."""
    line = _read_small(script)
    if not line or not line.startswith("#!"):
        return None
    words = line[2:].split()
    if words and os.path.basename(words[0]) == "env":
        named = next((w for w in words[1:] if not w.startswith("-") and "=" not in w), None)
        return _program((named,), env, "/") if named else None
    return words[0] if words else None


def _venv_base(root: str | None) -> str | None:
    """The base installation a venv was made from (its pyvenv.cfg's `home`, the folder above it)."""
    if not root:
        return None
    for line in (_read_lines(os.path.join(root, "pyvenv.cfg")) or []):
        key, _, value = line.partition("=")
        if key.strip() == "home" and value.strip():
            home = value.strip()
            return os.path.dirname(home) if os.path.basename(home) == "bin" else home
    return None


def install_paths(program: str | None, env: Mapping[str, str]) -> list[str]:
    """What a program needs to run beyond its own file: its folder (as named and as found), its
    install root (a venv with its base, an npm prefix's node_modules), and the same for the
    interpreter of its `#!` line (node, python). An agent installed under /tmp dies without them."""
    if not program:
        return []
    real = _real(program)
    interpreter = _interpreter(real, env) if real else None
    named = [p for p in (program, real, interpreter, _real(interpreter)) if p]
    roots = [root for root in map(_root_of, named) if root]
    found = [os.path.dirname(p) for p in named] + roots + [_venv_base(root) for root in roots]
    return [p for p in map(_real, found) if p]


def _read_small(path: str) -> str | None:
    """A small file's first line (git's commondir or gitdir, a script's `#!`)."""
    lines = _read_lines(path)
    return lines[0].strip() if lines and lines[0].strip() else None


def _read_lines(path: str) -> list[str] | None:
    """A small file's first 4 KiB, as lines: bounded, never a FIFO or a device, nor a symlink."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data.decode("utf-8", "replace").splitlines()


def _common_of(git_dir: str) -> str:
    """The common git dir of a work tree's git dir: itself, or where its `commondir` points."""
    pointed = _read_small(os.path.join(git_dir, "commondir"))
    return (_real(os.path.join(git_dir, pointed)) or git_dir) if pointed else git_dir


def _linked_trees(common: str) -> list[tuple[str, str]]:
    """(admin dir, work tree) of each linked worktree the common dir lists."""
    found: list[tuple[str, str]] = []
    try:
        with os.scandir(os.path.join(common, "worktrees")) as entries:
            for n, entry in enumerate(entries):
                if n >= MAX_WORKTREES:
                    break
                if entry.is_symlink() or not entry.is_dir():
                    continue
                pointed = _read_small(os.path.join(entry.path, "gitdir"))
                tree = _real(os.path.dirname(pointed)) if pointed and os.path.isabs(pointed) else None
                found.append((entry.path, tree or ""))
    except OSError:
        pass
    return found


def worktree_layers(project: str, git_dir: str, keep: tuple[str, ...]) -> tuple[tuple[tuple[str, bool], ...],
                                                                               tuple[str, ...], tuple[str, ...]]:
    """For a repository with linked worktrees: the mount layers (path, writable), parents first;
    what must be visible for them; where the agent's git writes in the common dir. Nothing for a
    repository without any. A read-only layer never covers `keep` (HOME, TMPDIR) or the root."""
    common = _common_of(git_dir)
    linked = _linked_trees(common)
    if common == git_dir and not linked:
        return (), (), ()
    main = os.path.dirname(common) if os.path.basename(common) == ".git" else None
    if main and _real(os.path.join(main, ".git")) != common:
        main = None
    ro = [main] if main and main != project else []
    ro += [os.path.join(common, "genesis") if common != git_dir else "", os.path.join(common, WORKTREE_ROOT)]
    ro += [p for admin, tree in linked if admin != git_dir for p in (admin, tree)]
    rw = [common, project] if common != git_dir else [project]

    def fits(path: str) -> bool:
        # A read-only layer over the project or the common dir is fine only where they are writable again.
        covers = [p for p in (git_dir, common) if _under(p, path)
                  and not any(_under(p, r) and _under(r, path) and r != path for r in rw)]
        return (bool(path) and path not in ("/", project) and os.path.isdir(path) and not covers
                and not any(k and _under(k, path) for k in keep))

    ro = [p for p in ro if fits(p)]
    if not ro:
        return (), (), ()
    layers = [(p, False) for p in dict.fromkeys(ro)] + [(p, True) for p in rw]
    # Parents first; at one depth, a writable layer after a read-only one.
    layers.sort(key=lambda layer: (layer[0].rstrip("/").count("/"), layer[1]))
    visible = tuple(p for p in (main, common) if p)
    writable = (tuple(os.path.join(common, d) for d in ("objects", "refs", "logs")) + (git_dir,)
                if common != git_dir else ())
    return tuple(layers), visible, writable


def _private_home(home: str | None, project: str) -> str | None:
    """HOME, when the box can make it private: a folder, not the root nor inside the project."""
    return home if home and home != "/" and not _under(home, project) and os.path.isdir(home) else None


def places_for(project: Path, state_dir: Path, heartbeat_dir: Path, log_dir: Path, conf: Path,
               package: Path, argv: tuple[str, ...], env: Mapping[str, str], shared: Path | None = None,
               agent_paths: tuple[str | Path, ...] = (), allow: tuple[Allowed, ...] = ()) -> Places:
    """The places of one agent launch. Code inside the project stays writable: a project that
    is Genesis's own checkout is the agent's work (only its state is kept from it then).
    `agent_paths`: the CLI's own places in HOME (its adapter's box_paths)."""
    proj = _real(project) or str(project)
    home, tmpdir = _real(env.get("HOME")), _real(env.get("TMPDIR"))
    private = _private_home(home, proj)
    own = [proj, tmpdir, _real(log_dir), _real(state_dir)]
    wanted = [*own, None if private else home]
    state = _real(state_dir) or str(state_dir)
    layers, linked, git_writable = worktree_layers(proj, os.path.dirname(state), tuple(p for p in (home, tmpdir) if p))
    wanted += linked
    own += linked
    runs = install_paths(_program(argv, env, proj), env)
    runs += [_real(p) for p in env.get("PATH", "").split(os.pathsep) if p]
    runs.append(_real(sys.base_prefix))  # the interpreter under Genesis's venv (pyenv, uv...): the hook runs on it
    wanted += runs
    named = [*argv[1:], *env.values()]  # a script the command runs, a file the environment names
    wanted += [_named(v) for v in named if v.startswith(TMP + "/") and "\n" not in v and len(v) < 4096]
    visible = _outermost([p for p in wanted if p and _under(p, TMP) and p != TMP and _exists_not_socket(p)])
    protected = [state]
    if conf.is_file():
        protected.append(_real(conf) or str(conf))
    found = [p for p in dict.fromkeys(map(_real, code_paths(package))) if p and not _under(p, proj)]
    needed = [p for p in (proj, home, tmpdir, _real(log_dir), state) if p]
    code_open = tuple(c for c in found if c == "/" or any(_under(n, c) for n in needed))
    code = _outermost([c for c in found if c not in code_open])
    protected += code
    if shared is not None and os.path.isdir(shared) and not os.path.islink(shared):
        protected.append(_real(shared) or str(shared))  # the account store: no agent plants or lifts a limit
    home_kept, home_hidden = ((), ())
    if private:
        home_kept, home_hidden = kept(private, [p for p in (_real(a) for a in agent_paths) if p],
                                      [p for p in runs if p], writable=[p for p in own if p])
    return Places(proj, proj, home, tmpdir, visible, tuple(dict.fromkeys(protected)),
                  _real(heartbeat_dir) or str(heartbeat_dir), layers, git_writable, private, home_kept, home_hidden,
                  hidden(env, tuple(p for p in (TMP, private, proj) if p)), allow, code, code_open)

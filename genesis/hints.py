"""The `genesis` commands Genesis tells people to run, spelled so that they run as printed.

A hint names the `genesis` that runs now (its console script, else this Python with
`-m genesis`) and the project it is about as an absolute `--project`: pasted into any
terminal, from any directory (the Genesis checkout, where the README has users stand), it
acts on that project and not on the repository around the reader. Every message that
suggests a `genesis` command builds it here.
"""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import sys
from importlib.machinery import PathFinder
from pathlib import Path

__all__ = ["hint", "program"]

PACKAGE = Path(__file__).resolve().parent


def hint(project: Path | str, *args: str) -> str:
    """`genesis --project PROJECT ARGS...` as one shell command line: the genesis in use, the
    project's absolute path, every word quoted where the shell needs it."""
    return " ".join([program(), "--project", shlex.quote(os.path.abspath(project)), *map(shlex.quote, args)])


@functools.lru_cache(maxsize=None)
def program() -> str:
    """The genesis that runs now, as the first words of a command line: `genesis` when that is
    what PATH finds, else the console script's absolute path, else `python -m genesis`."""
    script = sys.argv[0] if sys.argv else ""
    if os.path.basename(script) == "genesis" and os.path.isfile(script):
        path = os.path.abspath(script)
        found = shutil.which("genesis")
        if found and os.path.realpath(found) == os.path.realpath(path):
            return "genesis"
        return shlex.quote(path)
    python = shlex.quote(sys.executable or "python3")
    if _importable_anywhere():
        return f"{python} -m genesis"
    return f"PYTHONPATH={shlex.quote(str(PACKAGE.parent))} {python} -m genesis"


def _importable_anywhere() -> bool:
    """Whether this Python imports this very package from any directory without PYTHONPATH
    (installed, or an editable install), as a pasted `python -m genesis` would."""
    borrowed = {os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
    borrowed.add(os.path.abspath(os.getcwd()))  # `-m` puts the working directory first
    paths = [p for p in sys.path if p and os.path.abspath(p) not in borrowed]
    for finder in sys.meta_path:
        try:
            if finder is PathFinder:
                spec = PathFinder.find_spec("genesis", paths)
            else:
                spec = finder.find_spec("genesis", None)  # type: ignore[union-attr]
        except (AttributeError, ImportError, OSError, ValueError):
            continue  # a finder of another kind: it does not find packages
        if spec is not None:
            return spec.origin is not None and Path(spec.origin).resolve().parent == PACKAGE
    return False

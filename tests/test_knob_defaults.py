"""Knob defaults live in one table (genesis/config.py's KNOBS): no module copies one.

A copy drifts: the table (and `genesis config show`, and the settings reference made from
it) says one thing while the code that reads the knob falls back on another. These tests
read the package's source and the shell scripts for a knob's name given a literal fallback:
`env.get("KNOB", "60")`, `get("KNOB") or "60"`, `{"KNOB": "60"}`, `${KNOB:-60}`; each names
the file and line. A module reads a default from the table (`config.default_of`) or from a
built Config.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from helpers import paths

from genesis.config import KNOBS, OLD_NAMES

PACKAGE = paths.ROOT / "genesis"
SCRIPTS = [paths.LOOP, *sorted((paths.ROOT / "hooks").glob("*.sh")), *sorted((PACKAGE / "data").glob("*.sh"))]
DEFAULTS = {k.name: k.default for k in KNOBS}
NAMES = frozenset(DEFAULTS) | frozenset(OLD_NAMES)
# ${NAME:-word}, ${NAME-word}, ${NAME:=word}, ${NAME=word}: a shell default for NAME.
SHELL_DEFAULT = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*):?[-=]([^}]*)\}")


def _knob(node: ast.AST) -> str | None:
    """The knob a node spells as a string literal, if any."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in NAMES:
        return node.value
    return None


def _literal(node: ast.AST) -> bool:
    """A literal that stands for a value: None and "" mean unset, not a default."""
    if isinstance(node, ast.Constant):
        return node.value is not None and node.value != ""
    return isinstance(node, ast.UnaryOp) and isinstance(node.operand, ast.Constant)   # -1


def _named(node: ast.AST) -> str | None:
    """The knob a value is read by: get("KNOB"), settings["KNOB"].value, env.get("KNOB")..."""
    for inner in ast.walk(node):
        if isinstance(inner, ast.Call) and inner.args and _knob(inner.args[0]):
            return _knob(inner.args[0])
        if isinstance(inner, ast.Subscript) and _knob(inner.slice):
            return _knob(inner.slice)
    return None


def copies(source: str) -> list[tuple[int, str, str]]:
    """(line, knob, how) for each literal default of a knob in one module's source."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name)):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
            if name in ("get", "getenv", "setdefault", "pop") and len(node.args) >= 2 and _knob(node.args[0]) \
                    and _literal(node.args[1]):
                found.append((node.lineno, _knob(node.args[0]), f"{name}() with a literal fallback"))
        elif isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
            knob = _named(node.values[0])
            if knob and any(_literal(value) for value in node.values[1:]):
                found.append((node.lineno, knob, "`or` a literal"))
        elif isinstance(node, ast.Dict):   # a table of defaults; a setting forced to another value is no copy
            for key, value in zip(node.keys, node.values):
                knob = _knob(key) if key is not None else None
                if knob and _literal(value) and str(value.value) == DEFAULTS.get(knob):
                    found.append((key.lineno, knob, "its default in a dict"))
    return found


def shell_copies(text: str) -> list[tuple[int, str, str]]:
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("#"):
            continue
        for match in SHELL_DEFAULT.finditer(line):
            if match.group(1) in NAMES and match.group(2):
                found.append((n, match.group(1), f"a shell default {match.group(0)}"))
    return found


def test_no_module_of_the_package_copies_a_knobs_default():
    found = [f"{path.relative_to(paths.ROOT)}:{line}: {knob}: {how}"
             for path in sorted(PACKAGE.rglob("*.py")) for line, knob, how in copies(path.read_text())]
    assert not found, "a knob's default copied outside the knob table (read it with config.default_of or " \
                      "from the built Config):\n" + "\n".join(found)


def test_no_script_copies_a_knobs_default():
    found = [f"{path.relative_to(paths.ROOT)}:{line}: {knob}: {how}"
             for path in SCRIPTS for line, knob, how in shell_copies(path.read_text())]
    assert not found, "a knob's default copied in a script (the loop reads its settings from `genesis " \
                      "loop-settings`):\n" + "\n".join(found)


def test_the_scan_finds_each_way_of_copying_a_default_and_nothing_else():
    source = '''
import os
a = os.environ.get("HEARTBEAT_CHECK_INTERVAL", "60")
b = settings.get("GENESIS_NOTIFY_RETRIES") or "2"
c = {"GENESIS_FLEET_STAGGER_SECONDS": "5", "GENESIS_FLEET_CHECK_SECONDS": default_of("GENESIS_FLEET_CHECK_SECONDS")}
d = os.getenv("TOOL_SILENT_MINUTES", 5)
e = env.get("GENESIS_PORT_BASE", "20000")              # no knob (the fleet's own marker)
f = env.get("HEARTBEAT_STALE")                           # no fallback
g = get("GENESIS_NOTIFY_DESKTOP") or default_of("GENESIS_NOTIFY_DESKTOP")
h = str(settings.get("GENESIS_TRIAGE_CMD") or "").strip()   # unset and empty alike
i = {"GENESIS_AGENT_CMD": shlex.join(cmd)}               # a value computed, not a default
j = "HEARTBEAT_STALE=4s"                                 # a setting written out
k = {"AUTO_PUSH": "true", "HEARTBEAT_STALE_SECONDS": "HEARTBEAT_STALE"}   # forced, and a name for a name
l = env.get("GENESIS_FLEET_ENGINE", "").strip() or "local"
'''
    assert [(line, knob) for line, knob, _ in copies(source)] == [
        (3, "HEARTBEAT_CHECK_INTERVAL"), (4, "GENESIS_NOTIFY_RETRIES"), (5, "GENESIS_FLEET_STAGGER_SECONDS"),
        (6, "TOOL_SILENT_MINUTES"), (14, "GENESIS_FLEET_ENGINE")]
    script = 'a="${HEARTBEAT_CHECK_INTERVAL:-60}"\nb="${GENESIS_RUN_ID:-}"\nc="${HOME:-/root}"\n' \
             '# ${AUTO_PUSH:-false} in a comment\n: "${AUTO_PUSH:=false}"\nd="${GENESIS_STATE_DIR-x}"\n'
    assert [(line, knob) for line, knob, _ in shell_copies(script)] == [(1, "HEARTBEAT_CHECK_INTERVAL"),
                                                                        (5, "AUTO_PUSH")]

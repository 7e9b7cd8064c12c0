"""The genesis package's imports: no cycles, and function-level imports only at the command
boundary (genesis/cli.py: each loop step is its own process, so a command imports only what
it needs) or where ALLOWED_LAZY below says why (a heavy module a step needs only now and then).

Every import counts, at the top of a module or inside a function; only those under
`if TYPE_CHECKING:` do not, since they never run.

And what the loop's steps import, in a fresh interpreter: none of the heavy libraries a step
does not use (detect-secrets and requests, asyncio, rich, GitPython) is loaded by them.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers import paths

PACKAGE = "genesis"
SOURCE = paths.ROOT / PACKAGE
THIS = "tests/test_imports.py"
COMMAND_BOUNDARY = f"{PACKAGE}.cli"

# (importing module, imported module as written) -> why it stays inside a function.
ALLOWED_LAZY: dict[tuple[str, str], str] = {
    ("genesis.agents", "importlib.import_module"):
        "the adapter registry imports only the adapter of the CLI the loop runs (ADAPTERS)",
    ("genesis.sandbox.bridge", "asyncio"):
        "the box's bridge runs before the agent: only its server, after the fork, imports asyncio, so the agent's "
        "exec waits for none of it",
    ("genesis.sandbox.network", "genesis.sandbox.proxy"):
        "the proxy serves on asyncio: only a phase whose box has an allow-listed network imports it, when it starts "
        "the proxy; every step imports the box (the configuration names its choices)",
    ("genesis.alerts.notify", "genesis.actions.alerting"):
        "every alert is delivered by a process of its own; only a webhook or ntfy delivery with action links reads "
        "the configuration and the fleet's ledger for them (about 40 ms of imports)",
    ("genesis.loop.lostloop", "genesis.loop.finish"):
        "every phase's watcher imports lostloop, and ends the night itself only when it finds the loop killed: the "
        "night's end (its report rendered with rich, the alerts it waits for) is imported then",
    ("genesis.agents.base", "genesis.agents.hook.selftest"):
        "every step imports the adapters, and only preflight, `genesis hook check` and doctor run the hook's "
        "self-test (with its settings files, heartbeat reads and subprocesses)",
    ("genesis.agents.generic", "genesis.agents.hook.selftest"):
        "the self-test's states, read only of a check the self-test made (so already imported)",
    ("genesis.agents.generic", "genesis.agents.claude.hookcheck"):
        "generic borrows Claude Code's hook: any part of agents.claude imports Claude Code's whole adapter (its "
        "package), which only a generic agent's phase or check needs",
    ("genesis.agents.generic", "genesis.agents.claude.settings"):
        "the same: Claude Code's hook and places, imported when a generic agent's phase asks for them",
    ("genesis.repo.commitfilter", "genesis.repo.secretscan"):
        "detect-secrets (and the requests library it imports) is a quarter of a loop step's imports: only a commit "
        "with staged files to scan imports the scanner",
}


@dataclass(frozen=True)
class Import:
    module: str        # the importing module
    path: Path
    line: int
    target: str        # the imported module, absolute (`from X import a`: X)
    names: tuple[str, ...]  # `from X import a, b`: ("a", "b"); `import X`: ()
    lazy: bool         # inside a function
    dynamic: bool = False  # importlib.import_module() or __import__() of a name computed when it runs

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(paths.ROOT)}:{self.line}"

    @property
    def text(self) -> str:
        if self.dynamic:
            return f"{self.target}(<a name computed when it runs>)"
        return f"from {self.target} import {', '.join(self.names)}" if self.names else f"import {self.target}"


def package_modules() -> dict[str, Path]:
    """Every module of the package by its dotted name; a package by its __init__.py."""
    found = {}
    for path in sorted(SOURCE.rglob("*.py")):
        parts = path.relative_to(SOURCE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


class Collector(ast.NodeVisitor):
    """The imports of one module, in functions too, not those under `if TYPE_CHECKING:`."""

    def __init__(self, module: str, path: Path):
        self.module, self.path = module, path
        self.package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        self.functions = 0
        self.found: list[Import] = []

    def add(self, node: ast.AST, target: str, names: tuple[str, ...] = (), dynamic: bool = False) -> None:
        self.found.append(Import(self.module, self.path, node.lineno, target, names, self.functions > 0, dynamic))

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for expr in [*node.decorator_list, *node.args.defaults, *node.args.kw_defaults]:
            if expr is not None:
                self.visit(expr)  # run when the function is defined, not when it is called
        self.functions += 1
        for statement in node.body:
            self.visit(statement)
        self.functions -= 1

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self.functions += 1
        self.generic_visit(node)
        self.functions -= 1

    def visit_If(self, node: ast.If) -> None:
        if is_type_checking(node.test):
            for statement in node.orelse:
                self.visit(statement)
        else:
            self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.add(node, alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.package.split(".")
            base = base[:len(base) - (node.level - 1)]
            target = ".".join([*base, node.module] if node.module else base)
        else:
            target = node.module or ""
        self.add(node, target, tuple(alias.name for alias in node.names))

    def visit_Call(self, node: ast.Call) -> None:
        # importlib.import_module("x") and __import__("x") import too, by a name known only
        # when they run unless it is a literal.
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name in ("import_module", "__import__"):
            arg = node.args[0] if node.args else None
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                self.add(node, arg.value)
            else:
                self.add(node, "importlib.import_module" if name == "import_module" else "__import__", dynamic=True)
        self.generic_visit(node)


def all_imports() -> list[Import]:
    found = []
    for module, path in package_modules().items():
        collector = Collector(module, path)
        collector.visit(ast.parse(path.read_text(), filename=str(path)))
        found += collector.found
    return found


def edges(imp: Import, modules: dict[str, Path]) -> set[str]:
    """The package's modules an import reaches: `import a.b.c` the longest of a.b.c, a.b, a
    that is a module; `from a.b import c` a.b.c when that is a module, else the same as a.b."""
    def longest(name: str) -> str | None:
        parts = name.split(".")
        for n in range(len(parts), 0, -1):
            if ".".join(parts[:n]) in modules:
                return ".".join(parts[:n])
        return None

    if imp.dynamic or (imp.target != PACKAGE and not imp.target.startswith(f"{PACKAGE}.")):
        return set()
    if not imp.names:
        reached = {longest(imp.target)}
    else:
        reached = {f"{imp.target}.{name}" if f"{imp.target}.{name}" in modules else longest(imp.target)
                   for name in imp.names}
    return {module for module in reached if module and module != imp.module}


def import_graph() -> dict[str, dict[str, list[Import]]]:
    """module -> module it imports -> the imports that do it."""
    modules = package_modules()
    graph: dict[str, dict[str, list[Import]]] = {module: {} for module in modules}
    for imp in all_imports():
        for target in edges(imp, modules):
            graph[imp.module].setdefault(target, []).append(imp)
    return graph


def strongly_connected(graph: dict[str, dict[str, list[Import]]]) -> list[list[str]]:
    """Tarjan's strongly connected components, each sorted; iterative, so depth is no limit."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return components


def shortest_cycle(graph: dict[str, dict[str, list[Import]]], component: list[str]) -> list[str]:
    """A shortest cycle through the component's first module, as the modules in order."""
    start, members = component[0], set(component)
    paths_to = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for child in sorted(graph[node]):
            if child == start:
                return paths_to[node] + [start]
            if child in members and child not in paths_to:
                paths_to[child] = paths_to[node] + [child]
                queue.append(child)
    return component


def test_the_graph_sees_the_package():
    graph = import_graph()
    assert COMMAND_BOUNDARY in graph and len(graph) > 10, f"no modules found under {SOURCE}"
    assert COMMAND_BOUNDARY in graph[f"{PACKAGE}.__main__"], "`python -m genesis` runs genesis.cli: the graph misses it"


def test_no_import_cycles():
    graph = import_graph()
    cycles = [component for component in strongly_connected(graph) if len(component) > 1]
    report = []
    for component in cycles:
        report.append(f"\n{len(component)} modules import each other: {', '.join(component)}")
        report.append(f"  e.g. {' -> '.join(shortest_cycle(graph, component))}")
        for source in component:
            for target, imports in sorted(graph[source].items()):
                if target in component:
                    for imp in imports:
                        report.append(f"  {imp.where}: {source} -> {target}  ({imp.text}"
                                      f"{', in a function' if imp.lazy else ''})")
    assert not cycles, (
        f"{len(cycles)} import cycle(s) in the {PACKAGE} package. Break each by removing one of its imports: "
        f"move what both sides need into a module below both, or pass it in as an argument. Moving an import "
        f"into a function does not break a cycle (this test counts it), and `if TYPE_CHECKING:` is only for "
        f"annotations." + "\n".join(report))


def test_function_level_imports_only_at_the_command_boundary():
    lazy = [imp for imp in all_imports() if imp.lazy and imp.module != COMMAND_BOUNDARY]
    unexplained = [f"  {imp.where}: {imp.text}" for imp in lazy if (imp.module, imp.target) not in ALLOWED_LAZY]
    assert not unexplained, (
        f"{len(unexplained)} function-level import(s) outside {COMMAND_BOUNDARY}. Move each to the top of its "
        f"module; if that makes a cycle, test_no_import_cycles names it: fix the cycle. If one must stay in "
        f"its function, add (module, imported module) to ALLOWED_LAZY in {THIS} with the reason.\n"
        + "\n".join(unexplained))


def test_the_allowlist_is_current_and_explained():
    lazy = {(imp.module, imp.target) for imp in all_imports() if imp.lazy}
    stale = sorted(set(ALLOWED_LAZY) - lazy)
    assert not stale, f"ALLOWED_LAZY in {THIS} lists imports that are no longer in a function: {stale}; remove them"
    bare = sorted(key for key, reason in ALLOWED_LAZY.items() if not reason.strip())
    assert not bare, f"ALLOWED_LAZY in {THIS}: say why each of these stays in a function: {bare}"


ENGINE = f"{PACKAGE}.temporal"


def test_only_the_temporal_engine_imports_temporalio():
    """The local fleet stays the default and needs nothing installed: temporalio is imported by
    genesis/temporal/ alone, and genesis/temporal/ by the command line alone, in the command
    that asks for it."""
    inside = lambda module: module == ENGINE or module.startswith(f"{ENGINE}.")  # noqa: E731
    outside = [f"  {imp.where}: {imp.text}" for imp in all_imports()
               if (imp.target == "temporalio" or imp.target.startswith("temporalio.")) and not inside(imp.module)]
    assert not outside, "temporalio imported outside genesis/temporal/:\n" + "\n".join(outside)
    reaching = [imp for imp in all_imports() if inside(imp.target) and not inside(imp.module)]
    eager = [f"  {imp.where}: {imp.text}" for imp in reaching if imp.module != COMMAND_BOUNDARY or not imp.lazy]
    assert not eager, (f"genesis/temporal/ is imported by {COMMAND_BOUNDARY} alone, inside the command that "
                       f"needs it:\n" + "\n".join(eager))


# What each step the loop starts imports: genesis.cli and its command's body (cli.py); a started
# run's step reads its snapshot through genesis.loop.relock (Context.run_config).
LOOP_STEPS: dict[str, tuple[str, ...]] = {
    "loop-settings": (),
    "preflight": ("genesis.loop.preflight",),
    "iteration start, iteration finish": ("genesis.loop.iteration", "genesis.loop.relock"),
    "run-phase, phase-lost": ("genesis.loop.phase", "genesis.loop.relock"),
    "wait": ("genesis.loop.ceilings", "genesis.loop.stopflag", "genesis.loop.waiting", "genesis.loop.relock"),
    "companion": ("genesis.loop.lostloop", "genesis.loop.relock"),
}
# Top-level packages no loop step loads at its start, and why each is kept out: the loop starts
# a new `genesis` process for every step, several times an iteration.
NOT_AT_A_STEPS_START: dict[str, str] = {
    "detect_secrets": "the content scan's: imported by a commit with staged files to scan (repo/secretscan.py)",
    "requests": "detect-secrets imports it (with urllib3, ssl, email, http)",
    "asyncio": "the box's proxy's: imported when a box with an allow-listed network starts it (sandbox/network.py)",
    "rich": "the report's rendering: a step that renders (finish, status, report) imports it",
    "git": "GitPython: preflight's alone (repo/worktree.py), once a run",
}
ALLOWED_AT = {("preflight", "git")}

# Run in a fresh interpreter: imports the modules named, and says which of the watched
# packages got loaded, by which chain of modules.
PROBE = """
import sys
watched = set(sys.argv[1].split(","))
seen = {}
class Watch:
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top in watched and top not in seen:
            frame, chain = sys._getframe(1), []
            while frame is not None:
                if frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__") != "__main__":
                    chain.append(frame.f_globals.get("__name__", "?"))
                frame = frame.f_back
            seen[top] = " <- ".join(chain)
        return None
sys.meta_path.insert(0, Watch())
for module in sys.argv[2:]:
    __import__(module)
for top, chain in sorted(seen.items()):
    print(f"{top}: imported by {chain}")
"""


@pytest.mark.parametrize("step", sorted(LOOP_STEPS))
def test_a_loop_steps_start_loads_none_of_the_heavy_libraries_it_does_not_use(step):
    modules = (COMMAND_BOUNDARY, *LOOP_STEPS[step])
    watched = [top for top in NOT_AT_A_STEPS_START if (step, top) not in ALLOWED_AT]
    done = subprocess.run([sys.executable, "-c", PROBE, ",".join(watched), *modules], capture_output=True,
                          text=True, cwd=paths.ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    loaded = [line for line in done.stdout.splitlines() if line]
    assert not loaded, (
        f"The loop's step `{step}` imports {', '.join(modules)}, which load:\n  " + "\n  ".join(loaded) + "\n"
        + "\n".join(f"{line.partition(':')[0]}: {NOT_AT_A_STEPS_START[line.partition(':')[0]]}" for line in loaded)
        + f"\nBreak the chain (a module split by concept), or import it where it is used (ALLOWED_LAZY in {THIS}).")


def test_the_probe_sees_what_a_step_loads():
    """The probe above, on a module that does load one of the watched packages: it names it, and the chain."""
    done = subprocess.run([sys.executable, "-c", PROBE, "rich", "genesis.reporting.text"], capture_output=True,
                          text=True, cwd=paths.ROOT, timeout=120)
    assert done.stdout.startswith("rich: imported by genesis.reporting.text"), done

"""Every command the manual writes in a shell block is one that runs: each `genesis` command
line of README.md and docs/ parses with the click tree (the command path, its options, their
choices, its arguments; nothing is invoked), each `./start-multi-agent-loop.sh` line uses only
the flags its --help lists, and each `--set KEY=VALUE` names a setting. A renamed command,
flag or setting fails here, with the page and line.

And none writes a bare `genesis` command: after the README's install it is "command not
found"; the form is `.venv/bin/genesis`. A block that first installs Genesis on the PATH (a
`pip install` line above in the same block) may use the bare name.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

import click
import pytest
from helpers import docs

from genesis.cli import cli
from genesis.config import KNOB_NAMES, PHASE_KEY_RE
from genesis.reference import loop_flags

SHELLS = {"bash", "sh", "shell", "console", "zsh"}
OPERATORS = {"|", "||", "&&", ";", "&", "(", ")", ";;", "|&", "$", "`"}
WRAPPERS = {"nohup", "exec", "time", "sudo", "env", "command", "nice", "caffeinate"}
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
PLACEHOLDER = re.compile(r"<[A-Za-z][\w.-]*>")       # <id>, <run-id>: one word
REDIRECTION = re.compile(r"(?<!\S)\d*(?:>>|>&|&>|>|<)\s*[^\s;|&]+")   # >log, 2>&1, <in
HEREDOC = re.compile(r"<<-?\s*['\"]?(\w+)['\"]?")
# Puts `genesis` on the PATH (not .venv/bin/pip, which leaves it in .venv/bin).
INSTALL = re.compile(r"(?<![\w/.-])(?:pip3?|pipx) install\b|\buv tool install\b")
BARE_LINE = re.compile(r"^\s*(?:\$\s+)?(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*genesis(?:\s|$)")
GENESIS = "bin/genesis"
LOOP = "start-multi-agent-loop.sh"


@dataclass(frozen=True)
class Use:
    where: str
    line: str
    program: str              # "genesis", "loop" or "bare" (a bare `genesis`)
    args: tuple[str, ...]


def shell_lines(block: docs.Block) -> list[tuple[int, str]]:
    """The block's command lines: continuations joined, heredoc bodies and prompts dropped."""
    out, i, lines = [], 0, block.lines
    while i < len(lines):
        start, line = i, lines[i]
        while line.endswith("\\") and i + 1 < len(lines):
            i += 1
            line = line[:-1] + " " + lines[i]
        i += 1
        heredoc = HEREDOC.search(line)
        if heredoc:
            while i < len(lines) and lines[i].strip() != heredoc.group(1):
                i += 1
            i += 1
        out.append((block.line + start, re.sub(r"^\s*\$\s+", "", line)))
    return out


def words_of(line: str) -> list[str]:
    line = REDIRECTION.sub(" ", PLACEHOLDER.sub("PLACEHOLDER", line))
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    return list(lexer)


def commands_of(words: list[str]) -> list[list[str]]:
    """Simple commands: the words between operators, an ellipsis ("and more") dropped."""
    commands, current = [], []
    for word in words:
        if word in OPERATORS:
            commands.append(current)
            current = []
        elif word not in ("...", "…"):
            current.append(word)
    return [c for c in [*commands, current] if c]


def uses_in(where: str, line: str) -> list[Use]:
    found = []
    for words in commands_of(words_of(line)):
        while words and (ASSIGNMENT.match(words[0]) or words[0] in WRAPPERS):
            words = words[1:]
        if words and words[0] == "genesis":
            found.append(Use(where, line, "bare", tuple(words[1:])))
            found.append(Use(where, line, "genesis", tuple(words[1:])))
            continue
        for n, word in enumerate(words):
            if (GENESIS in word or LOOP in word) and re.search(r"\s", word):
                found += uses_in(where, word)       # a command in a quoted argument: tmux, bash -c, ssh
            elif word.endswith(GENESIS):
                found.append(Use(where, line, "genesis", tuple(words[n + 1:])))
                break
            elif word.endswith(LOOP):
                found.append(Use(where, line, "loop", tuple(words[n + 1:])))
                break
    return found


def block_uses(block: docs.Block, page_name: str) -> list[Use]:
    """The commands of a shell block; a bare `genesis` after a `pip install` line of the block
    is no mistake (the block put it on the PATH)."""
    found: list[Use] = []
    installed = False
    for line_no, line in shell_lines(block):
        installed = installed or bool(INSTALL.search(line))
        try:
            found += [use for use in uses_in(f"{page_name}:{line_no}", line)
                      if not (use.program == "bare" and installed)]
        except ValueError as exc:  # shlex: an unbalanced quote
            found.append(Use(f"{page_name}:{line_no}", line, "unreadable", (str(exc),)))
    return found


def uses() -> list[Use]:
    return [use for page in docs.pages() for block in docs.blocks(page) if block.lang in SHELLS
            for use in block_uses(block, docs.name(page))]


def setting_error(assignment: str) -> str | None:
    key = assignment.split("=", 1)[0]
    if "=" not in assignment:
        return f"--set {assignment}: not KEY=VALUE"
    if key == "KEY" or key in KNOB_NAMES or PHASE_KEY_RE.match(key):
        return None
    return f"--set {key}: no such setting"


def genesis_error(args: tuple[str, ...]) -> str | None:
    """Why click would refuse the command line (None: it parses), without running it."""
    command: click.Command = cli
    ctx = click.Context(cli, info_name="genesis", resilient_parsing=False)
    rest = list(args)
    while True:
        try:
            opts, rest, order = command.make_parser(ctx).parse_args(args=rest)
        except click.UsageError as exc:
            return f"{ctx.command_path}: {exc.format_message()}"
        for param in order:
            if isinstance(param, click.Option) and isinstance(param.type, click.Choice):
                values = opts[param.name] if param.multiple else [opts[param.name]]
                wrong = [v for v in values if v not in param.type.choices]
                if wrong:
                    return f"{ctx.command_path} {param.opts[0]}: {wrong} is none of {list(param.type.choices)}"
        for value in opts.get("overrides") or ():
            if setting_error(value):
                return setting_error(value)
        if opts.get("help") or opts.get("version"):
            return None
        if isinstance(command, click.Group):
            if not rest:
                return None
            try:
                name, sub, rest = command.resolve_command(ctx, rest)
            except click.UsageError as exc:
                return f"{ctx.command_path}: {exc.format_message()}"
            command, ctx = sub, click.Context(sub, info_name=name, parent=ctx, resilient_parsing=False)
            continue
        missing = [p.human_readable_name for p in command.params if isinstance(p, click.Argument) and p.required
                   and not isinstance(opts.get(p.name), (str, tuple, list))]
        if missing:
            return f"{ctx.command_path}: missing argument {', '.join(missing)}"
        if rest:
            return f"{ctx.command_path}: unexpected extra arguments {rest}"
        return None


def loop_error(args: tuple[str, ...]) -> str | None:
    flags = {**loop_flags(), "-h": False}
    i = 0
    while i < len(args):
        flag, eq, _ = args[i].partition("=")
        if flag not in flags:
            return f"{LOOP}: '{args[i]}' is none of its flags {sorted(flags)}"
        if flags[flag] and not eq:
            if i + 1 >= len(args):
                return f"{LOOP}: {flag} without its value"
            i += 1
        elif eq and not flags[flag]:
            return f"{LOOP}: {flag} takes no value"
        if flag == "--set" and setting_error(args[i].split("=", 1)[1] if eq else args[i]):
            return setting_error(args[i].split("=", 1)[1] if eq else args[i])
        i += 1
    return None


def test_the_manual_writes_commands():
    found = uses()
    assert any(use.program == "genesis" for use in found) and any(use.program == "loop" for use in found), \
        "the manual's shell blocks write no genesis or loop command: the reader is lost, or this test's reading is"


def test_every_genesis_command_parses():
    wrong = [f"{use.where}: {use.line.strip()}\n    {error}" for use in uses()
             if use.program == "genesis" and (error := genesis_error(use.args))]
    assert not wrong, "genesis commands in the manual that click would refuse:\n" + "\n".join(wrong)


def test_every_loop_command_uses_its_flags():
    wrong = [f"{use.where}: {use.line.strip()}\n    {error}" for use in uses()
             if use.program == "loop" and (error := loop_error(use.args))]
    assert not wrong, "loop commands in the manual with flags its --help does not list:\n" + "\n".join(wrong)


def test_every_shell_line_reads():
    wrong = [f"{use.where}: {use.line.strip()} ({use.args[0]})" for use in uses() if use.program == "unreadable"]
    assert not wrong, f"shell lines that do not read as shell words (an unbalanced quote?): {wrong}"


def test_no_bare_genesis_command():
    bare = [f"{use.where}: {use.line.strip()}" for use in uses() if use.program == "bare"]
    for page in docs.pages():
        for block in docs.blocks(page):
            if block.lang in SHELLS:
                continue  # read word by word above
            bare += [f"{docs.name(page)}:{block.line + n}: {line.strip()}" for n, line in enumerate(block.lines)
                     if BARE_LINE.match(line)]
    assert not bare, (
        "a bare `genesis` is 'command not found' after the README's install: write .venv/bin/genesis (or put a "
        "`pip install` line first in the same block):\n" + "\n".join(bare))


@pytest.mark.parametrize("line, error", [
    (".venv/bin/genesis --project ~/src/myapp status --json", None),
    (".venv/bin/genesis statuss", "No such command"),
    (".venv/bin/genesis status --jsn", "No such option"),
    (".venv/bin/genesis hook install --scope everywhere", "none of"),
    (".venv/bin/genesis incidents show", "missing argument"),
    (".venv/bin/genesis incidents show <id>", None),
    (".venv/bin/genesis breaker show extra", "unexpected extra"),
    (".venv/bin/genesis --set GENESIS_MAX_ITERATIONS=3 config show", None),
    (".venv/bin/genesis --set GENESIS_MAX_ITERATINS=3 config show", "no such setting"),
    ("nohup ./start-multi-agent-loop.sh --project ~/p --max-iterations 40 >night.log 2>&1 &", None),
    ("./start-multi-agent-loop.sh --project=~/p --set PHASE_Builder_TRIGGER=always", None),
    ("./start-multi-agent-loop.sh --projekt ~/p", "none of its flags"),
    ("./start-multi-agent-loop.sh --project", "without its value"),
    ("tmux new -d -s night './start-multi-agent-loop.sh --paralel 3'", "none of its flags"),
    ("watch -n 5 .venv/bin/genesis fleet statuss", "No such command"),
    ("GENESIS_MAX_ITERATIONS=2 genesis status | head # and a comment", None),
])
def test_the_reading_fails_on_what_it_should(line, error):
    found = uses_in("x", line)
    assert found, line
    errors = [genesis_error(u.args) if u.program in ("genesis", "bare") else loop_error(u.args) for u in found]
    if error is None:
        assert errors and not any(errors), errors
    else:
        assert any(e and error in e for e in errors), errors
    if line.startswith("GENESIS_MAX"):
        assert [u.program for u in found] == ["bare", "genesis"]


def test_a_bare_genesis_is_allowed_after_a_pip_install_in_its_block(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```bash\n.venv/bin/pip install -e .\ngenesis status\n```\n\n```bash\npip install genesis-loop\ngenesis status \\\n"
                    "  --json\ncat <<'EOF'\ngenesis in a heredoc\nEOF\n```\n")
    first, second = docs.blocks(page)
    assert [(u.where, u.program) for u in block_uses(first, "page.md")] == [("page.md:3", "bare"),
                                                                           ("page.md:3", "genesis")]
    assert [(u.where, u.program, u.args) for u in block_uses(second, "page.md")] == \
        [("page.md:8", "genesis", ("status", "--json"))]

"""One exit-code contract: start-multi-agent-loop.sh, genesis/exitcodes.py, the script's header,
the reference (docs/reference/exit-codes.md, generated from exitcodes.py) and the README's short
"Exit codes" table say the same thing.

The script names its codes in one block of readonly constants at its top, EXIT_<name> for
<name> in genesis/exitcodes.py, and spells no code as a number anywhere else.
"""

from __future__ import annotations

import re
import shlex

import pytest
from helpers import paths

from genesis import exitcodes, reference

SCRIPT = paths.LOOP
README = paths.ROOT / "README.md"
REFERENCE = paths.ROOT / "docs" / "reference" / "exit-codes.md"
PREFIX = "EXIT_"
THIS = "tests/test_exit_codes.py"

# Codes the loop itself never ends with (only a step or another command does). Every other code
# in exitcodes.py is one the loop can end with: the reference and the script's header say so.
STEPS_ONLY = {
    "NOT_RUNNING": "only `genesis stop` and `genesis status` exit with it",
    "AGENT_FAILED": "run-phase: the phase failed, the loop goes on",
    "PHASE_SKIPPED": "run-phase: the trigger skipped the phase, the loop goes on",
    "WAIT": "run-phase, iteration finish: the loop sits out the wait and goes on",
    "WORK_DONE": "iteration finish: the loop then ends with OK",
    "AGENT_STALE": "run-phase: the stuck agent was killed, the loop goes on",
    "AGENT_OVERTIME": "run-phase: the agent over its cap was killed, the loop goes on",
    "ALERT_FAILED": "only `genesis alert test` exits with it",
    "SERVE_FAILED": "only `genesis serve` exits with it",
    "NOT_APPLICABLE": "only the action commands (retry, approve, send-back, skip, pause, resume, limit-wait, revert) exit with it",
}
# Codes the loop ends with without naming them: it passes a step's status straight through.
PASSED_THROUGH = {
    "LOCKED": "only `genesis preflight` exits with it, and the script exits with preflight's status",
}

# Variables of the script that hold an exit status, and the commands whose argument is one
# (argument index after the command name).
STATUS_VARS = r"(?:rc\d*|status|code)"
STATUS_ARGS = {"exit": 0, "finish_loop": 0, "after_step": 0, "on_error": 0, "on_signal": 1}
NUMERIC_PATTERN = re.compile(r"[0-9\[\]*?!|^-]*[0-9][0-9\[\]*?!|^-]*")


def python_codes() -> dict[str, int]:
    return {name: value for name, value in vars(exitcodes).items()
            if name.isupper() and isinstance(value, int) and not isinstance(value, bool)}


def loop_codes() -> dict[str, int]:
    return {name: value for name, value in python_codes().items() if name not in STEPS_ONLY}


def script_lines() -> list[str]:
    return SCRIPT.read_text().splitlines()


def block_span(lines: list[str]) -> tuple[int, int]:
    """The 0-based [start, end) lines of the block: `readonly EXIT_...` lines and comments
    between them, from the first such line on."""
    start = next((i for i, line in enumerate(lines) if line.startswith(f"readonly {PREFIX}")), None)
    assert start is not None, f"{SCRIPT.name} has no block of `readonly {PREFIX}<name>=<code>` lines"
    end = start
    while end < len(lines) and (lines[end].startswith(f"readonly {PREFIX}") or lines[end].startswith("#")):
        end += 1
    while lines[end - 1].startswith("#"):
        end -= 1
    return start, end


def script_constants() -> dict[str, int]:
    lines = script_lines()
    start, end = block_span(lines)
    found: dict[str, int] = {}
    for line in lines[start:end]:
        if line.startswith("#"):
            continue
        words = shlex.split(line, comments=True)
        assert words[0] == "readonly", line
        for word in words[1:]:
            match = re.fullmatch(rf"{PREFIX}([A-Z0-9_]+)=(\d+)", word)
            assert match, f"{SCRIPT.name}: '{word}' in the exit-code block is not {PREFIX}<NAME>=<number>"
            name = match.group(1)
            assert name not in found, f"{SCRIPT.name}: {PREFIX}{name} is defined twice in the exit-code block"
            found[name] = int(match.group(2))
    return found


def strip_comments(text: str) -> str:
    """The text without its shell comments (a `#` outside quotes that starts a word)."""
    out, quote, i = [], "", 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\" and quote == '"':
                out.append(text[i:i + 2])
                i += 2
                continue
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "\\":
            out.append(text[i:i + 2])
            i += 2
            continue
        elif ch == "#" and (i == 0 or text[i - 1] in " \t\n;"):
            while i < len(text) and text[i] != "\n":
                i += 1
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def tokens(text: str) -> list[str]:
    """Shell words and operators (`)`, `;;`, `|`, `((`...), quotes removed; a line
    continuation joins its lines."""
    lexer = shlex.shlex(text.replace("\\\n", " "), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    return list(lexer)


def body_tokens() -> list[str]:
    """The script's tokens after the exit-code block, trap commands spliced in as tokens."""
    lines = script_lines()
    _, end = block_span(lines)
    words = tokens(strip_comments("\n".join(lines[end:])))
    spliced: list[str] = []
    for i, word in enumerate(words):
        if i > 0 and words[i - 1] == "trap":
            spliced += [";", *tokens(word), ";"]
        else:
            spliced.append(word)
    return spliced


def case_patterns(words: list[str]) -> list[str]:
    """Every pattern of every arm of every `case`, nested ones too."""
    patterns: list[str] = []

    def arms(i: int) -> int:  # i: just after `in`; returns the index of the matching `esac`
        at_pattern = True
        while i < len(words):
            word = words[i]
            if at_pattern and word != "esac":
                while words[i] != ")":
                    if words[i] not in ("(", "|"):
                        patterns.append(words[i])
                    i += 1
                at_pattern = False
            elif word == "case":
                i = arms(words.index("in", i) + 1)
            elif word == "esac":
                return i
            elif word in (";;", ";&", ";;&"):
                at_pattern = True
            i += 1
        raise AssertionError(f"{SCRIPT.name}: a `case` without its `esac`")

    i = 0
    while i < len(words):
        i = arms(words.index("in", i) + 1) + 1 if words[i] == "case" else i + 1
    return patterns


def reference_sections() -> dict[int, str]:
    """The reference's section of each code: value -> its text (from its heading to the next)."""
    text = REFERENCE.read_text()
    found = {int(m.group(1)): m.group(2)
             for m in re.finditer(r"^### (\d+) `\w+`\n(.*?)(?=^#{1,3} |\Z)", text, re.M | re.S)}
    assert found, f"{REFERENCE.name} has no '### <code> `<NAME>`' sections: run `.venv/bin/{reference.COMMAND}`"
    return found


def readme_table() -> dict[tuple[int, ...], str]:
    """The README's short "Exit codes" table: its codes (a row may give several, `129 / 130`)
    -> the row's meaning (its second cell)."""
    text = README.read_text()
    match = re.search(r"^## Exit codes\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, "README.md has no '## Exit codes' section (a short table of the codes a user meets)"
    rows: dict[tuple[int, ...], str] = {}
    for line in match.group(1).splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) < 2 or not re.fullmatch(r"\[?[\d /]+\]?(\([^)]*\))?", cells[0]):
            continue  # not a row, the header row or the separator
        codes = tuple(int(code) for code in re.findall(r"\d+", re.sub(r"\(.*\)", "", cells[0])))
        rows[codes] = cells[1]
    assert rows, "README's '## Exit codes' section has no table of codes"
    return rows


def header_codes() -> set[int]:
    """The codes the script's header comment (its --help) lists after 'Exit codes:'."""
    header = []
    for line in script_lines()[1:]:
        if not line.startswith("#"):
            break
        header.append(line.lstrip("#").strip())
    text = " ".join(header)
    assert "Exit codes:" in text, f"{SCRIPT.name}'s header comment has no 'Exit codes:' list"
    listing = text.split("Exit codes:", 1)[1]
    return {int(code) for item in re.findall(r"(?:^|,)\s*(\d+(?:/\d+)*)\s", listing)
            for code in item.split("/")}


def test_exitcodes_py_gives_each_code_one_name():
    by_value: dict[int, list[str]] = {}
    for name, value in python_codes().items():
        by_value.setdefault(value, []).append(name)
    shared = {value: names for value, names in by_value.items() if len(names) > 1}
    assert not shared, \
        f"genesis/exitcodes.py gives one code several names: {shared}; a case arm could not tell them apart"


def test_the_allowlists_name_codes_that_exist():
    stale = sorted((set(STEPS_ONLY) | set(PASSED_THROUGH)) - set(python_codes()))
    assert not stale, \
        f"STEPS_ONLY or PASSED_THROUGH in {THIS} name codes genesis/exitcodes.py no longer has: {stale}; remove them"
    named = sorted(set(PASSED_THROUGH) & set(script_constants()))
    assert not named, f"{SCRIPT.name} now names {named}: remove them from PASSED_THROUGH in {THIS}"


def test_the_scripts_constants_are_exitcodes_py():
    python = python_codes()
    wrong = {f"{PREFIX}{name}": (value, python.get(name)) for name, value in script_constants().items()
             if python.get(name) != value}
    assert not wrong, (
        f"{SCRIPT.name}'s exit-code block disagrees with genesis/exitcodes.py ({{constant: (script, python)}}; "
        f"None: no such name there): {wrong}. genesis/exitcodes.py is the source: change the script's block")


def test_the_block_is_at_the_top_and_the_only_definition():
    lines = script_lines()
    start, end = block_span(lines)
    before = [line for line in lines[:start] if line.strip() and not line.startswith(("#", "set "))]
    assert not before, f"{SCRIPT.name}: move the exit-code block above these lines (readonly constants first): {before}"
    outside = [f"line {n + 1}: {line.strip()}" for n, line in enumerate(lines)
               if not start <= n < end and re.search(rf"\b{PREFIX}\w+=", strip_comments(line))]
    assert not outside, f"{SCRIPT.name} defines exit codes outside its block; move them into it: {outside}"
    known = set(script_constants())
    used = {name for line in lines[end:] for name in re.findall(rf"\b{PREFIX}(\w+)", strip_comments(line))}
    unknown = sorted(used - known)
    assert not unknown, \
        f"{SCRIPT.name} uses {PREFIX}{{{', '.join(unknown)}}} but its exit-code block does not define them"


def test_no_numeric_exit_code_outside_the_block():
    words = body_tokens()
    found = [f"case pattern '{p}'" for p in case_patterns(words) if NUMERIC_PATTERN.fullmatch(p)]
    for i, word in enumerate(words):
        at = STATUS_ARGS.get(word)
        if at is not None and i + 1 + at < len(words) and re.fullmatch(r"\d+", words[i + 1 + at]):
            found.append(f"'{' '.join(words[i:i + 2 + at])}'")
    text = " ".join(words)
    for match in re.finditer(rf"(?:\$\{{?{STATUS_VARS}\}}?|\b{STATUS_VARS}|\$\?)\s*(?:==|!=|-eq|-ne)\s*\d+\b"
                             rf"|\b\d+\s*(?:==|!=|-eq|-ne)\s*(?:\$\{{?{STATUS_VARS}\}}?|\b{STATUS_VARS}\b|\$\?)", text):
        found.append(f"comparison '{match.group(0)}'")
    assert not found, (
        f"{SCRIPT.name} spells exit codes as numbers outside its exit-code block: {found}. "
        f"Use the {PREFIX}<name> constants (add one to the block, named as in genesis/exitcodes.py)")


def test_the_script_names_every_code_the_loop_ends_with():
    missing = sorted(set(loop_codes()) - set(script_constants()) - set(PASSED_THROUGH))
    assert not missing, (
        f"the loop can end with {missing} (genesis/exitcodes.py) but {SCRIPT.name} does not name them: add "
        f"{PREFIX}<name> to its block and handle them (after_step), or list them in STEPS_ONLY in {THIS} "
        f"with the reason")


def test_the_loop_ends_only_with_codes_it_can_end_with():
    words = body_tokens()
    ending = []
    for i, word in enumerate(words[:-1]):
        if word in ("exit", "finish_loop"):
            match = re.fullmatch(rf"\$\{{?{PREFIX}(\w+)\}}?", words[i + 1])
            if match and match.group(1) in STEPS_ONLY:
                ending.append(f"{word} {words[i + 1]}")
    assert not ending, f"{SCRIPT.name} ends the loop with codes only steps use (STEPS_ONLY in {THIS}): {ending}"


@pytest.mark.parametrize("name", sorted(python_codes()))
def test_the_reference_says_who_ends_with_each_code(name):
    value, sections = python_codes()[name], reference_sections()
    assert value in sections, (
        f"{REFERENCE.name} does not list {value} ({name} in genesis/exitcodes.py): run "
        f"`.venv/bin/{reference.COMMAND}` (and give it its entry in ENDS of genesis/reference.py)")
    by_loop = "**The loop**" in sections[value]
    if name in STEPS_ONLY:
        assert not by_loop, (
            f"{REFERENCE.name} says the loop ends with {value} ({name}), but {THIS} says only steps do "
            f"({STEPS_ONLY[name]}): fix its entry in ENDS of genesis/reference.py, or STEPS_ONLY")
    else:
        assert by_loop, (
            f"the loop can end with {value} ({name} in genesis/exitcodes.py): say what it means for "
            f"start-multi-agent-loop.sh in its entry in ENDS of genesis/reference.py, or list {name} in STEPS_ONLY "
            f"in {THIS} with the reason")


def test_every_code_in_the_reference_exists():
    unknown = sorted(set(reference_sections()) - set(python_codes().values()))
    assert not unknown, f"{REFERENCE.name} lists codes genesis/exitcodes.py does not define: {unknown}"


def test_the_readmes_short_table_names_real_codes_and_every_end_of_the_loop():
    """The README's short table (its words are a user's, not the reference's) lists only codes
    genesis/exitcodes.py defines, and every code the loop can end with, so a user who meets one
    finds it there (a rare one in the row that links the reference)."""
    listed = [code for codes in readme_table() for code in codes]
    unknown = sorted(set(listed) - {code.value for code in reference.exit_codes()})
    assert not unknown, f"README's exit-code table lists codes genesis/exitcodes.py does not define: {unknown}"
    missing = sorted(set(loop_codes().values()) - set(listed))
    assert not missing, (f"README's exit-code table leaves out codes the loop can end with: {missing}; add them "
                         f"(a rare one to the row that links docs/reference/exit-codes.md)")


def test_the_scripts_header_lists_the_codes_the_loop_ends_with():
    listed, expected = header_codes(), set(loop_codes().values())
    assert listed == expected, (
        f"{SCRIPT.name}'s header ('Exit codes: ...', its --help) disagrees with genesis/exitcodes.py: "
        f"missing {sorted(expected - listed)}, not a code the loop ends with {sorted(listed - expected)}")

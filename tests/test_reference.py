"""The reference pages are what the code says: docs/reference/settings.md lists every knob of
config.KNOBS, commands.md every command of the click tree and the loop script's flags,
exit-codes.md every code of exitcodes.py, each as `python -m genesis.reference` renders it
now. A knob, a command or a code added without rewriting the pages fails here, with the
command to run."""

from __future__ import annotations

import difflib
import inspect
import re
import shutil
import subprocess
import sys

import click
import pytest
from helpers import paths

from genesis import exitcodes, reference
from genesis.cli import cli
from genesis.config import KNOBS, PHASE_SUFFIXES

RUN = f".venv/bin/{reference.COMMAND}"


def generated(name: str) -> str:
    """The generated part of a checked-in page."""
    text = (reference.REFERENCE / name).read_text()
    return text[text.index(reference.GENERATED):text.index(reference.END)]


@pytest.mark.parametrize("page", reference.PAGES, ids=lambda page: page.name)
def test_the_checked_in_page_is_what_the_code_renders(page):
    text = page.path.read_text()
    rendered = reference.render(page, text)
    diff = "".join(list(difflib.unified_diff(text.splitlines(True), rendered.splitlines(True), "checked in",
                                             "rendered", n=1))[:40])
    assert rendered == text, f"docs/reference/{page.name} differs from what the code says: run `{RUN}`\n{diff}"


def test_the_settings_page_lists_every_knob():
    text = generated("settings.md")
    missing = [knob.name for knob in KNOBS if f"`{knob.name}` |" not in text]
    missing += [f"PHASE_<Name>_{suffix}" for suffix in PHASE_SUFFIXES if f"`PHASE_<Name>_{suffix}`" not in text]
    assert not missing, f"docs/reference/settings.md does not list {missing}: run `{RUN}`"
    rows = re.findall(r"^\| <a id=\"([a-z0-9_]+)\"></a>`([A-Za-z0-9_<>]+)`", text, re.M)
    assert [name for _, name in rows if not name.startswith("PHASE_<")] == \
        [knob.name for knob in sorted(KNOBS, key=lambda k: [g for g, _, _ in reference.GROUPS].index(
            reference.group_of(k)))], "each knob once, in its group, in KNOBS order within it"
    assert all(anchor == name.lower().replace("<", "").replace(">", "") for anchor, name in rows)


def test_every_group_of_settings_is_reachable():
    titles = [title for title, _, _ in reference.GROUPS]
    assert reference.GROUPS[-1][2] == ("",), "the last group takes every knob no other group does"
    assert len(set(titles)) == len(titles)
    assert {reference.group_of(knob) for knob in KNOBS} == set(titles), \
        "a group of GROUPS in genesis/reference.py that no knob lands in: remove it or fix its prefixes"


def commands() -> list[tuple[click.Command, click.Context]]:
    return reference.walk(cli, click.Context(cli, info_name="genesis"))


def test_the_commands_page_lists_every_command_and_option():
    text = generated("commands.md")
    missing = []
    for command, ctx in commands():
        shown = not (command.hidden or (ctx.parent and ctx.parent.command.hidden))
        if shown and f"### `{ctx.command_path}`" not in text:
            missing.append(ctx.command_path)
        elif not shown and f"- `{ctx.command_path}`:" not in text:
            missing.append(f"{ctx.command_path} (hidden)")
        if shown:
            section = text.split(f"### `{ctx.command_path}`\n", 1)[1].split("\n### ", 1)[0]
            missing += [f"{ctx.command_path} {opt}" for p in command.params if isinstance(p, click.Option)
                        and not p.hidden for opt in p.opts if f"`{opt}" not in section and f", {opt}" not in section]
    assert not missing, f"docs/reference/commands.md does not list {missing}: run `{RUN}`"
    assert sum(1 for command, _ in commands() if command.hidden) >= 5, "the loop's steps are hidden commands"


def test_the_commands_page_holds_the_loops_help():
    shown = subprocess.run([str(paths.LOOP), "--help"], capture_output=True, text=True, timeout=30)
    assert shown.returncode == exitcodes.OK
    assert reference.loop_usage() == shown.stdout.strip("\n")
    assert f"```text\n{shown.stdout.strip()}\n```" in generated("commands.md")


def test_the_loops_flags_are_the_ones_it_takes():
    """Every flag the loop's --help lists is one its argument parsing takes, and the reverse."""
    script = paths.LOOP.read_text()
    main = script[script.index("\nmain() {"):]
    taken = {flag for arm in re.findall(r"(?m)^ {6}(--?[a-z][a-z-]*(?: \| --?[a-z][a-z-]*)*)\)", main)
             for flag in arm.split(" | ")}
    listed = reference.loop_flags()
    assert set(listed) | {"-h"} == taken, f"the loop's --help lists {sorted(listed)}, it takes {sorted(taken)}"
    assert listed["--project"] and listed["--set"] and not listed["--trust"] and not listed["--help"]


def test_the_exit_codes_page_lists_every_code_with_its_comment():
    text = generated("exit-codes.md")
    source = inspect.getsource(exitcodes)
    for name, value in vars(exitcodes).items():
        if not (name.isupper() and isinstance(value, int)):
            continue
        assert f"### {value} `{name}`" in text, f"docs/reference/exit-codes.md does not list {value}: run `{RUN}`"
        comment = re.search(rf"^{name} = {value}\s*#\s*(.+)$", source, re.M)
        if comment:
            assert comment.group(1).strip() in text
    went_on = reference.comments("A = 1  # the first line\n           # and the next\nB = 2  # alone\n")
    assert went_on == {"A": "the first line and the next", "B": "alone"}, \
        "a comment that goes on below its line is read whole"


def test_a_code_without_a_comment_has_its_meaning_here():
    said = reference.comments(inspect.getsource(exitcodes))
    commented = sorted(name for name in reference.UNCOMMENTED if said.get(name))
    assert not commented, f"exitcodes.py now says what {commented} mean: remove them from UNCOMMENTED"
    assert all(code.meaning for code in reference.exit_codes()), "every code has a meaning"


def test_a_code_without_its_entry_is_refused(monkeypatch):
    monkeypatch.delitem(reference.ENDS, "SERVE_FAILED")
    with pytest.raises(ValueError, match=r"SERVE_FAILED \(33\).*say who ends with each"):
        reference.exit_codes()
    monkeypatch.setitem(reference.ENDS, "SERVE_FAILED", reference.Ends())
    monkeypatch.setitem(reference.ENDS, "GONE", reference.Ends())
    with pytest.raises(ValueError, match="GONE"):
        reference.exit_codes()


def test_a_phase_setting_without_its_words_is_refused(monkeypatch):
    monkeypatch.setattr(reference, "PHASE_SUFFIXES", (*PHASE_SUFFIXES, "MODEL"))
    with pytest.raises(ValueError, match=r"PHASE_<Name>_\{MODEL\}.*PHASE_SETTINGS"):
        reference.settings_lines()


def test_check_names_a_stale_page_and_the_rewrite_mends_it(tmp_path, monkeypatch, capsys):
    copy = tmp_path / "reference"
    shutil.copytree(reference.REFERENCE, copy)
    monkeypatch.setattr(reference, "REFERENCE", copy)
    page = copy / "settings.md"
    page.write_text(page.read_text().replace("`GENESIS_MAX_ITERATIONS`", "`GENESIS_MAX_ITERATION`"))
    assert reference.main(["--check"]) == exitcodes.ERROR
    assert f"docs/reference/settings.md differs from the code: run `{reference.COMMAND}`" in capsys.readouterr().err
    assert reference.main([]) == exitcodes.OK
    assert reference.main(["--check"]) == exitcodes.OK
    assert page.read_text() == (paths.ROOT / "docs" / "reference" / "settings.md").read_text()
    assert reference.main(["--bad"]) == exitcodes.USAGE


def test_outside_a_checkout_it_says_where_to_run_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(reference, "REFERENCE", tmp_path / "docs" / "reference")
    assert reference.main(["--check"]) == exitcodes.USAGE
    assert "run it in a Genesis checkout" in capsys.readouterr().err


def test_a_page_without_its_markers_is_refused(tmp_path):
    with pytest.raises(ValueError, match="no '<!-- generated by python -m genesis.reference"):
        reference.render(reference.PAGES[0], "# Settings\n\nprose only\n")


def test_the_module_runs_as_the_pages_say():
    checked = subprocess.run([sys.executable, "-m", "genesis.reference", "--check"], cwd=paths.ROOT,
                             capture_output=True, text=True, timeout=60)
    assert (checked.returncode, checked.stderr) == (exitcodes.OK, "")
    assert all(reference.GENERATED in page.path.read_text() for page in reference.PAGES)

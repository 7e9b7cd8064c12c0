"""The adapter seam: which CLI runs, and the command line Claude Code gets."""

from __future__ import annotations

from pathlib import Path

from genesis.agents import adapter_for
from genesis.agents.base import Adapter, TextReader
from genesis.agents.claude import ClaudeCode, ClaudeTextReader
from genesis.agents.generic import GenericCli
from genesis.phases import Phase, Trigger

PHASE = Phase("Builder", Trigger("always"), Path("builder.md"))


def test_the_adapter_is_chosen_by_the_programs_name():
    assert isinstance(adapter_for(("claude", "-p")), ClaudeCode)
    assert isinstance(adapter_for(("/opt/bin/claude",)), ClaudeCode)
    assert type(adapter_for(("python3", "-m", "genesis.demo.simagent"))) is GenericCli
    assert type(adapter_for(("claude-wrapper",))) is GenericCli


def test_claude_gets_stream_json_unless_the_user_chose_a_format():
    claude = ClaudeCode()
    argv = claude.command(("claude", "-p", "--dangerously-skip-permissions"))
    assert argv == ("claude", "-p", "--dangerously-skip-permissions", "--output-format", "stream-json", "--verbose")
    assert claude.raw_suffix(argv) == ".jsonl"
    assert claude.command(("claude", "-p", "--output-format", "stream-json")) == \
        ("claude", "-p", "--output-format", "stream-json", "--verbose")
    text = claude.command(("claude", "-p", "--output-format=text"))
    assert text == ("claude", "-p", "--output-format=text")
    assert claude.raw_suffix(text) is None and isinstance(claude.reader(text), ClaudeTextReader)


def test_a_phases_turn_and_budget_caps_reach_claude_only():
    capped = Phase("Builder", Trigger("always"), Path("builder.md"), max_turns=30, max_budget_usd=2.5)
    argv = ClaudeCode().command(("claude", "-p"), capped)
    assert argv[-4:] == ("--max-turns", "30", "--max-budget-usd", "2.5")
    assert ClaudeCode().options_problem(("claude",), capped) is None
    assert "Claude Code options" in Adapter().options_problem(("aider",), capped)
    assert Adapter().options_problem(("aider",), PHASE) is None


def test_text_mode_reads_a_limit_only_from_a_failed_runs_last_line():
    reader = ClaudeTextReader(now=lambda: 1_800_000_000.0)
    for line in ("Working...", "You've hit your 5-hour limit · resets 9:17am (UTC)"):
        assert reader.feed(line) == [line]
    ending = reader.ending(1)
    assert ending.limit is not None and ending.limit.kind == "five_hour" and ending.api_error is None
    # The same words as the final answer of a run that succeeded: its result, not a limit.
    assert reader.ending(0).limit is None and reader.ending(0).final_text.startswith("You've hit")
    quoted = ClaudeTextReader()
    quoted.feed("I found \"You've hit your 5-hour limit · resets 9:17am (UTC)\" in the fixture.")
    assert quoted.ending(1).limit is None


def test_a_generic_cli_is_its_own_transcript():
    reader = Adapter().reader(("aider",))
    assert isinstance(reader, TextReader) and reader.feed("\x1b[1mhello") == ["\x1b[1mhello"]
    assert reader.ending(0).final_text == "\x1b[1mhello" and reader.ending(1).final_text == ""

"""`genesis limit` and `genesis limit clear`: the remembered usage limits, shown and forgotten."""

from __future__ import annotations

import json
import time
from pathlib import Path

from click.testing import CliRunner
from helpers.git import new_repo
from helpers.state import state_of

from genesis.agents.base import Account, Limit
from genesis.cli import cli
from genesis.config import default_layout
from genesis.hints import hint
from genesis.loop import limits
from genesis.loop.limits import Remembered
from genesis.store.accounts import AccountStore, root_of


def invoke(project: Path, *args: str):
    return CliRunner().invoke(cli, ["--project", str(project), *args], catch_exceptions=False)


def met(project: Path, cli_name: str, home: str, hours: float = 72, key: str = "") -> Remembered:
    now = time.time()
    limit = Limit(now + hours * 3600, "seven_day", "You've hit your weekly limit · resets Nov 25")
    entry = Remembered(Account(cli_name, home, key), limit, False, now)
    limits.remember(default_layout(project), "claude", entry, now, 60)
    return entry


def test_limit_with_nothing_remembered_says_every_agent_runs(project):
    shown = invoke(project, "limit")
    assert shown.exit_code == 0
    assert shown.output == f"no usage limit remembered for {project}: every agent CLI and account runs\n"
    assert not (state_of(project) / "limit.json").exists()


def test_limit_shows_each_cli_account_kind_reset_and_words(project):
    claude = met(project, "claude", "/srv/claude-work", key="ANTHROPIC_API_KEY#0123456789ab")
    met(project, "codex", "/srv/codex")
    shown = invoke(project, "limit")
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    assert lines[0] == "claude: config /srv/claude-work; key ANTHROPIC_API_KEY#0123456789ab"
    assert lines[1].startswith(f"  seven_day, resets {limits.when(claude.resets_at)}, in 7")
    assert lines[2] == "  the agent said: You've hit your weekly limit · resets Nov 25"
    assert lines[3] == "codex: config /srv/codex; no API key set"
    assert lines[-1] == f"forget one with: {hint(project, 'limit', 'clear', '--agent', 'codex')} (or --all)"


def test_limit_reads_an_older_genesiss_file_as_the_configured_clis(project):
    layout = default_layout(project)
    layout.state_dir.mkdir(mode=0o700, parents=True)
    layout.limit_file.write_text(json.dumps({"resets_at": time.time() + 86400, "kind": "seven_day",
                                             "message": "weekly", "seen_at": time.time()}))
    shown = invoke(project, "limit")
    assert shown.output.startswith("claude: account unknown (remembered by an older Genesis: it holds for every "
                                   "account of this CLI)\n")
    cleared = invoke(project, "limit", "clear")
    assert cleared.exit_code == 0 and "forgot the usage limit of claude (account unknown)" in cleared.output
    assert not layout.limit_file.exists()


def test_limit_clear_forgets_the_configured_cli_an_agent_named_or_all(project):
    met(project, "claude", "/srv/a")
    met(project, "claude", "/srv/b")
    met(project, "codex", "/srv/codex")
    met(project, "gemini", "/srv/gemini")
    cleared = invoke(project, "limit", "clear")  # the configured CLI: claude, by default
    assert cleared.exit_code == 0
    first, second = cleared.output.splitlines()[:2]
    assert first.startswith("forgot the usage limit of claude (config /srv/a; no API key set): seven_day, resetting ")
    assert second.startswith("forgot the usage limit of claude (config /srv/b; no API key set): seven_day, resetting ")
    assert "the next start calls the agent again" in cleared.output
    again = invoke(project, "limit", "clear")
    assert again.exit_code == 0
    assert again.output == "no usage limit remembered for claude: nothing to forget; remembered for codex, " \
                           "gemini: use --agent codex or --all\n"
    assert "forgot the usage limit of codex" in invoke(project, "limit", "clear", "--agent", "codex").output
    everything = invoke(project, "limit", "clear", "--all")
    assert "forgot the usage limit of gemini" in everything.output
    assert invoke(project, "limit").output.startswith("no usage limit remembered")


def test_limit_clear_refuses_both_an_agent_and_all_and_an_unknown_agent(project):
    both = invoke(project, "limit", "clear", "--agent", "claude", "--all")
    assert both.exit_code == 2 and "--agent and --all: give one of them" in both.output
    unknown = invoke(project, "limit", "clear", "--agent", "claud")
    assert unknown.exit_code == 2 and "'claud' is not one of" in unknown.output


def test_limit_outside_a_git_project_is_a_usage_error(tmp_path):
    shown = invoke(tmp_path, "limit")
    assert shown.exit_code == 2 and "not a git work tree" in shown.output


def test_limit_shows_and_clear_forgets_a_limit_another_loop_on_the_account_met(project, tmp_path, hermetic):
    other = new_repo(tmp_path / "other")
    now = time.time()
    entry = Remembered(Account("claude", "/srv/claude-work", ""), Limit(now + 3600, "five_hour", "limit"), False, now,
                       project=str(other), run_id="run-other")
    store = AccountStore(root_of("", {"HOME": str(hermetic)}))
    limits.share(store, entry, now, 60)
    shown = invoke(project, "limit")
    assert shown.exit_code == 0, shown.output
    assert shown.output.splitlines()[0] == "claude: config /srv/claude-work; no API key set"
    assert f"  met by the loop of {other} (run run-other): it holds for every loop on this account" in shown.output
    cleared = invoke(project, "limit", "clear", "--agent", "claude")
    assert cleared.exit_code == 0 and "forgot the usage limit of claude (config /srv/claude-work" in cleared.output
    assert limits.read_shared(store, now) == ([], None)

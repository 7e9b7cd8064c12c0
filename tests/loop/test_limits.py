"""Usage limits remembered per agent CLI and account: keyed, read from an older Genesis's file,
kept aside when unusable, forgotten on request.

Real files in a real project's state folder; the time is given, so a weekly limit takes none.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from genesis import exitcodes
from genesis.agents import adapter_named
from genesis.agents.base import Account, Limit, key_fingerprint
from genesis.config import resolve
from genesis.hints import hint
from genesis.loop import limits
from genesis.loop.limits import Remembered
from genesis.loop.step import Step, ledger_of
from genesis.loop.waiting import known_limit, plan_limit, whose

RUN = "run-limits"
NOW = 1_800_000_000.0
WEEKLY = Limit(NOW + 3 * 86400, "seven_day", "You've hit your weekly limit · resets Nov 25, 10:28pm (UTC)")
SHORT = Limit(NOW + 3600, "five_hour", "You've hit your 5-hour limit · resets 5:13am (UTC)")


def claude_with(**env: str):
    adapter = adapter_named("claude")
    return adapter, adapter.account({"HOME": os.environ["HOME"], **env})


def stored(step: Step) -> dict:
    return json.loads(step.layout.limit_file.read_text())


def test_an_account_is_the_clis_folder_and_a_fingerprint_of_its_key_never_the_key(hermetic):
    claude = adapter_named("claude")
    plain = claude.account({"HOME": str(hermetic)})
    assert plain == Account("claude", str(hermetic / ".claude"), "")
    moved = claude.account({"HOME": str(hermetic), "CLAUDE_CONFIG_DIR": "/srv/work-account"})
    assert moved.home == "/srv/work-account"
    keyed = claude.account({"HOME": str(hermetic), "ANTHROPIC_API_KEY": "sk-ant-secret-1"})
    other = claude.account({"HOME": str(hermetic), "ANTHROPIC_API_KEY": "sk-ant-secret-2"})
    assert keyed.key.startswith("ANTHROPIC_API_KEY#") and keyed.key != other.key
    assert "secret" not in keyed.key and "secret" not in keyed.describe()
    assert key_fingerprint({"ANTHROPIC_API_KEY": "sk-ant-secret-1"}, ("ANTHROPIC_API_KEY",)) == keyed.key
    # Every CLI has its own folder variable and key variables.
    codex = adapter_named("codex").account({"HOME": str(hermetic), "CODEX_HOME": "/srv/codex",
                                            "OPENAI_API_KEY": "sk-1"})
    assert (codex.cli, codex.home, codex.key.split("#")[0]) == ("codex", "/srv/codex", "OPENAI_API_KEY")
    assert adapter_named("aider").account({"OPENAI_API_KEY": "sk-1"}).home == ""


@pytest.mark.fault(61)
def test_a_limit_binds_its_own_account_only(step, said):
    assert plan_limit(step, SHORT, "Builder", 1, NOW, who=claude_with()) == exitcodes.WAIT
    entry = stored(step)["limits"][0]
    assert stored(step)["version"] == limits.VERSION
    assert (entry["cli"], entry["home"], entry["key"], entry["kind"]) == \
        ("claude", str(Path(os.environ["HOME"]) / ".claude"), "", "five_hour")
    assert known_limit(step, NOW + 10, claude_with()).limit == SHORT
    # Another account of the same CLI, or another CLI, is not held by it.
    assert known_limit(step, NOW + 10, claude_with(CLAUDE_CONFIG_DIR="/srv/other")) is None
    assert known_limit(step, NOW + 10, claude_with(ANTHROPIC_API_KEY="sk-ant-other")) is None
    codex = adapter_named("codex")
    assert known_limit(step, NOW + 10, (codex, codex.account({"HOME": os.environ["HOME"]}))) is None
    # Past its reset and margin it holds no more.
    assert known_limit(step, NOW + 3600 + 60, claude_with()) is None


def test_two_accounts_each_keep_their_own_limit(step):
    plan_limit(step, SHORT, "Builder", 1, NOW, who=claude_with())
    plan_limit(step, WEEKLY, "Builder", 1, NOW, who=claude_with(CLAUDE_CONFIG_DIR="/srv/other"))
    assert [e["home"] for e in stored(step)["limits"]] == [str(Path(os.environ["HOME"]) / ".claude"), "/srv/other"]
    assert known_limit(step, NOW, claude_with()).limit == SHORT
    assert known_limit(step, NOW, claude_with(CLAUDE_CONFIG_DIR="/srv/other")).limit == WEEKLY
    # A newer limit of one account replaces its older one; a limit past its reset is dropped.
    plan_limit(step, replace(SHORT, resets_at=NOW + 7200), "Builder", 2, NOW + 3700, who=claude_with())
    assert [e["resets_at"] for e in stored(step)["limits"]] == [WEEKLY.resets_at, NOW + 7200]


@pytest.mark.fault(61)
def test_the_stop_names_the_cli_the_account_and_the_ways_to_go_on(step, said):
    assert plan_limit(step, WEEKLY, "Builder", 1, NOW, who=claude_with()) == exitcodes.USAGE_LIMIT
    kind, message = said[-1]
    home = Path(os.environ["HOME"]) / ".claude"
    assert kind == "error"
    assert f"usage limit (seven_day) of claude (config {home}; no API key set)" in message
    assert "Restart the loop after" in message
    assert "another account (another CLAUDE_CONFIG_DIR or another ANTHROPIC_API_KEY)" in message
    assert "another CLI (GENESIS_AGENT_CLI)" in message
    assert message.endswith(f"forget it: {hint(step.cfg.project, 'limit', 'clear', '--agent', 'claude')}")
    stop = step.events(kinds=("limit_stop",))[-1]
    assert (stop["cli"], stop["known"]) == ("claude", False)
    # A restart meets it remembered: the same words, and the agent is not called.
    known = known_limit(step, NOW + 60, claude_with())
    assert plan_limit(step, known.limit, "Builder", 1, NOW + 60, known=known, who=claude_with()) == \
        exitcodes.USAGE_LIMIT
    assert "remembered, so the agent is not called" in said[-1][1]
    assert step.events(kinds=("limit_stop",))[-1]["known"] is True


def older_file_met_by_claude(step) -> dict:
    """An older Genesis's limit file (one limit, no CLI, no account) and the run of claude whose
    phase ended on it, as the ledger keeps it (a limit no run recorded is not applied): the file."""
    old = {"resets_at": WEEKLY.resets_at, "kind": "seven_day", "message": WEEKLY.message, "guessed": False,
           "seen_at": NOW}
    step.layout.limit_file.write_text(json.dumps(old))
    ledger_of(step.layout).record("run-older", "loop_start", at=NOW - 60, agent=["claude", "-p"])
    ledger_of(step.layout).record("run-older", "phase_end", at=NOW - 1, ending="limit")
    return old


def test_an_older_genesiss_file_reads_as_the_configured_cli_for_an_unknown_account(step, said):
    older_file_met_by_claude(step)
    known = known_limit(step, NOW, claude_with())
    assert known.account == Account("claude", None, None) and known.limit == WEEKLY
    # Its account is unknown: it holds for every account of that CLI, never for another CLI.
    assert known_limit(step, NOW, claude_with(CLAUDE_CONFIG_DIR="/srv/other")) is not None
    codex = adapter_named("codex")
    assert known_limit(step, NOW, (codex, codex.account({"HOME": os.environ["HOME"]}))) is None
    plan_limit(step, known.limit, "Builder", 1, NOW, known=known, who=claude_with())
    assert "of claude (account unknown: remembered by an older Genesis)" in said[-1][1]
    # The next limit written migrates the file, the old limit kept as it was read.
    plan_limit(step, SHORT, "Builder", 1, NOW, who=claude_with(ANTHROPIC_API_KEY="sk-ant-x"))
    data = stored(step)
    assert data["version"] == limits.VERSION
    assert [(e["cli"], e["home"], e["key"]) for e in data["limits"]][0] == ("claude", None, None)


@pytest.mark.fault(62)
def test_an_older_genesiss_file_read_first_by_a_loop_of_another_cli_holds_the_cli_whose_run_met_it(step, said):
    old = older_file_met_by_claude(step)
    codex = adapter_named("codex")
    loop = Step(resolve(step.cfg.project, env={"GENESIS_AGENT_CMD": "codex exec"}), step.layout, RUN, step.say)
    # The loop of another CLI reads it first: not its own limit, and not set aside as a planted one.
    assert known_limit(loop, NOW, (codex, codex.account({"HOME": os.environ["HOME"]}))) is None
    assert json.loads(step.layout.limit_file.read_text()) == old and not [m for _k, m in said if "aside" in m]
    # The CLI that met it (the ledger's run says which) is held, whatever its account.
    assert known_limit(loop, NOW, claude_with(CLAUDE_CONFIG_DIR="/srv/other")).limit == WEEKLY


@pytest.mark.fault(62)
@pytest.mark.parametrize("plant", ["garbage", "empty", "wrong_version", "not_a_list", "symlink"])
def test_an_unusable_file_is_kept_aside_and_no_limit_is_applied(step, said, tmp_path, plant):
    path = step.layout.limit_file
    victim = tmp_path / "victim.json"
    victim.write_text(json.dumps({"resets_at": WEEKLY.resets_at}))
    if plant == "symlink":
        path.symlink_to(victim)
    else:
        path.write_text({"garbage": "{not json", "empty": "", "wrong_version": '{"version": 9, "limits": []}',
                         "not_a_list": '{"version": 2, "limits": {}}'}[plant])
    assert known_limit(step, NOW, claude_with()) is None
    kind, message = said[-1]
    assert kind == "warn" and "kept aside as limit.json.corrupt-" in message and "none is applied" in message
    assert not os.path.lexists(path)
    assert len(list(path.parent.glob("limit.json.corrupt-*"))) == 1
    assert json.loads(victim.read_text()) == {"resets_at": WEEKLY.resets_at}  # a link is never followed


def test_forget_one_cli_or_all(step):
    codex = adapter_named("codex")
    plan_limit(step, WEEKLY, "Builder", 1, NOW, who=claude_with())
    plan_limit(step, WEEKLY, "Builder", 1, NOW, who=claude_with(CLAUDE_CONFIG_DIR="/srv/other"))
    plan_limit(step, WEEKLY, "Builder", 1, NOW, who=(codex, codex.account({"HOME": os.environ["HOME"]})))
    gone, warning = limits.forget(step.layout, "claude", "claude")
    assert warning is None and [e.account.home for e in gone] == [str(Path(os.environ["HOME"]) / ".claude"),
                                                                  "/srv/other"]
    assert [e["cli"] for e in stored(step)["limits"]] == ["codex"]
    assert limits.forget(step.layout, "claude", "claude")[0] == []
    gone, _ = limits.forget(step.layout, "claude", None)
    assert [e.account.cli for e in gone] == ["codex"]
    assert not step.layout.limit_file.exists()


def test_each_remembered_limit_is_shown_with_its_cli_account_reset_and_words():
    entry = Remembered(Account("claude", "/srv/acct", "ANTHROPIC_API_KEY#0123456789ab"), WEEKLY, False, NOW)
    lines = limits.lines_of(entry, NOW)
    assert lines[0] == "claude: config /srv/acct; key ANTHROPIC_API_KEY#0123456789ab"
    assert lines[1].startswith(f"  seven_day, resets {limits.when(WEEKLY.resets_at)}, in 72h00m")
    assert lines[2] == f"  the agent said: {WEEKLY.message}"
    assert "no longer applies" in limits.lines_of(entry, NOW + 4 * 86400)[1]
    old = limits.lines_of(replace(entry, account=Account("claude", None, None)), NOW)[0]
    assert old == "claude: account unknown (remembered by an older Genesis: it holds for every account of this CLI)"


def test_the_account_of_the_loops_own_environment(step, monkeypatch, hermetic):
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(hermetic / "team"))
    adapter, account = whose(step)
    assert (adapter.name, account.home) == ("claude", str(hermetic / "team"))


@pytest.mark.fault(77)
def test_a_limit_counts_only_with_the_run_event_that_remembered_it_and_never_past_the_longest_limit(step, said):
    plan_limit(step, SHORT, "Builder", 1, NOW, who=claude_with())
    assert known_limit(step, NOW + 10, claude_with()).limit == SHORT
    # Planted beside it: the same account's limit three days away, which no run recorded.
    data = stored(step)
    data["limits"].append({**data["limits"][0], "resets_at": NOW + 3 * 86400, "kind": "seven_day"})
    step.layout.limit_file.write_text(json.dumps(data))
    assert known_limit(step, NOW + 10, claude_with()).limit == SHORT
    kind, message = said[-1]
    assert kind == "warn" and "no run of Genesis recorded" in message and "not applied" in message
    assert [e["kind"] for e in stored(step)["limits"]] == ["five_hour"]  # the planted one kept aside
    (aside,) = step.layout.state_dir.glob("limit.json.unvouched-*")
    assert json.loads(aside.read_text())["limits"][0]["kind"] == "seven_day"
    # A reset further than a week and a day is never believed, even as a run recorded it.
    far = replace(WEEKLY, resets_at=NOW + 30 * 86400)
    plan_limit(step, far, "Builder", 2, NOW + 20, who=claude_with(CLAUDE_CONFIG_DIR="/srv/far"))
    assert known_limit(step, NOW + 30, claude_with(CLAUDE_CONFIG_DIR="/srv/far")) is None

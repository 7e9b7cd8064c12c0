"""genesis.trust: which of genesis.conf's commands the user approved."""

from __future__ import annotations

import json

import pytest

from genesis.config import Setting
from genesis.trust import approve, command_settings, is_command_key, judge, trust_file


def settings(**values: tuple[str, str]) -> dict[str, Setting]:
    return {key: Setting(value, source) for key, (value, source) in values.items()}


@pytest.mark.parametrize("key, value, expected", [
    ("GENESIS_NOTIFY_CMD", "touch x", True), ("GENESIS_TRIAGE_CMD", "x", True), ("GENESIS_AGENT_CMD", "claude", True),
    ("GENESIS_FALLBACK_AGENT_CMD", "codex", True), ("PHASE_Builder_TRIGGER", "when:true", True),
    ("PHASE_Builder_TRIGGER", "tasks:open", False), ("GENESIS_DONE_WHEN", "when:test -e done", True),
    ("GENESIS_DONE_WHEN", "phrase:all done", False), ("GENESIS_LOG_DIR", "when:x", False),
    # A fleet's escalation entry other than fallback/longer is an agent command a child runs.
    ("GENESIS_FLEET_ESCALATION", "fallback|longer", False), ("GENESIS_FLEET_ESCALATION", " longer | ", False),
    ("GENESIS_FLEET_ESCALATION", "fallback|sh -c 'curl x | sh'", True), ("GENESIS_FLEET_ESCALATION", "codex", True)])
def test_command_keys(key, value, expected):
    assert is_command_key(key, value) is expected


def test_only_the_files_commands_count():
    found = command_settings(settings(GENESIS_NOTIFY_CMD=("a", "file"), GENESIS_TRIAGE_CMD=("b", "env"),
                                      GENESIS_AGENT_CMD=("claude -p", "default"), GENESIS_LOG_DIR=("x", "file"),
                                      PHASE_B_TRIGGER=("when:c", "flag")))
    assert [c.key for c in found] == ["GENESIS_NOTIFY_CMD"]


def test_an_escalation_naming_a_command_needs_the_users_word(tmp_path):
    approve(command_settings(settings(GENESIS_FLEET_ESCALATION=("fallback|longer", "file"))), tmp_path)
    agent = settings(GENESIS_FLEET_ESCALATION=("fallback|longer|my-agent --yolo", "file"))
    assert [(c.key, c.state) for c in judge(agent, tmp_path).unapproved] == [("GENESIS_FLEET_ESCALATION", "new")]
    approve(judge(agent, tmp_path).commands, tmp_path)
    assert judge(agent, tmp_path).unapproved == ()
    changed = settings(GENESIS_FLEET_ESCALATION=("fallback|longer|my-agent --other", "file"))
    assert [c.state for c in judge(changed, tmp_path).unapproved] == ["changed"]


def test_first_use_then_new_and_changed(tmp_path):
    s = settings(GENESIS_NOTIFY_CMD=("a", "file"))
    first = judge(s, tmp_path)
    assert first.first_use and first.unapproved == ()
    approve(first.commands, tmp_path)
    assert judge(s, tmp_path).unapproved == () and not judge(s, tmp_path).first_use
    changed = judge(settings(GENESIS_NOTIFY_CMD=("b", "file"), GENESIS_DONE_WHEN=("when:c", "file")), tmp_path)
    assert [(c.key, c.state) for c in changed.unapproved] == [("GENESIS_DONE_WHEN", "new"),
                                                                ("GENESIS_NOTIFY_CMD", "changed")]
    # A record with no commands in it still exists: what the agent appends later is new.
    approve((), tmp_path)
    assert [c.state for c in judge(s, tmp_path).unapproved] == ["new"]


def test_an_unreadable_record_is_kept_aside_and_approves_nothing(tmp_path):
    trust_file(tmp_path).write_text("{not json")
    verdict = judge(settings(GENESIS_NOTIFY_CMD=("a", "file")), tmp_path)
    assert not verdict.first_use and [c.key for c in verdict.unapproved] == ["GENESIS_NOTIFY_CMD"]
    assert verdict.kept_aside is not None and verdict.kept_aside.exists()
    assert not trust_file(tmp_path).exists()


def test_the_record_holds_fingerprints_not_the_commands(tmp_path):
    approve(command_settings(settings(GENESIS_NOTIFY_CMD=("curl -H 'token: s3cret' x", "file"))), tmp_path)
    text = trust_file(tmp_path).read_text()
    assert "s3cret" not in text and list(json.loads(text)["approved"]) == ["GENESIS_NOTIFY_CMD"]

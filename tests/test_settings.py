"""Merging the hook into Claude Code's settings: preserve everything, add only ours."""

import json

import pytest
from click.testing import CliRunner

from genesis.claude_settings import (ENV_DEFAULTS, HOOK_EVENTS, SettingsError, hook_command, install,
                                     installed_events, uninstall)
from genesis.cli import cli
from genesis.heartbeat import hook_script

CMD = hook_command(hook_script())
NOW = 1_800_000_000.0

USER_SETTINGS = {
    "model": "opus",
    "permissions": {"allow": ["Bash(git:*)"]},
    "env": {"BASH_DEFAULT_TIMEOUT_MS": "60000", "MY_VAR": "1"},
    "hooks": {
        "PostToolUse": [{"matcher": "Write", "hooks": [{"type": "command", "command": "prettier --write"}]}],
        "Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}],
    },
}


def test_install_into_a_missing_file_adds_the_hook_for_every_sign_of_life(tmp_path):
    path = tmp_path / ".claude" / "settings.json"
    change = install(path, CMD, tmp_path / "state", NOW)
    data = json.loads(path.read_text())
    assert set(change.added_events) == set(HOOK_EVENTS)
    for event in ("PreToolUse", "PostToolUse", "PostToolUseFailure"):
        assert data["hooks"][event] == [{"matcher": "*", "hooks": [
            {"type": "command", "command": CMD, "timeout": 10}]}]
    assert data["env"] == ENV_DEFAULTS
    assert change.backup is None


def test_install_preserves_every_other_setting_and_the_users_env_values(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text(json.dumps(USER_SETTINGS))
    change = install(path, CMD, tmp_path / "state", NOW)
    data = json.loads(path.read_text())
    assert data["model"] == "opus" and data["permissions"] == USER_SETTINGS["permissions"]
    assert data["hooks"]["Stop"] == USER_SETTINGS["hooks"]["Stop"]
    assert data["hooks"]["PostToolUse"][0] == USER_SETTINGS["hooks"]["PostToolUse"][0]
    assert data["hooks"]["PostToolUse"][1]["hooks"][0]["command"] == CMD
    assert data["env"]["BASH_DEFAULT_TIMEOUT_MS"] == "60000"  # the user's own value stays
    assert data["env"]["BASH_MAX_TIMEOUT_MS"] == "7200000" and data["env"]["MY_VAR"] == "1"
    assert change.added_env == ("BASH_MAX_TIMEOUT_MS",)
    assert json.loads(change.backup.read_text()) == USER_SETTINGS


def test_install_is_idempotent(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text(json.dumps(USER_SETTINGS))
    install(path, CMD, tmp_path / "state", NOW)
    first = path.read_text()
    backups = sorted(tmp_path.glob("settings.json.bak-*"))
    change = install(path, CMD, tmp_path / "state", NOW + 60)
    assert change.added_events == () and change.backup is None
    assert path.read_text() == first
    assert sorted(tmp_path.glob("settings.json.bak-*")) == backups


def test_a_hook_from_a_moved_checkout_is_replaced_not_duplicated(tmp_path):
    path = tmp_path / "settings.json"
    install(path, "/old/place/genesis-heartbeat.sh", tmp_path / "state", NOW)
    install(path, CMD, tmp_path / "state", NOW + 1)
    data = json.loads(path.read_text())
    commands = [h["command"] for g in data["hooks"]["PostToolUse"] for h in g["hooks"]]
    assert commands == [CMD]


def test_uninstall_removes_only_what_install_added(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text(json.dumps(USER_SETTINGS))
    install(path, CMD, tmp_path / "state", NOW)
    uninstall(path, tmp_path / "state", NOW + 1)
    assert json.loads(path.read_text()) == USER_SETTINGS
    assert installed_events(path) == []


@pytest.mark.parametrize("text", ['{"hooks": ', "[]", '{"hooks": []}', '{"hooks": {"PostToolUse": {}}}',
                                  '{"env": "x"}'])
def test_a_malformed_file_is_refused_and_left_untouched(tmp_path, text):
    path = tmp_path / "settings.json"
    path.write_text(text)
    with pytest.raises(SettingsError, match="left untouched"):
        install(path, CMD, tmp_path / "state", NOW)
    assert path.read_text() == text
    assert list(tmp_path.glob("settings.json.*")) == []


def test_cli_install_status_uninstall_at_user_scope(hermetic, project):
    runner = CliRunner()
    status = runner.invoke(cli, ["--project", str(project), "hook", "status"])
    assert status.exit_code == 1 and "not installed" in status.output
    done = runner.invoke(cli, ["--project", str(project), "hook", "install"], catch_exceptions=False)
    assert done.exit_code == 0 and str(hermetic / ".claude" / "settings.json") in done.output
    status = runner.invoke(cli, ["--project", str(project), "hook", "status"])
    assert status.exit_code == 0 and "user: installed" in status.output
    again = runner.invoke(cli, ["--project", str(project), "hook", "install"])
    assert "already installed" in again.output
    gone = runner.invoke(cli, ["--project", str(project), "hook", "uninstall"])
    assert gone.exit_code == 0 and "removed" in gone.output
    assert json.loads((hermetic / ".claude" / "settings.json").read_text()) == {}


def test_cli_refuses_a_malformed_settings_file_with_exit_2(hermetic, project):
    path = hermetic / ".claude" / "settings.json"
    path.parent.mkdir()
    path.write_text("{not json")
    result = CliRunner().invoke(cli, ["--project", str(project), "hook", "install"])
    assert result.exit_code == 2 and "left untouched" in result.output
    assert path.read_text() == "{not json"

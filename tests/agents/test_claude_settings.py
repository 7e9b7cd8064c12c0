"""Merging the hook into Claude Code's settings: preserve everything, add only ours."""

import json
import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from genesis.agents.claude.settings import (ENV_DEFAULTS, HOOK_EVENTS, SettingsError, hook_command, install,
                                            installed_events, uninstall)
from genesis.cli import cli
from genesis.health.heartbeat import hook_script

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
    status = runner.invoke(cli, ["--project", str(project), "hook", "status"], catch_exceptions=False)
    assert status.exit_code == 1 and "not installed" in status.output
    done = runner.invoke(cli, ["--project", str(project), "hook", "install"], catch_exceptions=False)
    assert done.exit_code == 0 and str(hermetic / ".claude" / "settings.json") in done.output
    status = runner.invoke(cli, ["--project", str(project), "hook", "status"], catch_exceptions=False)
    assert status.exit_code == 0 and "user: installed" in status.output
    again = runner.invoke(cli, ["--project", str(project), "hook", "install"], catch_exceptions=False)
    assert "already installed" in again.output
    gone = runner.invoke(cli, ["--project", str(project), "hook", "uninstall"], catch_exceptions=False)
    assert gone.exit_code == 0 and "removed" in gone.output
    assert json.loads((hermetic / ".claude" / "settings.json").read_text()) == {}


def test_cli_refuses_a_malformed_settings_file_with_exit_2(hermetic, project):
    path = hermetic / ".claude" / "settings.json"
    path.parent.mkdir()
    path.write_text("{not json")
    result = CliRunner().invoke(cli, ["--project", str(project), "hook", "install"], catch_exceptions=False)
    assert result.exit_code == 2 and "left untouched" in result.output
    assert path.read_text() == "{not json"


# --- the settings file is the user's file ------------------------------------------------

def test_install_and_uninstall_keep_a_private_files_mode(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text('{"apiKeyHelper": "echo sk-secret"}\n')
    path.chmod(0o600)
    change = install(path, CMD, tmp_path / "state", NOW)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(change.backup.stat().st_mode) == 0o600  # the backup holds the key too
    uninstall(path, tmp_path / "state", NOW + 1)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another owner needs root")
def test_install_keeps_the_files_owner(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text("{}\n")
    os.chown(path, 4321, 4322)
    change = install(path, CMD, tmp_path / "state", NOW)
    assert (path.stat().st_uid, path.stat().st_gid) == (4321, 4322)
    assert (change.backup.stat().st_uid, change.backup.stat().st_gid) == (4321, 4322)


def test_install_keeps_key_order_and_non_ascii_text_and_edits_only_what_changes(tmp_path):
    text = ('{\n  "zeta": "naïve ✓ 日本",\n  "model": "opus",\n  "permissions": {"allow": ["Bash(git:*)"]},\n'
            '  "alpha": [1, 2.50, 1e3]\n}\n')
    path = tmp_path / "settings.json"
    path.write_text(text, encoding="utf-8")
    install(path, CMD, tmp_path / "state", NOW)
    new = path.read_text(encoding="utf-8")
    assert list(json.loads(new)) == ["zeta", "model", "permissions", "alpha", "hooks", "env"]
    assert "naïve ✓ 日本" in new and "\\u" not in new
    # every line the user wrote is still there, byte for byte (2.50 and 1e3 included)
    assert new.startswith(text[:text.rindex("]") + 1] + ",\n")
    assert '\n  "permissions": {"allow": ["Bash(git:*)"]},\n' in new


@pytest.mark.parametrize("text", [
    '{\n    "model": "opus",\n    "env": {\n        "MY_VAR": "1"\n    }\n}\n',          # four spaces
    '{\n\t"model": "opus",\n\t"hooks": {\n\t\t"Stop": []\n\t}\n}',                      # tabs, no newline at end
    '{"model":"opus","env":{}}',                                                        # minified
    '{\r\n  "model": "opus"\r\n}\r\n',                                                  # CRLF
    '{ "b" : 1 , "a" : [ 1 , 2 ] }\n\n',                                                # odd spacing
])
def test_install_keeps_the_files_style_and_uninstall_gives_the_same_bytes_back(tmp_path, text):
    path = tmp_path / "settings.json"
    path.write_bytes(text.encode())
    install(path, CMD, tmp_path / "state", NOW)
    new = path.read_bytes().decode()
    assert json.loads(new)["hooks"]["PostToolUse"][-1]["hooks"][0]["command"] == CMD
    indent = "\t" if "\t" in text else "    " if "    " in text else None
    if indent:
        assert f'\n{indent}"hooks": {{' in new or f'\n{indent}"hooks": {{\n{indent}{indent}"Stop": [],' in new
    if "\r\n" in text:
        assert "\n" not in new.replace("\r\n", "")
    assert new.endswith(text[len(text.rstrip()):]) and ("\n" in new) == ("\n" in text or text == "{}")
    uninstall(path, tmp_path / "state", NOW + 1)
    assert path.read_bytes().decode() == text


def test_an_empty_object_gets_a_readable_layout(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text("{}\n")
    install(path, CMD, tmp_path / "state", NOW)
    assert path.read_text() == json.dumps(json.loads(path.read_text()), indent=2) + "\n"


def test_no_backup_is_ever_overwritten_even_within_one_second(tmp_path):
    path = tmp_path / "settings.json"
    versions = [json.dumps({"model": "opus"})]
    path.write_text(versions[0])
    state = tmp_path / "state"
    backups = []
    for step in (install, uninstall, install):
        change = step(path, CMD, state, NOW) if step is install else step(path, state, NOW)
        backups.append(change.backup)
        versions.append(path.read_text())
    assert len(set(backups)) == 3 and all(b.parent == tmp_path for b in backups)
    assert [b.read_text() for b in backups] == versions[:3]  # each holds the file as it was before that step


def test_a_symlinked_settings_file_is_edited_at_its_target_atomically(tmp_path, monkeypatch):
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    real = dotfiles / "claude-settings.json"
    real.write_text('{\n  "model": "opus"\n}\n')
    real.chmod(0o600)
    link = tmp_path / ".claude" / "settings.json"
    link.parent.mkdir()
    link.symlink_to(real)
    renames = []
    monkeypatch.setattr(os, "replace", lambda src, dst, _real=os.replace: (renames.append((src, dst)),
                                                                           _real(src, dst)))
    change = install(link, CMD, tmp_path / "state", NOW)
    assert link.is_symlink() and os.readlink(link) == str(real)   # the link is still a link
    assert change.target == real and installed_events(link) == sorted(HOOK_EVENTS)
    assert json.loads(real.read_text())["model"] == "opus" and stat.S_IMODE(real.stat().st_mode) == 0o600
    settings_renames = [(Path(src).parent, Path(dst)) for src, dst in renames if Path(dst).suffix == ".json"
                        and Path(dst).parent != tmp_path / "state"]
    assert settings_renames == [(dotfiles, real)]  # the temp file was beside the target
    assert json.loads(change.backup.read_text()) == {"model": "opus"}
    assert [p.name for p in dotfiles.iterdir()] == [real.name]  # no temp files, no backup in the dotfiles
    uninstall(link, tmp_path / "state", NOW + 1)
    assert link.is_symlink() and real.read_text() == '{\n  "model": "opus"\n}\n'


def _link_to(tmp_path: Path, make) -> Path:
    link = tmp_path / ".claude" / "settings.json"
    link.parent.mkdir()
    target = tmp_path / "elsewhere"
    make(target)
    link.symlink_to(target)
    return link


@pytest.mark.parametrize("make", [
    lambda t: None,                                          # dangling
    lambda t: t.mkdir(),                                     # a directory
    pytest.param(lambda t: (t.write_text("{}"), os.chown(t, 4321, 4321)),
                 marks=pytest.mark.skipif(os.geteuid() != 0, reason="another owner needs root")),
], ids=["dangling", "directory", "not-yours"])
def test_a_symlink_to_anything_but_a_regular_file_of_yours_is_refused_naming_the_alternatives(tmp_path, make):
    link = _link_to(tmp_path, make)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    with pytest.raises(SettingsError) as err:
        install(link, CMD, tmp_path / "state", NOW)
    assert "--scope project" in str(err.value) and "--scope local" in str(err.value)
    assert "left untouched" in str(err.value)
    assert sorted(p.name for p in tmp_path.rglob("*")) == before and link.is_symlink()


def test_uninstall_leaves_objects_the_user_wrote_even_when_they_end_up_empty(tmp_path):
    path = tmp_path / "settings.json"
    text = '{\n  "env": {},\n  "hooks": {}\n}\n'
    path.write_text(text)
    install(path, CMD, tmp_path / "state", NOW)
    uninstall(path, tmp_path / "state", NOW + 1)
    assert path.read_text() == text


def test_a_malformed_file_behind_a_symlink_is_refused_and_left_untouched(tmp_path):
    where = tmp_path / "claude"
    where.mkdir()
    real = where / "real.json"
    real.write_text('{"hooks": ')
    link = where / "settings.json"
    link.symlink_to(real)
    with pytest.raises(SettingsError, match="left untouched"):
        install(link, CMD, tmp_path / "state", NOW)
    assert real.read_text() == '{"hooks": ' and link.is_symlink()
    assert sorted(p.name for p in where.iterdir()) == ["real.json", "settings.json"]


def test_hook_install_honours_claude_config_dir(hermetic, project, tmp_path, monkeypatch):
    config = tmp_path / "claude-config"
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(config))
    done = CliRunner().invoke(cli, ["--project", str(project), "hook", "install"], catch_exceptions=False)
    assert done.exit_code == 0 and str(config / "settings.json") in done.output
    assert installed_events(config / "settings.json") == sorted(HOOK_EVENTS)
    assert not (hermetic / ".claude" / "settings.json").exists()


def test_cli_install_says_when_it_edited_a_links_target(hermetic, project, tmp_path):
    real = tmp_path / "dotfiles.json"
    real.write_text("{}\n")
    (hermetic / ".claude").mkdir()
    (hermetic / ".claude" / "settings.json").symlink_to(real)
    done = CliRunner().invoke(cli, ["--project", str(project), "hook", "install"], catch_exceptions=False)
    assert done.exit_code == 0 and f"edited its target {real}" in done.output
    assert installed_events(real) == sorted(HOOK_EVENTS)

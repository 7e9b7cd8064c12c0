"""Each of the doctor's checks on a real machine: real git repositories in the states a user
leaves them in, real programs on PATH, the real hook installed or not, HOME in tmp_path."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import paths
from helpers.git import commit_file, git
from helpers.gitstates import conflicted_merge, detached, stash_pop_conflict

from genesis.agents import adapter_named, adapter_of, known
from genesis.cli import cli
from genesis.doctor.checks import (FAIL, GENESIS_CHECKOUT, OK, WARN, agent_checks, alerts_check, box_check,
                                   doctor_config, git_checks, hook_check, project_checks, project_to_check)
from genesis.hints import hint
from genesis.sandbox.box import choose
from genesis.sandbox.detect import probe
from genesis.sandbox.places import Places

CLAUDE = paths.TOOLS / "claude" / "node_modules" / ".bin" / "claude"


def by_name(checks):
    return {c.name: c for c in checks}


def config(project: Path, **settings: str):
    cfg, error = doctor_config(project, settings, None)
    assert error == ""
    return cfg


# --- git -----------------------------------------------------------------------------------

def test_git_and_the_identity_its_commits_carry(bin_dir, project):
    found = by_name(git_checks(project, os.environ))
    assert found["git"].level == OK and found["git"].found.startswith("git version ")
    assert found["git identity"].level == OK
    assert found["git identity"].found == "commits are made as Night Owl <owl@example.invalid>"


def test_git_that_cannot_tell_who_commits_fails_with_the_command_that_says_who(bin_dir, hermetic, project):
    (hermetic / ".gitconfig").write_text("[user]\n\tuseConfigOnly = true\n")
    found = by_name(git_checks(project, os.environ))["git identity"]
    assert found.level == FAIL and "git does not know who you are" in found.found
    assert found.fix == 'git config --global user.name "Your Name" && git config --global user.email "you@example.com"'


def test_git_not_installed_fails(bin_dir, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(bin_dir))  # nothing but the (empty) fake folder
    (checked,) = git_checks(None, os.environ)
    assert checked.name == "git" and checked.level == FAIL
    assert checked.found == "git is not installed (not found on PATH)"


def test_git_older_than_genesis_needs_fails(fake_cli, hermetic):
    fake_cli("git", 'case "$1" in --version) echo "git version 2.20.1";; *) echo "A <a@b> 1 +0000";; esac')
    found = by_name(git_checks(None, os.environ))
    assert found["git"].level == FAIL
    assert found["git"].found == "git version 2.20.1: older than 2.31, which Genesis needs"


# --- the project ---------------------------------------------------------------------------

def test_a_clean_project_on_a_branch_is_ready(bin_dir, project):
    (project / "notes.txt").write_text("mine, untracked\n")
    found = by_name(project_checks(project, config(project)))
    assert [c.level for c in found.values()] == [OK, OK, OK]
    branch = git(project, "symbolic-ref", "--short", "HEAD").strip()
    assert found["repository state"].found == f"on branch {branch}, nothing in progress"
    assert found["uncommitted changes"].found == "none of yours; 1 untracked file(s), left out of every commit"


def test_uncommitted_tracked_changes_fail_with_git_stash(bin_dir, project):
    (project / "README.md").write_text("edited\n")
    found = by_name(project_checks(project, config(project)))["uncommitted changes"]
    assert found.level == FAIL and found.found.startswith("uncommitted changes of yours: README.md; the loop refuses")
    assert found.fix == f"git -C {shlex.quote(str(project))} stash"


def test_a_merge_in_progress_fails_with_its_way_out(bin_dir, project):
    conflicted_merge(project)
    found = by_name(project_checks(project, config(project)))["repository state"]
    assert found.level == FAIL and found.found.startswith("a merge in progress")
    assert f"git -C {shlex.quote(str(project))} merge --abort" in found.fix


def test_conflicts_without_an_operation_fail(bin_dir, project):
    stash_pop_conflict(project)
    found = by_name(project_checks(project, config(project)))["uncommitted changes"]
    assert found.level == FAIL and found.found.startswith("files with unresolved conflicts: f.txt")
    assert found.fix == f"git -C {shlex.quote(str(project))} add f.txt"


def test_a_detached_head_fails_with_the_branch_to_make(bin_dir, project):
    sha = detached(project)
    found = by_name(project_checks(project, config(project)))["repository state"]
    assert found.level == FAIL and found.found.startswith(f"HEAD is detached (at {sha})")
    assert found.fix == f"git -C {shlex.quote(str(project))} switch -c genesis-night"


def test_a_repository_another_user_owns_is_named_as_such(bin_dir, project, monkeypatch):
    monkeypatch.setenv("GIT_TEST_ASSUME_DIFFERENT_OWNER", "1")  # git's own switch for its ownership check
    (found,) = project_checks(project, config(project))
    assert found.level == FAIL and "dubious ownership" in found.found and "not a git work tree" not in found.found
    assert found.fix == f"git config --global --add safe.directory {shlex.quote(str(project))}"


def test_a_folder_that_is_no_work_tree_fails_when_named(bin_dir, tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    (found,) = project_checks(plain, config(plain))
    assert found.level == FAIL and "is not a git work tree" in found.found
    assert found.fix == f"git -C {shlex.quote(str(plain))} init"


def test_which_project_is_checked(bin_dir, project, tmp_path, monkeypatch):
    plain = tmp_path / "plain"
    plain.mkdir()
    assert project_to_check(project, given=False) == (project.resolve(), "")
    assert project_to_check(plain, given=True) == (plain.resolve(), "")
    skipped, why = project_to_check(plain, given=False)
    assert skipped is None and "is not a git work tree" in why
    assert project_to_check(GENESIS_CHECKOUT, given=False) == (None, "here is Genesis's own checkout")
    monkeypatch.setenv("GIT_TEST_ASSUME_DIFFERENT_OWNER", "1")
    assert project_to_check(project, given=False) == (project.resolve(), "")  # refused, but a project


# --- the agent CLI -------------------------------------------------------------------------

def test_the_configured_agent_cli_found_and_its_version(fake_cli, project, monkeypatch):
    fake_cli("my-agent", 'echo "my-agent 4.5.6"')
    monkeypatch.setenv("GENESIS_AGENT_CMD", "my-agent --go")
    cfg = config(project)
    found = by_name(agent_checks(cfg, adapter_of(cfg), project, os.environ, euid=1000))
    assert found["agent CLI"].level == OK and found["agent CLI"].found.endswith("my-agent: my-agent 4.5.6")
    assert found["my-agent login"].level == WARN and found["my-agent login"].found.startswith("cannot tell")
    assert "root" not in found


def test_an_agent_cli_not_on_path_fails_with_its_install_command(bin_dir, project, monkeypatch):
    cfg = config(project)  # the default: Claude Code
    monkeypatch.setenv("PATH", str(bin_dir))  # no claude anywhere on it
    found = by_name(agent_checks(cfg, adapter_of(cfg), project, os.environ, euid=1000))["agent CLI"]
    assert found.level == FAIL and found.found == "the agent command 'claude' is not found on PATH"
    assert found.fix == "npm install -g @anthropic-ai/claude-code"


def test_an_agent_script_that_is_not_executable_fails_with_chmod(bin_dir, project, monkeypatch):
    (project / "agent.sh").write_text("#!/bin/sh\necho agent 1\n")
    monkeypatch.setenv("GENESIS_AGENT_CMD", "./agent.sh")
    cfg = config(project)
    found = by_name(agent_checks(cfg, adapter_of(cfg), project, os.environ, euid=1000))["agent CLI"]
    assert found.level == FAIL and found.fix == f"chmod +x {project.resolve() / 'agent.sh'}"


def test_an_agent_cli_that_cannot_say_its_version_is_a_warning(fake_cli, project, monkeypatch):
    fake_cli("my-agent", "echo 'unknown option' >&2; exit 2")
    monkeypatch.setenv("GENESIS_AGENT_CMD", "my-agent")
    cfg = config(project)
    found = by_name(agent_checks(cfg, adapter_of(cfg), project, os.environ, euid=1000))["agent CLI"]
    assert found.level == WARN and found.found.endswith("`my-agent --version` failed (exit 2): unknown option")


@pytest.mark.claude
def test_the_real_claude_code_says_its_version(bin_dir, project, monkeypatch):
    if not CLAUDE.exists():
        pytest.skip("real Claude Code is not installed (./run-tests.sh installs it)")
    monkeypatch.setenv("GENESIS_AGENT_CMD", f"{CLAUDE} -p")
    cfg = config(project)
    adapter = adapter_of(cfg)
    assert adapter.name == "claude"
    found = by_name(agent_checks(cfg, adapter, project, os.environ, euid=1000))["agent CLI"]
    assert found.level == OK
    assert found.found == f"{CLAUDE}: {adapter.version} (Claude Code) (Genesis is tested with {adapter.version})"


def test_every_cli_genesis_knows_says_how_it_is_installed():
    assert {name: bool(adapter_named(name).install) for name in known()} == {name: True for name in known()}


def test_another_cli_is_checked_with_agent(bin_dir, project):
    cfg, error = doctor_config(project, {}, "codex")
    assert error == "" and adapter_of(cfg).name == "codex" and cfg.agent_cmd == ("codex",)
    found = by_name(agent_checks(cfg, adapter_of(cfg), project, os.environ, euid=1000))
    assert found["agent CLI"].fix == "npm install -g @openai/codex"
    assert found["codex login"].level == WARN and found["codex login"].fix == "codex login"


# --- logins (no network: the environment and the CLI's own files) ---------------------------

def claude_login(project, env):
    return by_name(agent_checks(config(project), adapter_named("claude"), project, env, euid=1000))["claude login"]


def test_claude_code_without_a_key_or_credentials_is_not_logged_in(bin_dir, project, hermetic):
    found = claude_login(project, os.environ)
    assert found.level == FAIL and found.fix == "claude auth login"
    assert found.found == ("not logged in: none of ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN, CLAUDE_CODE_OAUTH_TOKEN "
                           f"set, and no {hermetic / '.claude' / '.credentials.json'}")


def test_claude_code_logged_in_by_a_key_its_credentials_a_helper_or_a_cloud(bin_dir, project, hermetic, tmp_path):
    assert claude_login(project, {**os.environ, "ANTHROPIC_API_KEY": "sk-x"}).found == "ANTHROPIC_API_KEY set"
    assert claude_login(project, {**os.environ, "CLAUDE_CODE_USE_BEDROCK": "1"}).level == OK
    assert claude_login(project, {**os.environ, "CLAUDE_CODE_USE_BEDROCK": "0"}).level == FAIL
    (project / ".claude").mkdir()
    (project / ".claude" / "settings.local.json").write_text(json.dumps({"apiKeyHelper": "pass show key"}))
    assert claude_login(project, os.environ).found == f"an apiKeyHelper in {project / '.claude/settings.local.json'}"
    (project / ".claude" / "settings.local.json").unlink()
    elsewhere = tmp_path / "claude-config"
    elsewhere.mkdir()
    (elsewhere / ".credentials.json").write_text('{"claudeAiOauth": {}}')
    assert claude_login(project, {**os.environ, "CLAUDE_CONFIG_DIR": str(elsewhere)}).level == OK
    assert claude_login(project, os.environ).level == FAIL  # ~/.claude has none
    (hermetic / ".claude").mkdir()
    (hermetic / ".claude" / ".credentials.json").write_text("")  # empty: no login in it
    assert claude_login(project, os.environ).level == FAIL


def test_a_cli_whose_login_file_is_there_is_logged_in(bin_dir, project, hermetic):
    (hermetic / ".codex").mkdir()
    (hermetic / ".codex" / "auth.json").write_text('{"tokens": {}}')
    found = by_name(agent_checks(config(project), adapter_named("codex"), project, os.environ, euid=1000))
    assert found["codex login"].level == OK
    assert found["codex login"].found == f"logged in ({hermetic / '.codex' / 'auth.json'})"


# --- root with Claude Code -----------------------------------------------------------------

def test_root_without_is_sandbox_fails_with_claude_code(fake_cli, project):
    fake_cli("claude", "echo 2.1.329")
    cfg = config(project)
    env = {k: v for k, v in os.environ.items() if k != "IS_SANDBOX"}
    found = by_name(agent_checks(cfg, adapter_of(cfg), project, env, euid=0))["root"]
    assert found.level == FAIL and found.fix == "export IS_SANDBOX=1"
    assert found.found.startswith("running as root, and Claude Code refuses --dangerously-skip-permissions")
    assert "root" not in by_name(agent_checks(cfg, adapter_of(cfg), project, {**env, "IS_SANDBOX": "1"}, euid=0))


# --- the box -------------------------------------------------------------------------------

def test_the_box_auto_picks_here_is_the_loops_own_choice(bin_dir, project):
    found = box_check(config(project), project, os.environ)
    places = Places(str(project), str(project), None, None, (), (), "")
    kind = choose("auto", probe(), places).kind
    assert found.name == "box" and found.level == (WARN if kind == "none" else OK)
    assert (found.found.startswith(f"auto picks {kind}") if kind != "none" else found.found.startswith("none ("))


def test_the_box_turned_off_is_a_warning_that_says_what_is_open(bin_dir, project):
    found = box_check(config(project, GENESIS_SANDBOX="off"), project, os.environ)
    assert found.level == WARN and found.fix == "export GENESIS_SANDBOX=auto"
    assert found.found.startswith("off (GENESIS_SANDBOX=off): the agent can edit Genesis's state and code")


# --- the hook ------------------------------------------------------------------------------

def test_the_hook_missing_then_installed(bin_dir, project):
    claude = adapter_named("claude")
    missing = hook_check(claude, project, os.environ)
    assert missing.level == FAIL and missing.found.startswith("not installed: no PostToolUse hook")
    assert missing.fix == hint(project, "hook", "install", "--scope", "local")
    done = CliRunner().invoke(cli, ["--project", str(project), "hook", "install", "--scope", "local"],
                              catch_exceptions=False)
    assert done.exit_code == 0
    working = hook_check(claude, project, os.environ)
    assert working.level == OK and working.found.startswith(
        f"working: the hook in {project.resolve() / '.claude' / 'settings.local.json'} ran in ")


def test_another_clis_hook_is_installed_with_agent(bin_dir, project):
    found = hook_check(adapter_named("codex"), project, os.environ)
    assert found.level == FAIL and found.fix == hint(project, "hook", "install", "--agent", "codex")


def test_a_cli_without_hooks_needs_none(bin_dir, project):
    found = hook_check(adapter_named("aider"), project, os.environ)
    assert found.level == OK and found.found.startswith("aider has no per-tool-call hook")


def test_a_generic_agent_is_not_told_to_install_claude_codes_hook_but_its_installed_one_is_checked(bin_dir, project):
    generic = adapter_named("generic")
    found = hook_check(generic, project, os.environ)
    assert found.level == OK and found.found.startswith("generic has no per-tool-call hook") and not found.fix
    assert "Claude" not in found.found and "hook install" not in found.found
    done = CliRunner().invoke(cli, ["--project", str(project), "hook", "install", "--scope", "local"],
                              catch_exceptions=False)
    assert done.exit_code == 0  # a generic command that wraps Claude Code: the hook it borrows is checked
    working = hook_check(generic, project, os.environ)
    assert working.level == OK and working.found.startswith("working: the hook in ")


# --- alerts --------------------------------------------------------------------------------

def test_alert_channels_are_listed_only_when_set_and_none_is_sent(bin_dir, project):
    assert alerts_check(config(project), project, os.environ) is None
    found = alerts_check(config(project, GENESIS_NOTIFY_NTFY="http://127.0.0.1:9/never"), project, os.environ)
    assert found.level == OK and found.found.startswith("ntfy (all)")
    assert found.found.endswith(f"test them: {hint(project, 'alert', 'test')}")


def test_broken_settings_fail_and_the_defaults_check_the_rest(bin_dir, project):
    (project / "orchestrator").mkdir()
    commit_file(project, "orchestrator/genesis.conf", "GENESIS_SANDBOX=maybe\n")
    cfg, error = doctor_config(project, {}, None)
    assert "GENESIS_SANDBOX" in error and cfg.sandbox == "auto"

"""`genesis doctor` as people type it: the lines, the verdict, the exit code, --json and --agent."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from genesis import exitcodes
from genesis.cli import cli
from genesis.hints import hint


def doctor(project, *args):
    return CliRunner().invoke(cli, ["--project", str(project), "doctor", *args], catch_exceptions=False)


@pytest.fixture
def night(fake_cli, project, monkeypatch):
    """A project a night could start on: Claude Code (a fake one) on PATH and logged in by a key."""
    fake_cli("claude", 'echo "2.1.329 (Claude Code)"')
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    monkeypatch.setenv("IS_SANDBOX", "1")  # the loop's root rule, where the tests run as root
    return project


def test_without_the_hook_one_thing_to_fix_and_its_command(night):
    done = doctor(night)
    assert done.exit_code == exitcodes.ERROR
    lines = done.output.splitlines()
    assert lines[-1] == "1 thing to fix before a night"
    hook = next(i for i, line in enumerate(lines) if line.startswith("!! hook"))
    assert lines[hook + 1].strip() == f"fix: {hint(night, 'hook', 'install', '--scope', 'local')}"
    assert [line[:2] for line in lines if line.startswith("!!")] == ["!!"]


def test_with_the_hook_installed_ready_for_a_night(night):
    installed = CliRunner().invoke(cli, ["--project", str(night), "hook", "install", "--scope", "local"],
                                   catch_exceptions=False)
    assert installed.exit_code == 0
    done = doctor(night)
    assert done.exit_code == exitcodes.OK, done.output
    lines = done.output.splitlines()
    assert lines[-1] == "ready for a night"
    assert lines[0].startswith("ok git ") and any(line.startswith("ok hook ") for line in lines)
    assert "!!" not in done.output and "\033[" not in done.output


def test_json_key_by_key(night):
    done = doctor(night, "--json")
    assert done.exit_code == exitcodes.ERROR
    report = json.loads(done.output)
    assert set(report) == {"ready", "failures", "warnings", "checks"}
    assert report["ready"] is False and report["failures"] == 1
    checks = {c["name"]: c for c in report["checks"]}
    assert list(checks)[:7] == ["git", "git identity", "project", "repository state", "uncommitted changes",
                                "agent CLI", "claude login"]
    assert all(set(c) == {"name", "level", "found", "fix"} for c in report["checks"])
    assert checks["git identity"] == {"name": "git identity", "level": "ok", "fix": "",
                                      "found": "commits are made as Night Owl <owl@example.invalid>"}
    assert checks["project"] == {"name": "project", "level": "ok", "fix": "",
                                 "found": f"{night.resolve()} is a git work tree"}
    assert checks["agent CLI"]["level"] == "ok" and checks["agent CLI"]["found"].endswith(": 2.1.329 (Claude Code) "
                                                                                          "(Genesis is tested with "
                                                                                          "2.1.329)")
    assert checks["claude login"] == {"name": "claude login", "level": "ok", "found": "ANTHROPIC_API_KEY set",
                                      "fix": ""}
    assert checks["hook"]["level"] == "fail"
    assert checks["hook"]["fix"] == hint(night, "hook", "install", "--scope", "local")
    assert checks["box"]["level"] in ("ok", "warn") and report["warnings"] == (checks["box"]["level"] == "warn")


def test_a_misspelt_setting_is_a_warning_and_a_broken_one_a_failure(night, monkeypatch):
    monkeypatch.setenv("GENESIS_SANBOX", "off")
    report = json.loads(doctor(night, "--json").output)
    assert {"name": "settings", "level": "warn", "fix": "",
            "found": "GENESIS_SANBOX is set in the environment but is not a setting, so it is ignored; did you mean "
                     "GENESIS_SANDBOX?"} in report["checks"]
    monkeypatch.setenv("GENESIS_SANDBOX", "maybe")
    report = json.loads(doctor(night, "--json").output)
    broken = next(c for c in report["checks"] if c["name"] == "settings" and c["level"] == "fail")
    assert broken["found"].startswith("GENESIS_SANDBOX='maybe' (env): expected auto, bwrap")
    assert broken["fix"] == hint(night, "config", "show")
    assert next(c for c in report["checks"] if c["name"] == "hook")["level"] == "fail"  # the rest still checked


def test_agent_checks_another_cli(night):
    done = doctor(night, "--agent", "codex", "--json")
    checks = {c["name"]: c for c in json.loads(done.output)["checks"]}
    assert checks["agent CLI"] == {"name": "agent CLI", "level": "fail", "fix": "npm install -g @openai/codex",
                                   "found": "the agent command 'codex' is not found on PATH"}
    assert checks["codex login"]["level"] == "warn"
    assert checks["hook"]["fix"] == hint(night, "hook", "install", "--agent", "codex")
    assert done.exit_code == exitcodes.ERROR


def test_outside_a_project_the_machine_alone(night, tmp_path, monkeypatch):
    plain = tmp_path / "plain"
    plain.mkdir()
    monkeypatch.chdir(plain)
    done = CliRunner().invoke(cli, ["doctor"], catch_exceptions=False)
    lines = done.output.splitlines()
    project = next(line for line in lines if line.startswith("-- project"))
    assert "not checked" in project and "name one with --project" in project
    assert not any(line.startswith(("ok repository", "ok uncommitted")) for line in lines)


def test_the_help_names_the_exit_codes():
    done = CliRunner().invoke(cli, ["doctor", "--help"], catch_exceptions=False)
    assert "Exit 0 when ready (warnings allowed), 1 when something fails." in done.output

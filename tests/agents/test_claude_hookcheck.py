"""The hook self-test: real settings files, the real hook script run through /bin/sh, real heartbeats."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers.procs import alive
from helpers.state import state_of
from helpers.waits import wait_for

from genesis.agents.claude.hookcheck import BROKEN, MALFORMED, NOT_INSTALLED, WORKING, self_test
from genesis.agents.claude.settings import hook_command, install
from genesis.cli import cli
from genesis.health.heartbeat import hook_script, read_heartbeat
from genesis.hints import hint

NOW = 1_800_000_000.0


@pytest.fixture
def box(tmp_path, hermetic, project):
    """A project, a HOME, an empty managed-settings dir, a private heartbeat dir and a loop-like env."""
    beats = tmp_path / "beats"
    beats.mkdir(mode=0o700)
    env = {"PATH": os.environ["PATH"], "HOME": str(hermetic), "GENESIS_AGENT": "Builder",
           "GENESIS_RUN_ID": "20261120T234500Z-812", "GENESIS_PROJECT_DIR": str(project)}
    return Box(tmp_path, hermetic, project, tmp_path / "managed", beats / "Builder.json", env)


class Box:
    def __init__(self, tmp: Path, home: Path, project: Path, managed: Path, heartbeat: Path, env: dict):
        self.tmp, self.home, self.project, self.managed, self.heartbeat, self.env = (
            tmp, home, project, managed, heartbeat, env)

    def settings(self, scope: str) -> Path:
        return {"user": self.home / ".claude" / "settings.json",
                "project": self.project / ".claude" / "settings.json",
                "local": self.project / ".claude" / "settings.local.json"}[scope]

    def install(self, scope: str = "user", command: str | None = None) -> Path:
        path = self.settings(scope)
        install(path, command or hook_command(hook_script()), self.tmp / "state", NOW)
        return path

    def write(self, scope: str, data) -> Path:
        path = self.settings(scope)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(data if isinstance(data, str) else json.dumps(data))
        return path

    def merge(self, scope: str, **keys) -> Path:
        path = self.settings(scope)
        data = json.loads(path.read_text()) if path.exists() else {}
        return self.write(scope, {**data, **keys})

    def script(self, body: str, name: str = "genesis-heartbeat.sh") -> Path:
        """A stand-in hook script (same name as ours) in a directory of its own."""
        where = self.tmp / f"hook-{len(list(self.tmp.glob('hook-*')))}"
        where.mkdir()
        path = where / name
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(0o755)
        return path

    def check(self, **kw):
        return self_test(self.project, self.env, self.heartbeat, home=self.home, managed=self.managed, **kw)


def test_nothing_installed_is_not_installed_and_says_how_to_install(box):
    check = box.check()
    assert check.state == NOT_INSTALLED and not check.ok
    assert f"run: {hint(box.project, 'hook', 'install', '--scope', 'local')} (for this project alone" in check.detail
    assert str(box.settings("user")) in check.detail
    assert (check.scope, check.path, check.command) == (None, None, None)


def test_the_installed_hook_works_and_its_test_heartbeat_is_taken_away(box):
    path = box.install("user")
    check = box.check()
    assert check.state == WORKING and check.ok, check.detail
    assert (check.scope, check.path, check.command) == ("user", path, hook_command(hook_script()))
    assert not box.heartbeat.exists() and not box.heartbeat.is_symlink()  # never an agent's sign of life
    assert os.listdir(box.heartbeat.parent) == []


def test_an_agents_earlier_heartbeat_is_put_back_as_it_was(box):
    box.install("user")
    earlier = b'{"agent":"Builder","epoch":1795218322.5,"session_id":"agent-session"}\n'
    box.heartbeat.write_bytes(earlier)
    assert box.check().ok
    assert box.heartbeat.read_bytes() == earlier
    assert os.listdir(box.heartbeat.parent) == [box.heartbeat.name]


def test_the_hook_runs_as_claude_code_runs_it(box):
    """Through /bin/sh, in the project, in a session of its own, with the loop's env plus Claude Code's, and a
    PostToolUse event on stdin."""
    seen = box.tmp / "seen"
    real = hook_script()
    wrapper = box.script(f'cat > {seen}.stdin\npwd > {seen}.cwd\nps -o sid=,pgid= -p $$ > {seen}.sid\n'
                         f'env > {seen}.env\nexec bash {real} < {seen}.stdin\n')
    box.install("user", str(wrapper))
    check = box.check()
    assert check.ok, check.detail
    event = json.loads((box.tmp / "seen.stdin").read_text())
    assert event["hook_event_name"] == "PostToolUse" and event["tool_name"] == "Bash"
    assert event["cwd"] == str(box.project) and "tool_response" in event
    assert set(event["session_id"]) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:@+-")
    assert (box.tmp / "seen.cwd").read_text().strip() == str(box.project)
    sid, pgid = (box.tmp / "seen.sid").read_text().split()
    assert sid == pgid and int(sid) != os.getsid(0)  # a session of its own, led by its shell
    env = dict(line.split("=", 1) for line in (box.tmp / "seen.env").read_text().splitlines() if "=" in line)
    assert env["GENESIS_HEARTBEAT_FILE"] == str(box.heartbeat) and env["GENESIS_AGENT"] == "Builder"
    assert env["GENESIS_RUN_ID"] == box.env["GENESIS_RUN_ID"] and env["CLAUDECODE"] == "1"
    assert env["CLAUDE_PROJECT_DIR"] == str(box.project) and env["CLAUDE_PID"].isdigit()


def test_a_hook_whose_script_was_moved_away_is_broken_and_says_so(box):
    moved = box.tmp / "old-checkout" / "genesis-heartbeat.sh"
    moved.parent.mkdir()
    shutil.copy(hook_script(), moved)
    box.install("project", hook_command(moved))
    moved.unlink()
    check = box.check()
    assert check.state == BROKEN and check.scope == "project"
    assert f"its script {moved} is missing" in check.detail
    assert hint(box.project, "hook", "install", "--scope", "project") in check.detail


def test_a_script_run_directly_that_is_not_executable_is_broken(box):
    script = box.script("exit 0\n")
    script.chmod(0o644)
    box.install("user", str(script))
    check = box.check()
    assert check.state == BROKEN and "not executable" in check.detail and f"chmod +x {script}" in check.detail


def test_a_hook_that_fails_reports_its_status_and_stderr(box):
    box.install("user", str(box.script("echo 'cannot frobnicate the heartbeat' >&2\nexit 3\n")))
    check = box.check()
    assert check.state == BROKEN
    assert "exited 3" in check.detail and "cannot frobnicate the heartbeat" in check.detail


def test_a_hook_that_hangs_is_killed_with_its_group_at_the_timeout(box):
    pids = box.tmp / "pids"
    box.install("user", str(box.script(f"echo $$ >> {pids}\nsleep 60 &\necho $! >> {pids}\nwait\n")))
    check = box.check(timeout=0.5)
    assert check.state == BROKEN and "did not finish within 0.5 s" in check.detail
    started = [int(pid) for pid in pids.read_text().split()]
    assert len(started) == 2
    wait_for(lambda: not any(alive(pid) for pid in started), what="the hook's group to die")


def test_a_hook_that_writes_nothing_is_broken(box):
    box.install("user", str(box.script("exit 0\n")))
    check = box.check()
    assert check.state == BROKEN and f"wrote no heartbeat to {box.heartbeat}" in check.detail


def test_a_symlink_at_the_heartbeat_path_is_never_followed(box):
    box.install("user")
    precious = box.tmp / "precious.txt"
    precious.write_text("keep me\n")
    box.heartbeat.symlink_to(precious)
    check = box.check()
    assert check.state == BROKEN and "is a symlink" in check.detail
    assert precious.read_text() == "keep me\n" and box.heartbeat.is_symlink()


@pytest.mark.skipif(os.geteuid() != 0, reason="a directory of another owner needs root")
def test_a_heartbeat_directory_that_is_not_yours_is_reported(box):
    box.install("user")
    os.chown(box.heartbeat.parent, 4321, 4321)
    check = box.check()
    assert check.state == BROKEN and "belongs to uid 4321, not to you" in check.detail


@pytest.mark.parametrize("where", ["user", "project", "local"])
def test_disable_all_hooks_in_any_scope_turns_the_hook_off(box, where):
    box.install("user")
    disabling = box.merge(where, disableAllHooks=True)
    check = box.check()
    assert check.state == BROKEN and f'"disableAllHooks": true in {disabling}' in check.detail


def test_a_later_scope_turning_disable_all_hooks_off_again_wins(box):
    box.install("user")
    box.merge("user", disableAllHooks=True)
    box.merge("local", disableAllHooks=False)
    assert box.check().ok


def test_disable_all_hooks_that_is_not_a_boolean_makes_claude_code_skip_the_whole_file(box):
    path = box.install("user")
    box.merge("user", disableAllHooks="yes")
    check = box.check()
    assert check.state == MALFORMED and str(path) in check.detail and "not true or false" in check.detail


def test_a_malformed_settings_file_is_named(box):
    path = box.write("project", '{"hooks": ')
    check = box.check()
    assert check.state == MALFORMED and check.path == path
    assert f"{path} is not valid JSON" in check.detail


def test_a_malformed_file_elsewhere_does_not_stop_a_working_hook_but_is_mentioned(box):
    box.install("user")
    path = box.write("local", "{nope")
    check = box.check()
    assert check.state == WORKING and f"{path} is not valid JSON" in check.detail


def test_one_working_copy_is_enough_and_broken_extra_copies_are_mentioned(box):
    moved = box.tmp / "gone" / "genesis-heartbeat.sh"
    box.install("user", hook_command(moved))
    working = box.install("local")
    check = box.check()
    assert check.state == WORKING and check.scope == "local" and check.path == working
    assert f"{moved} is missing" in check.detail and str(box.settings("user")) in check.detail
    assert [(c.scope, c.ok) for c in check.copies] == [("user", False), ("local", True)]


def test_an_identical_command_in_several_scopes_runs_once(box):
    runs = box.tmp / "runs"
    wrapper = box.script(f"echo run >> {runs}\nexec bash {hook_script()}\n")
    for scope in ("user", "project", "local"):
        box.install(scope, str(wrapper))
    check = box.check()
    assert check.ok and len(check.copies) == 3
    assert runs.read_text().split() == ["run"]


@pytest.mark.parametrize("policy, words", [
    ({"disableAllHooks": True}, "disableAllHooks in the managed settings"),
    ({"allowManagedHooksOnly": True}, "only managed hooks run (allowManagedHooksOnly"),
    ({"strictPluginOnlyCustomization": ["hooks"]}, "only managed hooks run (strictPluginOnlyCustomization"),
])
def test_managed_settings_that_turn_hooks_off_are_reported(box, policy, words):
    box.install("user")
    box.managed.mkdir()
    (box.managed / "managed-settings.json").write_text(json.dumps(policy))
    check = box.check()
    assert check.state == BROKEN and words in check.detail
    assert str(box.managed / "managed-settings.json") in check.detail


def test_a_managed_drop_in_file_counts_and_managed_false_overrides_a_users_true(box):
    box.install("user")
    drop_ins = box.managed / "managed-settings.d"
    drop_ins.mkdir(parents=True)
    (drop_ins / "50-hooks.json").write_text('{"disableAllHooks": true}')
    assert "disableAllHooks in the managed settings" in box.check().detail
    (drop_ins / "50-hooks.json").write_text('{"disableAllHooks": false}')
    box.merge("user", disableAllHooks=True)
    assert box.check().ok


@pytest.mark.parametrize("name, value, works", [
    ("CLAUDE_CODE_SIMPLE", "1", False), ("CLAUDE_CODE_SIMPLE", "false", True),
    ("CLAUDE_CODE_SAFE_MODE", "yes", False), ("CLAUDE_CODE_SAFE_MODE", "0", True),
])
def test_environment_switches_that_turn_hooks_off(box, name, value, works):
    box.install("user")
    box.env[name] = value
    check = box.check()
    assert check.ok is works
    if not works:
        assert f"{name}={value}" in check.detail


def test_claude_config_dir_replaces_the_users_claude_directory(box):
    box.install("user")
    box.env["CLAUDE_CONFIG_DIR"] = str(box.tmp / "config")
    assert box.check().state == NOT_INSTALLED
    install(box.tmp / "config" / "settings.json", hook_command(hook_script()), box.tmp / "state", NOW)
    check = box.check()
    assert check.ok and check.path == box.tmp / "config" / "settings.json"


def test_a_symlinked_settings_file_is_read_through_its_link(box):
    real = box.tmp / "dotfiles.json"
    install(real, hook_command(hook_script()), box.tmp / "state", NOW)
    box.settings("user").parent.mkdir()
    box.settings("user").symlink_to(real)
    assert box.check().ok


# --- genesis hook status ----------------------------------------------------------------------

def status(project: Path):
    return CliRunner().invoke(cli, ["--project", str(project), "hook", "status"], catch_exceptions=False)


def test_status_of_a_working_hook_exits_0(box):
    path = box.install("user")
    done = status(box.project)
    assert done.exit_code == 0, done.output
    assert f"user: installed in {path} for PostToolUse, PostToolUseFailure, PreToolUse, SessionStart: working" \
        in done.output
    assert "working: the hook in" in done.output


def test_status_of_a_hook_whose_script_was_moved_away_exits_1(box):
    moved = box.tmp / "old-checkout" / "genesis-heartbeat.sh"
    moved.parent.mkdir()
    shutil.copy(hook_script(), moved)
    path = box.install("local", hook_command(moved))
    moved.unlink()
    done = status(box.project)
    assert done.exit_code == 1
    assert f"local: installed in {path}" in done.output and "(points to another copy)" in done.output
    assert f"broken: its script {moved} is missing" in done.output


def test_status_with_a_malformed_settings_file_exits_2(box):
    path = box.write("user", '{"model": "opus",')
    done = status(box.project)
    assert done.exit_code == 2 and f"{path} is not valid JSON" in done.output


def test_status_not_installed_exits_1(box):
    done = status(box.project)
    assert done.exit_code == 1 and "not installed" in done.output
    assert f"--project {box.project.resolve()} hook install --scope local" in done.output


def test_status_leaves_no_test_heartbeat_or_temp_dir_behind(box, tmp_path, monkeypatch):
    scratch = tmp_path / "tmpdir"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", None)  # let it read TMPDIR again
    box.install("user")
    assert status(box.project).exit_code == 0
    assert list(scratch.iterdir()) == []
    default = box.home / ".local" / "state" / "genesis" / "heartbeat.json"
    assert read_heartbeat(default)[0] is None


def test_status_still_says_when_the_hook_last_fired(box):
    box.install("user")
    beat = state_of(box.project) / "heartbeats" / "Builder.json"
    beat.parent.mkdir(parents=True)
    beat.write_text(json.dumps({"agent": "Builder", "timestamp": "2026-11-20T23:45:22Z", "epoch": 1795218322.5,
                                "tool": "Bash"}))
    done = status(box.project)
    assert f"(2026-11-20T23:45:22Z, tool Bash) -> {beat}" in done.output

"""Which adapter runs: GENESIS_AGENT_CLI names it, or the agent command's program does."""

import json
import os
from pathlib import Path

import pytest

from genesis.agents import ADAPTERS, adapter_for, adapter_named, adapter_of
from genesis.agents.base import Adapter
from genesis.agents.claude.settings import CLAUDE_HOOKS
from genesis.agents.generic import GenericCli
from genesis.agents.hook.selftest import BROKEN, MALFORMED, NOT_INSTALLED, WORKING, spec_self_test
from genesis.agents.hook.spec import GroupedHooks
from genesis.config import ConfigError, resolve
from genesis.health.heartbeat import hook_script, read_heartbeat
from genesis.health.toollog import in_flight, pairs, read_tail
from genesis.hints import hint


@pytest.mark.parametrize("name", sorted(ADAPTERS))
def test_every_cli_is_named_and_recognised_by_its_program_even_by_path(name):
    adapter = adapter_named(name)
    assert adapter.name == name and adapter.program and adapter.version
    assert adapter_for((f"/opt/bin/{adapter.program}", "--flag")).name == name
    assert (adapter.hooks is None) == (not adapter.hook_required)


def test_any_other_program_is_the_generic_text_cli():
    assert type(adapter_for(("my-agent", "-x"))) is GenericCli
    assert adapter_named("generic").name == "generic"


def test_the_generic_cli_borrows_claude_codes_hook_and_the_interface_knows_no_cli():
    assert adapter_named("generic").hooks is CLAUDE_HOOKS
    assert not adapter_named("generic").hook_required  # it cannot know that the command fires the hook
    assert Adapter().hooks is None and Adapter().hook_check(Path("."), {}, Path("hb.json")) is None


def test_the_knob_picks_the_cli_and_alone_runs_its_program(project):
    cfg = resolve(project, env={"GENESIS_AGENT_CLI": "Gemini"})
    assert cfg.agent_cli == "gemini" and cfg.agent_cmd == ("gemini",)
    assert adapter_of(cfg).name == "gemini"
    # A wrapper script the adapter cannot recognise by name: the knob says which CLI it runs.
    cfg = resolve(project, env={"GENESIS_AGENT_CLI": "codex", "GENESIS_AGENT_CMD": "/opt/wrap-codex --profile night"})
    assert cfg.agent_cmd == ("/opt/wrap-codex", "--profile", "night") and adapter_of(cfg).name == "codex"
    # Another command (the fallback) is recognised by its own program.
    assert adapter_of(cfg, ("claude", "-p")).name == "claude"
    assert resolve(project, env={}).agent_cli == "" and adapter_of(resolve(project, env={})).name == "claude"


def test_an_unknown_cli_is_refused_naming_the_known_ones(project):
    with pytest.raises(ConfigError) as err:
        resolve(project, env={"GENESIS_AGENT_CLI": "cursor"})
    assert "GENESIS_AGENT_CLI" in str(err.value) and "codex" in str(err.value) and "aider" in str(err.value)


# --- a hook file of the common (grouped) layout, for a CLI of its own ------------------------

def spec_in(home: Path) -> GroupedHooks:
    return GroupedHooks("mycli", lambda env: Path(env.get("HOME", "")) / ".mycli", "settings.json",
                        ("BeforeTool", "AfterTool"), "AfterTool", matcher=".*",
                        matched=frozenset({"BeforeTool", "AfterTool"}))


def test_the_self_test_runs_the_installed_hook_and_names_what_is_wrong(tmp_path, project, hermetic):
    spec = spec_in(hermetic)
    heartbeat = tmp_path / "beats" / "Builder.json"
    heartbeat.parent.mkdir(mode=0o700)
    env = {**os.environ, "GENESIS_AGENT": "Builder", "GENESIS_RUN_ID": "run-registry"}
    check = spec_self_test(spec, project, env, heartbeat)
    assert check.state == NOT_INSTALLED and hint(project, "hook", "install", "--agent", "mycli") in check.detail

    path = spec.path(env)
    path.parent.mkdir()
    path.write_text('{"theme": "dark", "hooks": {"AfterTool": [{"matcher": "x", "hooks": '
                    '[{"type": "command", "command": "mine.sh"}]}]}}\n')
    os.chmod(path, 0o640)
    change = spec.install(path, spec.command_for(hook_script()), tmp_path / "state")
    assert change.added_events == ("BeforeTool", "AfterTool") and change.backup is not None
    data = json.loads(path.read_text())
    assert data["theme"] == "dark" and data["hooks"]["AfterTool"][0]["hooks"][0]["command"] == "mine.sh"
    assert data["hooks"]["BeforeTool"] == [{"matcher": ".*", "hooks": [
        {"type": "command", "command": spec.command_for(hook_script()), "timeout": 10}]}]
    assert oct(path.stat().st_mode & 0o777) == "0o640"
    assert spec.install(path, spec.command_for(hook_script()), tmp_path / "state").added_events == ()

    check = spec_self_test(spec, project, env, heartbeat)
    assert check.state == WORKING, check.detail
    assert not heartbeat.exists()  # the self-test's beat is taken away again

    broken = tmp_path / "genesis-heartbeat.sh"
    broken.write_text("exit 7\n")
    spec.install(path, spec.command_for(broken), tmp_path / "state")
    check = spec_self_test(spec, project, env, heartbeat)
    assert check.state == BROKEN and "exited 7" in check.detail

    path.write_text("{not json")
    assert spec_self_test(spec, project, env, heartbeat).state == MALFORMED

    path.write_text(json.dumps(data))
    assert set(spec.uninstall(path, tmp_path / "state").added_events) == {"BeforeTool", "AfterTool"}
    assert json.loads(path.read_text())["hooks"] == {"AfterTool": data["hooks"]["AfterTool"][:1]}


def test_every_clis_tool_events_read_as_claude_codes(tmp_path):
    log = tmp_path / "Builder.tools.jsonl"
    log.write_text("".join(json.dumps(line) + "\n" for line in [
        {"t": 1.0, "e": "BeforeTool", "tool": "run_shell_command", "cmd": "ls"},
        {"t": 2.0, "e": "AfterTool", "tool": "run_shell_command", "ok": True},
        {"t": 3.0, "e": "preToolUse", "tool": "bash"},
        {"t": 4.0, "e": "postToolUse", "tool": "bash", "ok": True},
        {"t": 5.0, "e": "tool.execute.before", "tool": "bash", "id": "c1"},
    ]))
    calls = read_tail(log)
    assert [c.event for c in calls] == ["PreToolUse", "PostToolUse", "PreToolUse", "PostToolUse", "PreToolUse"]
    assert [(c.tool, c.ok) for c in pairs(calls)] == [("run_shell_command", True), ("bash", True)]
    assert in_flight(calls).id == "c1"
    assert read_heartbeat(tmp_path / "none.json")[0] is None

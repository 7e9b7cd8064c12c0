"""Which model an agent command asks for (genesis/agents/models.py): each CLI's own flag, its
variable when the command names none, and nothing guessed."""

from __future__ import annotations

import pytest

from genesis.agents.models import cli_and_model, model_of
from genesis.config import resolve


@pytest.mark.parametrize("cli, argv, model", [
    ("claude", ["claude", "-p", "--model", "opus"], "opus"),
    ("claude", ["claude", "-p", "--model=claude-sonnet-4-5"], "claude-sonnet-4-5"),
    ("codex", ["codex", "exec", "-m", "o3"], "o3"),
    ("codex", ["codex", "exec", "-c", 'model="gpt-5"'], "gpt-5"),
    ("gemini", ["gemini", "-m", "gemini-2.5-pro"], "gemini-2.5-pro"),
    ("opencode", ["opencode", "run", "-m", "anthropic/claude-sonnet-4"], "anthropic/claude-sonnet-4"),
    ("qwen", ["qwen", "--model", "qwen3-coder"], "qwen3-coder"),
    ("copilot", ["copilot", "--model", "gpt-5"], "gpt-5"),
    ("aider", ["aider", "--model", "sonnet", "-m", "fix it"], "sonnet"),   # aider's -m is its message
    ("aider", ["aider", "-m", "fix it"], None),
    ("generic", ["my-agent", "-m", "x"], None),                            # an unknown CLI's -m is not guessed
    ("generic", ["my-agent", "--model", "local-7b"], "local-7b"),
    ("claude", ["claude", "-p"], None),                                    # the CLI's default: not guessed
    ("claude", ["claude", "-p", "--model"], None),                         # a flag with no value
])
def test_each_cli_names_its_model_by_its_own_flag(cli, argv, model):
    assert model_of(cli, argv) == model


def test_a_cli_takes_its_model_from_its_variable_when_the_command_names_none():
    env = {"ANTHROPIC_MODEL": "claude-opus-4-1", "GEMINI_MODEL": "gemini-flash"}
    assert model_of("claude", ["claude", "-p"], env) == "claude-opus-4-1"
    assert model_of("claude", ["claude", "-p", "--model", "haiku"], env) == "haiku"  # the command wins
    assert model_of("codex", ["codex", "exec"], env) is None                         # not codex's variable
    assert model_of("claude", ["claude", "--model", "x" * 500]) == "x" * 100           # cut: the user's text


def test_a_fleets_launch_is_recorded_with_the_cli_and_model_of_its_strategy(project):
    cfg = resolve(project, env={"GENESIS_AGENT_CMD": "claude -p --model opus"})
    assert cli_and_model(cfg) == ("claude", "opus")
    assert cli_and_model(cfg, ("codex", "exec", "-m", "o3")) == ("codex", "o3")
    assert cli_and_model(cfg, ("bash", "agent.sh")) == ("generic", None)

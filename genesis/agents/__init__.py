"""Everything that depends on which agent CLI runs, behind one small interface.

The loop asks the adapter for the command line of a phase, for a reader that turns the
agent's output into a readable transcript and into what the loop must know at the end
(a usage limit, an API error, the result and its cost), for the environment the CLI needs
to run unattended, and for its heartbeat hook. One module per CLI; any other command runs
as a generic text CLI.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING

from genesis.agents.base import Adapter, ApiError, ApiRetry, Ending, Limit, OutputReader, Result, TextReader
from genesis.agents.generic import GenericCli

if TYPE_CHECKING:
    from genesis.config import Config

__all__ = ["adapter_for", "adapter_of", "adapter_named", "known", "ADAPTERS", "Adapter", "ApiError", "ApiRetry",
           "Ending", "Limit", "OutputReader", "Result", "TextReader", "UnknownCli"]

# GENESIS_AGENT_CLI's values, each with its adapter (imported only when chosen).
ADAPTERS: dict[str, str] = {
    "claude": "claude:ClaudeCode",
    "codex": "codex:Codex",
    "gemini": "gemini:GeminiCli",
    "qwen": "qwen:QwenCode",
    "opencode": "opencode:OpenCode",
    "copilot": "copilot:CopilotCli",
    "aider": "aider:Aider",
}


class UnknownCli(ValueError):
    """GENESIS_AGENT_CLI names no CLI Genesis knows."""


def known() -> tuple[str, ...]:
    return tuple(ADAPTERS)


def adapter_named(name: str) -> Adapter:
    """The adapter GENESIS_AGENT_CLI (or `--agent`) names; "generic" is the text CLI."""
    if name == GenericCli.name:
        return GenericCli()
    if name not in ADAPTERS:
        raise UnknownCli(f"unknown agent CLI {name!r}; Genesis knows {', '.join(known())} (or generic)")
    module, cls = ADAPTERS[name].split(":")
    return getattr(importlib.import_module(f"{__name__}.{module}"), cls)()


def adapter_for(argv: tuple[str, ...], cli: str = "") -> Adapter:
    """The adapter of `cli` when named, else of the CLI that argv runs, by the program's name."""
    if cli:
        return adapter_named(cli)
    name = Path(argv[0]).name if argv else ""
    return adapter_named(name) if name in ADAPTERS else GenericCli()


def adapter_of(cfg: "Config", argv: tuple[str, ...] | None = None) -> Adapter:
    """The adapter of the loop's agent command (GENESIS_AGENT_CLI names it, or its program
    does); another command, such as the fallback, by its own program."""
    argv = cfg.agent_cmd if argv is None else tuple(argv)
    return adapter_for(argv, cfg.agent_cli if argv == cfg.agent_cmd else "")

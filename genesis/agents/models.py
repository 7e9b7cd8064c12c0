"""Which model an agent command asks for, as its command line (or its CLI's own variable) names it.

Recorded with each phase's start so that the dashboard's metrics can count runs by model. Only
what the command says is read: a command that names no model runs its CLI's default, which
Genesis does not guess (None). The model a run used is read afterwards from the agent's own
records (Result.model, recorded with the phase's end as `model_used`), and counts first.

Recorded too with a fleet child's launch (fleet/monitor.py), so runs are counted by model
across loops and fleets alike.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Mapping, Sequence

from genesis.agents import adapter_of

if TYPE_CHECKING:
    from genesis.config import Config

__all__ = ["model_of", "cli_and_model", "SHORT_FLAG", "MODEL_VARIABLE"]

MOST_CHARS = 100  # a model's name, at most: a flag's value is the user's text
# The CLIs whose `-m` is their model flag (aider's `-m` is its message; a generic CLI's is unknown).
SHORT_FLAG = frozenset({"codex", "gemini", "qwen", "opencode"})
# The variable a CLI takes its model from when its command line names none.
MODEL_VARIABLE = {"claude": "ANTHROPIC_MODEL", "gemini": "GEMINI_MODEL", "aider": "AIDER_MODEL"}


def model_of(cli: str, argv: Sequence[str], env: Mapping[str, str] | None = None) -> str | None:
    """The model `argv` (run by the adapter named `cli`) asks for, else None."""
    found = None
    args = list(argv)
    for i, arg in enumerate(args):
        nxt = args[i + 1] if i + 1 < len(args) else None
        if arg == "--model" or (arg == "-m" and cli in SHORT_FLAG):
            found = nxt
        elif arg.startswith("--model="):
            found = arg.split("=", 1)[1]
        elif cli == "codex" and arg in ("-c", "--config") and nxt and nxt.replace(" ", "").startswith("model="):
            found = nxt.split("=", 1)[1].strip().strip("\"'")
    if not found and env is not None and cli in MODEL_VARIABLE:
        found = env.get(MODEL_VARIABLE[cli])
    found = (found or "").strip()[:MOST_CHARS]
    return found or None


def cli_and_model(cfg: "Config", argv: Sequence[str] | None = None) -> tuple[str, str | None]:
    """The CLI (its adapter's name) and the model of an agent command (the configured one when
    argv is None), for a fleet's launch record; ("?", None) when no adapter answers."""
    command = tuple(argv) if argv else tuple(cfg.agent_cmd)
    try:
        cli = adapter_of(cfg, command).name
    except Exception:  # noqa: BLE001 - a record of what ran: never the reason a child does not start
        return "?", None
    return cli, model_of(cli, command, os.environ)

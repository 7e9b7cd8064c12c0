"""Heartbeat records written by the hook, and where they live."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from genesis.store.atomicio import CorruptFile, finite, read_json

__all__ = ["Heartbeat", "read_heartbeat", "pids", "default_heartbeat_file", "hook_script", "tool_event", "BEFORE_TOOL",
           "AFTER_TOOL", "TOOL_FAILED"]

MAX_HEARTBEAT_BYTES = 64 * 1024

# Each CLI names its tool events its own way; Genesis reasons in Claude Code's names.
BEFORE_TOOL, AFTER_TOOL, TOOL_FAILED = "PreToolUse", "PostToolUse", "PostToolUseFailure"
TOOL_EVENTS = {
    "PreToolUse": BEFORE_TOOL, "PostToolUse": AFTER_TOOL, "PostToolUseFailure": TOOL_FAILED,  # Claude, Qwen, Codex
    "BeforeTool": BEFORE_TOOL, "AfterTool": AFTER_TOOL,                                        # Gemini CLI
    "preToolUse": BEFORE_TOOL, "postToolUse": AFTER_TOOL, "postToolUseFailure": TOOL_FAILED,  # Copilot CLI
    "tool.execute.before": BEFORE_TOOL, "tool.execute.after": AFTER_TOOL,                      # opencode's plugin
    "tool.execute.error": TOOL_FAILED,
}


def tool_event(event: str) -> str:
    """The event in Claude Code's names (PreToolUse, PostToolUse, PostToolUseFailure); any
    other event (SessionStart, Stop, ...) as it is."""
    return TOOL_EVENTS.get(event, event)


@dataclass(frozen=True)
class Heartbeat:
    epoch: float
    timestamp: str
    agent: str
    tool: str
    event: str
    session_id: str
    pid: int | None
    run_id: str
    ppids: tuple[int, ...] = ()    # who ran the hook: its parent and ancestors, nearest first (() unknown)


MAX_PPIDS = 16


def pids(value: object) -> tuple[int, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(p for p in value[:MAX_PPIDS] if isinstance(p, int) and not isinstance(p, bool) and p > 0)


def read_heartbeat(path: Path) -> tuple[Heartbeat | None, str]:
    """The heartbeat at path, or None with the reason (missing, symlink, not JSON...).

    An unusable file is "unknown", never "fresh": the caller falls back to the time it
    last saw a good one, or the agent's start.
    """
    try:
        data = read_json(path, limit=MAX_HEARTBEAT_BYTES)
    except CorruptFile as exc:
        return None, exc.reason
    except OSError as exc:
        return None, f"unreadable ({exc.strerror})"
    if data is None:
        return None, "no heartbeat yet"
    if not isinstance(data, dict):
        return None, "not a JSON object"
    epoch = finite(data.get("epoch"))
    if epoch is None:
        return None, "no numeric epoch field"
    pid = data.get("pid")
    return Heartbeat(
        epoch=epoch,
        timestamp=str(data.get("timestamp", "")),
        agent=str(data.get("agent", "")),
        tool=str(data.get("tool", "")),
        event=str(data.get("event", "")),
        session_id=str(data.get("session_id", "")),
        pid=pid if isinstance(pid, int) and not isinstance(pid, bool) else None,
        run_id=str(data.get("run_id", "")),
        ppids=pids(data.get("ppids")),
    ), ""


def default_heartbeat_file(env: Mapping[str, str] | None = None) -> Path:
    """Where the hook writes without GENESIS_HEARTBEAT_FILE (the same rule as the hook)."""
    env = os.environ if env is None else env
    if env.get("GENESIS_HEARTBEAT_FILE"):
        return Path(env["GENESIS_HEARTBEAT_FILE"])
    if env.get("GENESIS_STATE_DIR"):
        base = Path(env["GENESIS_STATE_DIR"])
    elif env.get("XDG_RUNTIME_DIR"):
        base = Path(env["XDG_RUNTIME_DIR"]) / "genesis"
    else:
        base = Path(env.get("HOME", os.path.expanduser("~"))) / ".local" / "state" / "genesis"
    return base / "heartbeat.json"


def hook_script() -> Path:
    """The heartbeat hook shipped inside the package (the same file as hooks/ in a clone)."""
    return Path(__file__).resolve().parents[1] / "data" / "genesis-heartbeat.sh"

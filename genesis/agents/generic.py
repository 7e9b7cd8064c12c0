"""Any other command: a text CLI that may well wrap Claude Code, so it borrows Claude Code's
hook (warned about when missing, not required: Genesis cannot know the command fires it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from genesis.agents.base import Adapter
from genesis.agents.claude.hookcheck import self_test
from genesis.agents.claude.settings import CLAUDE_HOOKS, claude_paths

if TYPE_CHECKING:
    from pathlib import Path
    from typing import Mapping

    from genesis.agents.hook.selftest import HookCheck
    from genesis.agents.hook.spec import HookSpec

__all__ = ["GenericCli"]


class GenericCli(Adapter):
    name = "generic"

    @property
    def hooks(self) -> "HookSpec":
        return CLAUDE_HOOKS

    def box_paths(self, env: "Mapping[str, str]") -> "tuple[Path, ...]":
        """Claude Code's own places: the command may well wrap it."""
        return claude_paths(env)

    def hook_check(self, project: "Path", env: "Mapping[str, str]", heartbeat: "Path") -> "HookCheck":
        """Every settings scope Claude Code reads, and its switches."""
        return self_test(project, env, heartbeat)

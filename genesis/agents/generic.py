"""Any other command: a text CLI that may well wrap Claude Code, so it borrows Claude Code's
hook (checked when installed, not required: Genesis cannot know the command fires it). When it
is not installed, a generic agent is told nothing about Claude Code (NO_HOOK): its output and
its processes are its signs of life."""

from __future__ import annotations

from typing import TYPE_CHECKING

from genesis.agents.base import Adapter

if TYPE_CHECKING:
    from pathlib import Path
    from typing import Mapping

    from genesis.agents.hook.selftest import HookCheck
    from genesis.agents.hook.spec import HookSpec

__all__ = ["GenericCli", "NO_HOOK", "says_no_hook"]

NO_HOOK = "generic has no per-tool-call hook: its output and its processes' activity are its signs of life"


def says_no_hook(adapter: Adapter, check: "HookCheck") -> bool:
    """A generic agent without Claude Code's hook: NO_HOOK is said, not how to install Claude Code's."""
    from genesis.agents.hook.selftest import NOT_INSTALLED   # imported already: a check was made
    return adapter.name == GenericCli.name and check.state == NOT_INSTALLED


class GenericCli(Adapter):
    name = "generic"

    @property
    def hooks(self) -> "HookSpec":
        from genesis.agents.claude.settings import CLAUDE_HOOKS
        return CLAUDE_HOOKS

    def box_paths(self, env: "Mapping[str, str]") -> "tuple[Path, ...]":
        """Claude Code's own places: the command may well wrap it."""
        from genesis.agents.claude.settings import claude_paths
        return claude_paths(env)

    def hook_check(self, project: "Path", env: "Mapping[str, str]", heartbeat: "Path") -> "HookCheck":
        """Every settings scope Claude Code reads, and its switches."""
        from genesis.agents.claude.hookcheck import self_test
        return self_test(project, env, heartbeat)

"""What a test must not inherit from the developer's environment.

A test gets its own HOME; these variables would still point the code under test, or an
agent CLI it starts, at the developer's own files (an opencode plugin written into the real
$XDG_CONFIG_HOME/opencode, a Copilot hook into the real $COPILOT_HOME), at their API keys,
or at Genesis settings of their own. The autouse fixture in tests/conftest.py clears them
for every test; tests/bats/test_helper.bash clears the same (a test checks the two agree).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

__all__ = ["CLEARED_PREFIXES", "CLEARED_NAMES", "cleared", "isolated_env"]

CLEARED_PREFIXES = (
    # Genesis's own settings, and the loop's knobs it reads without the prefix.
    "GENESIS_", "HEARTBEAT_", "AGENT_MAX", "CB_", "REAP_", "PHASE_", "AUTO_", "ITERATION_PAUSE", "KILL_GRACE",
    # The XDG base folders: opencode's config ($XDG_CONFIG_HOME/opencode), Claude Code's and
    # opencode's data, state and caches, git's $XDG_CONFIG_HOME/git/config.
    "XDG_",
    # Claude Code: CLAUDE_CONFIG_DIR (replaces ~/.claude), CLAUDE_CODE_*, ANTHROPIC_CONFIG_DIR,
    # ANTHROPIC_API_KEY and ANTHROPIC_BASE_URL.
    "CLAUDE", "ANTHROPIC_",
    # Codex: CODEX_HOME (replaces ~/.codex); Codex, Qwen Code and aider read OPENAI_*.
    "CODEX_", "OPENAI_",
    # Gemini CLI: GEMINI_CLI_HOME (replaces the home of ~/.gemini), GEMINI_CLI_SYSTEM_SETTINGS_PATH,
    # GEMINI_API_KEY; GOOGLE_GEMINI_BASE_URL, GOOGLE_API_KEY, GOOGLE_APPLICATION_CREDENTIALS.
    "GEMINI_", "GOOGLE_",
    # Qwen Code: QWEN_HOME (replaces ~/.qwen), QWEN_CODE_SYSTEM_SETTINGS_PATH.
    "QWEN_",
    # opencode: OPENCODE_CONFIG_DIR (another plugin folder), OPENCODE_CONFIG, OPENCODE_CONFIG_CONTENT.
    "OPENCODE",
    # Copilot CLI: COPILOT_HOME (replaces ~/.copilot), COPILOT_CACHE_HOME, its provider settings.
    "COPILOT_",
    # aider: every option as AIDER_* (its config files are in the home and the project).
    "AIDER_",
)
CLEARED_NAMES = (
    "CLOUDSDK_CONFIG",                          # gcloud's folder, where Gemini CLI looks for a login
    "GH_CONFIG_DIR", "GH_TOKEN", "GH_HOST", "GITHUB_TOKEN",  # the GitHub login Copilot CLI uses
    # A test run from a git hook would otherwise point every test project's git at the caller's repository.
    "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_CONFIG_GLOBAL",
    # The caller's last folder: a path under /tmp in it is bound into the agent's box, so it would
    # hide a box that lacks what an agent installed under /tmp needs (a venv's root, node_modules).
    "OLDPWD",
)


def cleared(name: str) -> bool:
    """Whether a test must not inherit this variable."""
    return name.startswith(CLEARED_PREFIXES) or name in CLEARED_NAMES


def isolated_env(home: Path, base: Mapping[str, str] | None = None, **extra: str) -> dict[str, str]:
    """`base` (this process's environment) without what a test must not inherit, with this HOME and `extra`."""
    base = os.environ if base is None else base
    return {**{k: v for k, v in base.items() if not cleared(k)}, "HOME": str(home), **extra}

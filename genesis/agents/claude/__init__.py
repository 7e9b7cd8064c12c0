"""Claude Code: `claude -p`, its stream-json output, its text-mode messages and its hooks."""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING

from genesis.agents.base import LOGGED_IN, LOGGED_OUT, LOGIN_UNKNOWN, Adapter, Ending, Login, OutputReader, TextReader
from genesis.agents.claude.hookcheck import self_test
from genesis.agents.claude.messages import classify
from genesis.agents.claude.settings import CLAUDE_HOOKS, claude_paths, settings_path, user_settings_dir
from genesis.agents.claude.stream import StreamReader

if TYPE_CHECKING:
    from pathlib import Path
    from typing import Mapping

    from genesis.agents.hook.selftest import HookCheck
    from genesis.agents.hook.spec import HookSpec
    from genesis.phases import Phase

__all__ = ["ClaudeCode", "ClaudeTextReader", "output_format", "PROVIDERS"]

STRUCTURED = ("--output-format", "stream-json", "--verbose")
# Claude Code through a cloud provider logs in with that cloud's own credentials.
PROVIDERS = {"CLAUDE_CODE_USE_BEDROCK": "Amazon Bedrock", "CLAUDE_CODE_USE_VERTEX": "Google Vertex AI",
             "CLAUDE_CODE_USE_FOUNDRY": "Microsoft Foundry"}


def output_format(argv: tuple[str, ...]) -> str | None:
    """The --output-format the command asks for (None: none, so text)."""
    for i, arg in enumerate(argv):
        if arg == "--output-format" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--output-format="):
            return arg.split("=", 1)[1]
    return None


class ClaudeTextReader(TextReader):
    """`claude -p` with text output prints only its final message; on a failed run that
    message is where a usage limit or an API error is said (never in tool output, which
    text mode does not print)."""

    def __init__(self, now=time.time) -> None:
        super().__init__()
        self.now = now

    def ending(self, returncode: int | None) -> Ending:
        if returncode in (0, None) or not self.last:
            return super().ending(returncode)
        found = classify(self.last, self.now())
        return Ending.of(found)


class ClaudeCode(Adapter):
    name = "claude"
    program = "claude"
    version = "2.1.329"
    prompt_on_stdin = True       # `claude -p` reads its prompt from stdin when none is given
    hook_required = True         # without the hook a healthy Claude Code looks stuck
    home_var = "CLAUDE_CONFIG_DIR"
    key_vars = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN")
    api_hosts = ("api.anthropic.com", "console.anthropic.com", "claude.ai", "platform.claude.com",
                 "statsig.anthropic.com", "sentry.io")
    base_url_vars = ("ANTHROPIC_BASE_URL", "ANTHROPIC_BEDROCK_BASE_URL", "ANTHROPIC_VERTEX_BASE_URL")
    install = "npm install -g @anthropic-ai/claude-code"
    login_command = "claude auth login"
    login_files = (".credentials.json",)

    @property
    def hooks(self) -> "HookSpec":
        return CLAUDE_HOOKS

    def home(self, env: "Mapping[str, str]") -> "Path":
        return user_settings_dir(env)

    def box_paths(self, env: "Mapping[str, str]") -> "tuple[Path, ...]":
        """~/.claude and ~/.claude.json (its state and login beside the folder; inside
        $CLAUDE_CONFIG_DIR when that is set)."""
        return claude_paths(env)

    def hook_check(self, project: "Path", env: "Mapping[str, str]", heartbeat: "Path") -> "HookCheck":
        """Every settings scope Claude Code reads, and its switches."""
        return self_test(project, env, heartbeat)

    def login(self, env: "Mapping[str, str]", project: "Path | None" = None) -> Login:
        """A key variable, a cloud provider, the credentials file or an apiKeyHelper; on macOS the
        login is in the Keychain, which cannot be read without asking it."""
        found = super().login(env, project)
        if found.state == LOGGED_IN:
            return found
        for name, cloud in PROVIDERS.items():
            if env.get(name, "") not in ("", "0", "false"):
                return Login(LOGGED_IN, f"{name} set: it logs in with {cloud}'s own credentials")
        scopes = ("user", "project", "local") if project is not None else ("user",)
        for path in (settings_path(scope, project or self.home(env), env=env) for scope in scopes):
            if _names_key_helper(path):
                return Login(LOGGED_IN, f"an apiKeyHelper in {path}")
        if sys.platform == "darwin":
            return Login(LOGIN_UNKNOWN, f"cannot tell: none of {', '.join(self.key_vars)} set, and on macOS "
                         f"Claude Code keeps its login in the Keychain")
        return Login(LOGGED_OUT, f"not logged in: none of {', '.join(self.key_vars)} set, and no "
                     f"{self.home(env) / self.login_files[0]}")

    def command(self, argv: tuple[str, ...], phase: "Phase | None" = None) -> tuple[str, ...]:
        """Structured output unless the user chose a format; the phase's turn and budget caps."""
        argv = tuple(argv)
        fmt = output_format(argv)
        if fmt is None:
            argv += STRUCTURED
        elif fmt == "stream-json" and "--verbose" not in argv:
            argv += ("--verbose",)  # `-p` refuses stream-json without it
        if phase is not None and phase.max_turns is not None:
            argv += ("--max-turns", str(phase.max_turns))
        if phase is not None and phase.max_budget_usd is not None:
            argv += ("--max-budget-usd", f"{phase.max_budget_usd:g}")
        return argv

    def raw_suffix(self, argv: tuple[str, ...]) -> str | None:
        return ".jsonl" if self.structured(argv) else None

    def structured(self, argv: tuple[str, ...]) -> bool:
        return output_format(argv) == "stream-json"

    def reader(self, argv: tuple[str, ...], clock=None) -> OutputReader:
        if self.structured(argv):
            return StreamReader(clock.mono) if clock is not None else StreamReader()
        return ClaudeTextReader(clock.wall if clock is not None else time.time)

    def options_problem(self, argv: tuple[str, ...], phase: "Phase") -> str | None:
        return None


def _names_key_helper(path: "Path") -> bool:
    """Whether a settings file sets apiKeyHelper (a command that prints the key)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and bool(data.get("apiKeyHelper"))

"""Gemini CLI: `gemini -p`, its stream-json output, its errors and its hooks.

Unattended it needs the workspace trusted (GEMINI_CLI_TRUST_WORKSPACE=true, else it exits
55), every tool approved (`--yolo`) and the prompt as `-p`'s value. The hook goes into
`~/.gemini/settings.json` (the home is $GEMINI_CLI_HOME when set) for BeforeTool and
AfterTool, matcher ".*"; hooks are on by default (`hooksConfig.enabled`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from genesis.agents.base import Adapter, OutputReader, TextReader
from genesis.agents.gemini.stream import GeminiStreamReader
from genesis.agents.hook.spec import GroupedHooks, home_dir

if TYPE_CHECKING:
    from genesis.phases import Phase

__all__ = ["GeminiCli", "GEMINI_HOOKS", "GeminiHooks", "output_format", "config_dir"]

HOOK_EVENTS = ("BeforeTool", "AfterTool")   # AfterTool also follows a failed call: there is no other event
HOOK_TIMEOUT_MS = 10_000                    # in milliseconds: Claude Code's 10 would kill the hook after 10 ms
PROMPT_FLAGS = ("-p", "--prompt")
APPROVAL_FLAGS = ("-y", "--yolo", "--approval-mode")


def config_dir(env: Mapping[str, str]) -> Path:
    """~/.gemini, where $GEMINI_CLI_HOME replaces the home when set."""
    return (Path(env["GEMINI_CLI_HOME"]) if env.get("GEMINI_CLI_HOME") else home_dir(env)) / ".gemini"


class GeminiHooks(GroupedHooks):
    """Claude Code's layout, with the timeout in milliseconds and the CLI's own payload."""

    def entry(self, command: str) -> dict:
        return {"type": "command", "command": command, "timeout": HOOK_TIMEOUT_MS}

    def payload(self, session: str, project: Path) -> bytes:
        """The common payload with the fields Gemini CLI adds: its transcript, a timestamp,
        and a tool response of its own shape."""
        data = json.loads(super().payload(session, project))
        data.update(transcript_path="", timestamp=time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()),
                    tool_response={"llmContent": "", "returnDisplay": ""})
        return json.dumps(data).encode()


GEMINI_HOOKS = GeminiHooks("gemini", config_dir, "settings.json", HOOK_EVENTS, "AfterTool", matcher=".*",
                           matched=frozenset(HOOK_EVENTS))


def option(argv: tuple[str, ...], *names: str) -> str | None:
    """The value of the first of `names` given (`-o x`, `--output-format=x`), or None."""
    for i, arg in enumerate(argv):
        for name in names:
            if arg == name and i + 1 < len(argv):
                return argv[i + 1]
            if name.startswith("--") and arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return None


def output_format(argv: tuple[str, ...]) -> str | None:
    return option(argv, "-o", "--output-format")


class GeminiCli(Adapter):
    name = "gemini"
    program = "gemini"
    version = "0.61.0"
    hook_required = True         # without the hook a healthy Gemini CLI looks stuck
    hooks = GEMINI_HOOKS
    home_var = "GEMINI_CLI_HOME"
    key_vars = ("GEMINI_API_KEY", "GOOGLE_API_KEY")
    api_hosts = ("generativelanguage.googleapis.com", "cloudcode-pa.googleapis.com", "oauth2.googleapis.com",
                 "accounts.google.com", "play.googleapis.com")
    base_url_vars = ("GOOGLE_GEMINI_BASE_URL", "GOOGLE_VERTEX_BASE_URL")
    install = "npm install -g @google/gemini-cli"
    login_command = "gemini"
    login_files = ("oauth_creds.json",)

    def home(self, env: Mapping[str, str]) -> Path:
        return config_dir(env)

    def environment(self) -> dict[str, str]:
        return {"GEMINI_CLI_TRUST_WORKSPACE": "true"}

    def command(self, argv: tuple[str, ...], phase: "Phase | None" = None) -> tuple[str, ...]:
        """Structured output and every tool approved unless the user chose otherwise; `-p`
        last, for the prompt. The model is the user's (`-m`, GEMINI_MODEL, settings.json),
        else the CLI's own choice."""
        argv = tuple(arg for arg in argv if arg not in PROMPT_FLAGS)  # a bare -p: the prompt goes last
        if output_format(argv) is None:
            argv += ("--output-format", "stream-json")
        if not any(arg in APPROVAL_FLAGS or arg.startswith("--approval-mode=") for arg in argv):
            argv += ("--yolo",)
        return argv + ("-p",)

    def raw_suffix(self, argv: tuple[str, ...]) -> str | None:
        return ".jsonl" if self.structured(argv) else None

    def structured(self, argv: tuple[str, ...]) -> bool:
        return output_format(argv) == "stream-json"

    def reader(self, argv: tuple[str, ...], clock=None) -> OutputReader:
        if self.structured(argv):
            return GeminiStreamReader(clock.mono, clock.wall) if clock is not None else GeminiStreamReader()
        return TextReader()

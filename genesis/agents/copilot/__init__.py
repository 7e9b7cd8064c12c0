"""GitHub Copilot CLI: `copilot --allow-all-tools --output-format json -p PROMPT`, its JSONL
events, its text output, and its hook file.

Unattended it needs `--allow-all-tools` (else every tool call waits for an approval no one
gives) and `-p` right before the prompt. `--output-format json` makes its output events
(stream.py). In text mode it prints the transcript and final message on stdout and, on
stderr, an error in its own words and a block of stats (`Changes`, `Duration`, `Tokens`,
`Resume`). It has no turn cap; its `--max-ai-credits` counts credits, not dollars.
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING

from genesis.agents.base import MAX_RESULT_CHARS, Adapter, Ending, OutputReader, TextReader
from genesis.agents.copilot.hooks import COPILOT_HOOKS, config_dir
from genesis.agents.copilot.stream import CopilotJsonReader, classify

if TYPE_CHECKING:
    from pathlib import Path
    from typing import Mapping

    from genesis.phases import Phase

__all__ = ["CopilotCli", "CopilotTextReader", "text_error", "option"]

PROMPT_FLAGS = ("-p", "--prompt")
APPROVALS = ("--allow-all-tools", "--allow-all", "--yolo")
STRUCTURED = ("--output-format", "json")
STATS = re.compile(r"^(Changes|Duration|Tokens|Resume|Requests|Premium requests|AI credits) {2,}\S")
LAST_ERROR = re.compile(r"Last error: (\d{3}) ")
HTTP_STATUS = re.compile(r"\(HTTP (\d{3})\)")


def option(argv: tuple[str, ...], name: str) -> str | None:
    """The value of `name` in argv (`--output-format X` or `--output-format=X`), or None."""
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def text_error(said: str) -> dict[str, object] | None:
    """A session.error's data rebuilt from the words text mode prints (it prints no type)."""
    found = LAST_ERROR.search(said) or HTTP_STATUS.search(said)
    status = int(found.group(1)) if found else None
    if said.startswith(("You've hit", "You've reached")):
        kind = "rate_limit"
    elif said.startswith("You've run out"):
        kind = "quota"
    elif said.startswith("Authentication failed"):
        kind = "authentication"
    elif status == 429:
        kind = "rate_limit"
    elif status is not None or said.startswith("Could not connect"):
        kind = "query"
    else:
        return None
    return {"errorType": kind, "message": said, **({"statusCode": status} if status is not None else {})}


class CopilotTextReader(TextReader):
    """Text output: the final message is the last paragraph before the stats; on a failed run
    that paragraph is the CLI's error."""

    def __init__(self, now=time.time) -> None:
        super().__init__()
        self.now = now
        self.paragraph: list[str] = []
        self.said = ""
        self.in_stats = False

    def feed(self, line: str) -> list[str]:
        stripped = line.strip()
        if STATS.match(stripped):
            self.in_stats = True
        elif not stripped:
            if self.paragraph:
                self.said = "\n".join(self.paragraph)[:MAX_RESULT_CHARS]
            self.paragraph = []
        elif not self.in_stats:
            self.paragraph.append(stripped)
        return [line]

    def ending(self, returncode: int | None) -> Ending:
        said = "\n".join(self.paragraph)[:MAX_RESULT_CHARS] if self.paragraph else self.said
        if returncode == 0:
            return Ending(final_text=said)
        error = text_error(said) if returncode is not None and said else None
        found = classify(error, self.now()) if error is not None else None
        return Ending.of(found)


class CopilotCli(Adapter):
    name = "copilot"
    program = "copilot"
    version = "1.0.102"
    hook_required = True         # without the hook a healthy Copilot CLI looks stuck
    hooks = COPILOT_HOOKS
    home_var = "COPILOT_HOME"
    key_vars = ("COPILOT_GITHUB_TOKEN", "GH_TOKEN", "GITHUB_TOKEN", "COPILOT_PROVIDER_API_KEY")
    api_hosts = ("api.githubcopilot.com", "*.githubcopilot.com", "api.github.com", "github.com",
                 "copilot-proxy.githubusercontent.com")
    base_url_vars = ("COPILOT_PROVIDER_BASE_URL",)
    install = "npm install -g @github/copilot"
    login_command = "copilot login"

    def home(self, env: "Mapping[str, str]") -> "Path":
        return config_dir(env)

    def command(self, argv: tuple[str, ...], phase: "Phase | None" = None) -> tuple[str, ...]:
        """Auto-approval and JSON output unless the user chose otherwise, then `-p`: the prompt
        comes right after it. A `-p` of the user's is moved there (before a flag it would eat)."""
        argv = tuple(a for a in argv if a not in PROMPT_FLAGS)
        added: tuple[str, ...] = ()
        if not any(a in APPROVALS for a in argv):
            added += ("--allow-all-tools",)
        if option(argv, "--output-format") is None:
            added += STRUCTURED
        return argv + added + ("-p",)

    def structured(self, argv: tuple[str, ...]) -> bool:
        return option(argv, "--output-format") == "json"

    def raw_suffix(self, argv: tuple[str, ...]) -> str | None:
        return ".jsonl" if self.structured(argv) else None

    def reader(self, argv: tuple[str, ...], clock=None) -> OutputReader:
        if self.structured(argv):
            return CopilotJsonReader(clock.mono, clock.wall) if clock is not None else CopilotJsonReader()
        return CopilotTextReader(clock.wall if clock is not None else time.time)

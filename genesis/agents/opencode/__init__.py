"""opencode: `opencode run`, its JSON events, its errors and its heartbeat plugin.

Unattended it runs as `opencode run --format json --auto -- PROMPT`: `--auto` approves every
permission the user's config does not deny (without it, a permission set to "ask" is
rejected and the tool call fails), and `--` keeps a prompt that starts with a dash from
being read as options. With no prompt argument it reads the prompt from stdin. The model
and its provider are the user's (opencode.json, or `-m provider/model`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from genesis.agents.base import Adapter, OutputReader, TextReader, read_config
from genesis.agents.hook.spec import home_dir
from genesis.agents.opencode.plugin import OPENCODE_HOOKS, config_dir
from genesis.agents.opencode.stream import OpenCodeReader

if TYPE_CHECKING:
    from genesis.phases import Phase

__all__ = ["OpenCode", "output_format"]

APPROVAL_FLAGS = ("--auto", "--yolo", "--dangerously-skip-permissions")


def output_format(argv: tuple[str, ...]) -> str | None:
    """The --format the command asks for (None: none, so opencode's formatted text)."""
    for i, arg in enumerate(argv):
        if arg == "--format" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--format="):
            return arg.split("=", 1)[1]
    return None


def base_urls(config: Path, most: int = 64) -> tuple[str, ...]:
    """Each provider's `options.baseURL` in an opencode.json (plain JSON; a file it cannot read: none)."""
    text = read_config(config)
    try:
        parsed = json.loads(text) if text else {}
    except ValueError:
        return ()
    providers = parsed.get("provider") if isinstance(parsed, dict) else None
    found = [p.get("options", {}).get("baseURL") for p in (providers or {}).values()
             if isinstance(p, dict) and isinstance(p.get("options"), dict)] if isinstance(providers, dict) else []
    return tuple(u for u in found[:most] if isinstance(u, str))

class OpenCode(Adapter):
    name = "opencode"
    program = "opencode"
    version = "1.18.33"
    prompt_on_stdin = True       # `opencode run` reads its message from stdin when given none
    hook_required = True         # without the plugin a healthy opencode looks stuck
    hooks = OPENCODE_HOOKS
    home_var = "XDG_DATA_HOME"   # its logins are in $XDG_DATA_HOME/opencode/auth.json
    key_vars = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "OPENROUTER_API_KEY")
    api_hosts = ("api.anthropic.com", "api.openai.com", "generativelanguage.googleapis.com", "openrouter.ai",
                 "opencode.ai", "models.dev")
    base_url_vars = ("ANTHROPIC_BASE_URL", "OPENAI_BASE_URL")
    install = "npm install -g opencode-ai"
    login_command = "opencode auth login"
    login_files = ("auth.json",)

    def home(self, env: Mapping[str, str]) -> Path:
        base = Path(env["XDG_DATA_HOME"]) if env.get("XDG_DATA_HOME") else home_dir(env) / ".local" / "share"
        return base / "opencode"

    def box_paths(self, env: Mapping[str, str]) -> tuple[Path, ...]:
        """Its data (logins), its config (the heartbeat plugin) and its cache folders."""
        cache = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else home_dir(env) / ".cache"
        return (self.home(env), config_dir(env), cache / "opencode")

    def network_hosts(self, env: Mapping[str, str]) -> tuple[str, ...]:
        """Its API hosts, and each provider's `baseURL` in its global opencode.json."""
        return super().network_hosts(env) + base_urls(config_dir(env) / "opencode.json")

    def command(self, argv: tuple[str, ...], phase: "Phase | None" = None) -> tuple[str, ...]:
        """`run`, JSON events and every permission approved unless the user chose otherwise;
        `--` last, before the prompt."""
        argv = tuple(argv)
        if "run" not in argv[1:]:
            argv = argv[:1] + ("run",) + argv[1:]
        if argv[-1] == "--":
            argv = argv[:-1]
        if output_format(argv) is None:
            argv += ("--format", "json")
        if not any(arg in APPROVAL_FLAGS for arg in argv):
            argv += ("--auto",)
        return argv + ("--",)

    def raw_suffix(self, argv: tuple[str, ...]) -> str | None:
        return ".jsonl" if self.structured(argv) else None

    def structured(self, argv: tuple[str, ...]) -> bool:
        return output_format(argv) == "json"

    def reader(self, argv: tuple[str, ...], clock=None) -> OutputReader:
        if self.structured(argv):
            return OpenCodeReader(clock.wall, clock.mono) if clock is not None else OpenCodeReader()
        return TextReader()

    def options_problem(self, argv: tuple[str, ...], phase: "Phase") -> str | None:
        if "--pure" in argv:
            return ("opencode --pure runs without plugins, so Genesis's heartbeat plugin would never fire and "
                    "every phase would look stuck: remove --pure from GENESIS_AGENT_CMD")
        if phase.max_turns is not None or phase.max_budget_usd is not None:
            return (f"PHASE_{phase.name}_MAX_TURNS and _MAX_BUDGET_USD have no opencode flag; unset them (an "
                    f"agent's step limit is `steps` in opencode.json)")
        return None

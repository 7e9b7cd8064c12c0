"""Codex: `codex exec --json`, its JSONL events, its errors and its hooks.

Unattended it runs as `codex exec` with every command allowed outside a sandbox
(`--dangerously-bypass-approvals-and-sandbox`, unless the user chose a sandbox or an
approval mode), anywhere (`--skip-git-repo-check`), and prints its events as JSONL
(`--json`). The prompt is its last argument, after `--` so that a prompt starting with
a dash (a front matter's `---`) is not read as an option; a prompt too long for the command
line goes to its stdin instead, which `codex exec` reads when no prompt follows `--`.
The hook goes into `$CODEX_HOME/hooks.json` and its trust into `$CODEX_HOME/config.toml`
(see hooks.py).
"""

from __future__ import annotations

import tomllib
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from genesis.agents.base import Adapter, OutputReader, TextReader, read_config
from genesis.agents.codex.hooks import CODEX_HOOKS, config_dir
from genesis.agents.codex.stream import CodexReader
from genesis.agents.hook.selftest import BROKEN, spec_self_test
from genesis.hints import hint

if TYPE_CHECKING:
    from genesis.agents.hook.selftest import HookCheck
    from genesis.phases import Phase

__all__ = ["Codex", "CODEX_HOOKS"]

SUBCOMMANDS = ("exec", "e")
JSON_FLAGS = ("--json", "--experimental-json")
# A user's own choice of how commands are approved or sandboxed wins over ours.
PERMISSION_FLAGS = ("--dangerously-bypass-approvals-and-sandbox", "--yolo", "--full-auto", "--approve-for-me",
                    "-s", "--sandbox")
BYPASS_HOOK_TRUST = "--dangerously-bypass-hook-trust"


def provider_of(config: Path) -> dict:
    """The custom model provider config.toml chooses (`model_provider` in `[model_providers]`), or {}."""
    text = read_config(config)
    try:
        parsed = tomllib.loads(text) if text else {}
    except tomllib.TOMLDecodeError:
        return {}
    chosen = parsed.get("model_provider")
    providers = parsed.get("model_providers")
    found = providers.get(chosen) if isinstance(providers, dict) and isinstance(chosen, str) else None
    return found if isinstance(found, dict) else {}


def exec_index(argv: tuple[str, ...]) -> int | None:
    """Where the `exec` subcommand is in argv, or None."""
    return next((i for i, arg in enumerate(argv) if i > 0 and arg in SUBCOMMANDS), None)


class Codex(Adapter):
    name = "codex"
    program = "codex"
    version = "0.169.0"
    prompt_on_stdin = True       # with no prompt after `--`, `codex exec` reads it from stdin
    hook_required = True         # without the hook a healthy Codex looks stuck
    hooks = CODEX_HOOKS
    home_var = "CODEX_HOME"
    key_vars = ("CODEX_API_KEY", "OPENAI_API_KEY")
    api_hosts = ("api.openai.com", "chatgpt.com", "auth.openai.com", "ab.chatgpt.com")
    base_url_vars = ("OPENAI_BASE_URL",)
    install = "npm install -g @openai/codex"
    login_command = "codex login"
    login_files = ("auth.json",)

    def home(self, env: Mapping[str, str]) -> Path:
        return config_dir(env)

    def network_hosts(self, env: Mapping[str, str]) -> tuple[str, ...]:
        """Its API hosts, and the base_url of the model provider its config.toml chooses."""
        url = provider_of(self.home(env) / "config.toml").get("base_url")
        return super().network_hosts(env) + ((url,) if isinstance(url, str) else ())

    def box_keys(self, env: Mapping[str, str]) -> tuple[str, ...]:
        """Its key variables, and the `env_key` its chosen custom provider reads its key from."""
        name = provider_of(self.home(env) / "config.toml").get("env_key")
        return self.key_vars + ((name,) if isinstance(name, str) and name.isidentifier() else ())

    def command(self, argv: tuple[str, ...], phase: "Phase | None" = None) -> tuple[str, ...]:
        argv = tuple(argv)
        if argv and argv[-1] == "--":
            argv = argv[:-1]
        if exec_index(argv) is None:
            argv = argv[:1] + ("exec",) + argv[1:]
        if not any(arg in JSON_FLAGS for arg in argv):
            argv += ("--json",)
        if "--skip-git-repo-check" not in argv:
            argv += ("--skip-git-repo-check",)
        if not any(arg in PERMISSION_FLAGS or arg.startswith("--sandbox=") for arg in argv):
            argv += ("--dangerously-bypass-approvals-and-sandbox",)
        return argv + ("--",)

    def raw_suffix(self, argv: tuple[str, ...]) -> str | None:
        return ".jsonl" if self.structured(argv) else None

    def structured(self, argv: tuple[str, ...]) -> bool:
        return any(arg in JSON_FLAGS for arg in argv)

    def reader(self, argv: tuple[str, ...], clock=None) -> OutputReader:
        if self.structured(argv):
            return CodexReader(clock.mono, clock.wall) if clock is not None else CodexReader()
        return TextReader()

    def hook_check(self, project: Path, env: Mapping[str, str], heartbeat: Path) -> "HookCheck | None":
        """The hook runs and beats, and Codex trusts it: an untrusted hook is skipped silently."""

        check = spec_self_test(CODEX_HOOKS, project, env, heartbeat)
        if not check.ok or check.path is None:
            return check
        missing = CODEX_HOOKS.untrusted(check.path)
        if not missing:
            return check
        return replace(check, state=BROKEN,
                       detail=f"broken: the hook in {check.path} runs, but Codex skips it: its trust in "
                              f"{CODEX_HOOKS.config(check.path)} is missing or for another version of it "
                              f"({', '.join(missing)}); run: {hint(project, 'hook', 'install', '--agent', 'codex')}, "
                              f"or trust it in codex's /hooks")


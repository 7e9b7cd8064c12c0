"""opencode's heartbeat hook: a small plugin file, wholly Genesis's.

opencode has no command hooks; it loads every `plugin/*.js` of its config folder
(${XDG_CONFIG_HOME:-~/.config}/opencode, and $OPENCODE_CONFIG_DIR when set) into its own
process. Ours runs the heartbeat script on `tool.execute.before` and `tool.execute.after`
with a Claude Code-shaped event on its stdin. opencode calls no hook when a tool call
fails, so the plugin also watches the session's events for a tool part that ended in an
error and beats `tool.execute.error` for it. The script is started detached and never
waited on, and nothing the plugin does may throw into opencode: a broken heartbeat must
never break the agent.

opencode retries a failing model API by itself, each time after the API's `retry-after`
(however long) or up to 30 s, and its JSON output says nothing meanwhile. Under Genesis
(GENESIS_RUN_ID set) and in `run --format json` only, the plugin writes each retry into
that output as a `genesis_retry` event: the watcher then knows the agent waits on the
API and is not stuck.

Before loading a plugin, opencode installs its plugin SDK (@opencode-ai/plugin) into that
folder with npm, once; offline it waits about 70 s for that on every start. The plugin
imports nothing from it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path
from typing import Mapping

from genesis.agents.hook.replace import UNTOUCHED, SettingsError, read_owned, write_owned
from genesis.agents.hook.settingsfile import Change
from genesis.agents.hook.spec import HookSpec, home_dir

__all__ = ["OpenCodePlugin", "OPENCODE_HOOKS", "config_dir", "render", "FILE_NAME", "EVENTS"]

FILE_NAME = "genesis-heartbeat.js"
BEFORE, AFTER, FAILED = "tool.execute.before", "tool.execute.after", "tool.execute.error"
EVENTS = (BEFORE, AFTER, FAILED)
MARKER = "// genesis-heartbeat: written by `genesis hook install --agent opencode`"
COMMAND_LINE = re.compile(r"^const COMMAND = (\[.*\])$", re.MULTILINE)

# The plugin. COMMAND is the hook command as an argv (no shell in between: the script's
# parent is opencode itself, whose pid the heartbeat records). A string argument of the
# tool is cut to ARG_CHARS: the heartbeat reads only the payload's first 4 KiB.
TEMPLATE = MARKER + """; `genesis hook uninstall --agent opencode` removes it.
// Genesis's heartbeat: opencode runs this plugin in its own process; on every tool call it starts
// the heartbeat script detached, writes the event to its stdin and never waits for it.
import { spawn } from "node:child_process"

const COMMAND = __COMMAND__
const ARG_CHARS = 512
const started = new Map()
// Under Genesis, in `opencode run --format json`, opencode's own API retries (silent there) are
// written into its event stream: a CLI that waits to retry the API is not stuck.
const options = process.argv.includes("--") ? process.argv.slice(0, process.argv.indexOf("--")) : process.argv
const JSON_RUN = Boolean(process.env.GENESIS_RUN_ID) && options.includes("run") &&
  (options.includes("--format=json") || options.some((arg, i) => arg === "--format" && options[i + 1] === "json"))

function small(args) {
  const out = {}
  for (const [key, value] of Object.entries(args && typeof args === "object" ? args : {})) {
    if (typeof value === "string") out[key] = value.slice(0, ARG_CHARS)
    else if (typeof value === "number" || typeof value === "boolean") out[key] = value
  }
  return out
}

function beat(event, tool, sessionID, callID, args) {
  try {
    const payload = { hook_event_name: event, session_id: String(sessionID ?? ""), tool_name: String(tool ?? ""),
                      tool_use_id: String(callID ?? ""), tool_input: small(args) }
    if (event === "tool.execute.before") started.set(callID, Date.now())
    else if (started.has(callID)) {
      payload.duration_ms = Date.now() - started.get(callID)
      started.delete(callID)
    }
    const child = spawn(COMMAND[0], COMMAND.slice(1), { detached: true, stdio: ["pipe", "ignore", "ignore"] })
    child.on("error", () => {})
    child.stdin.on("error", () => {})
    child.stdin.end(JSON.stringify(payload) + "\\n")
    child.unref()
  } catch {}
}

export const GenesisHeartbeat = async () => ({
  "tool.execute.before": async (input, output) => beat("tool.execute.before", input?.tool, input?.sessionID,
                                                      input?.callID, output?.args),
  "tool.execute.after": async (input) => beat("tool.execute.after", input?.tool, input?.sessionID, input?.callID,
                                              input?.args),
  event: async ({ event }) => {
    try {
      // A failed tool call calls no hook: its part's state says so.
      const part = event?.type === "message.part.updated" ? event.properties?.part : undefined
      if (part?.type === "tool" && part.state?.status === "error")
        beat("tool.execute.error", part.tool, part.sessionID, part.callID, part.state.input)
      const status = event?.type === "session.status" ? event.properties?.status : undefined
      if (JSON_RUN && status?.type === "retry")
        process.stdout.write(JSON.stringify({ type: "genesis_retry", timestamp: Date.now(),
          sessionID: event.properties.sessionID, attempt: status.attempt, message: status.message,
          next: status.next }) + "\\n")
    } catch {}
  },
})
"""


def config_dir(env: Mapping[str, str]) -> Path:
    """The folder opencode loads plugins from that the user chose: $OPENCODE_CONFIG_DIR when
    set, else its global config folder under $XDG_CONFIG_HOME (~/.config)."""
    if env.get("OPENCODE_CONFIG_DIR"):
        return Path(env["OPENCODE_CONFIG_DIR"])
    base = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else home_dir(env) / ".config"
    return base / "opencode"


def render(command: str) -> str:
    """The plugin's text for a hook command (`bash '<script>'`)."""
    argv = shlex.split(command)
    if not argv:
        raise ValueError("an empty hook command")
    return TEMPLATE.replace("__COMMAND__", json.dumps(argv, ensure_ascii=False))


def command_of(text: str) -> str | None:
    """The hook command a plugin of ours runs, or None when the text is not ours."""
    if not text.startswith(MARKER):
        return None
    found = COMMAND_LINE.search(text)
    try:
        argv = json.loads(found.group(1)) if found else None
    except ValueError:
        return None
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        return None
    return shlex.join(argv)


def has_sdk(folder: Path) -> bool:
    """Whether opencode will load plugins from `folder` without installing its SDK first: it
    installs when node_modules is missing or package-lock.json does not name the SDK."""
    try:
        lock = json.loads((folder / "package-lock.json").read_text())
    except (OSError, ValueError):
        return False
    root = lock.get("packages", {}).get("", {}) if isinstance(lock, dict) else {}
    deps = root.get("dependencies") if isinstance(root, dict) else None
    return (folder / "node_modules").is_dir() and isinstance(deps, dict) and "@opencode-ai/plugin" in deps


def same_command(a: str, b: str) -> bool:
    try:
        return shlex.split(a) == shlex.split(b)
    except ValueError:
        return False


class OpenCodePlugin(HookSpec):
    """`plugin/genesis-heartbeat.js` in opencode's config folder, a file wholly ours."""

    cli = "opencode"
    events = EVENTS
    post_event = AFTER

    def path(self, env: Mapping[str, str] | None = None) -> Path:
        return config_dir(os.environ if env is None else env) / "plugin" / FILE_NAME

    @property
    def trust(self) -> str:  # type: ignore[override]
        """Nothing to do; but until opencode has its plugin SDK, its next start fetches it."""
        folder = self.path().parent.parent
        return "" if has_sdk(folder) else (
            f"opencode fetches its plugin SDK (@opencode-ai/plugin) from the npm registry into {folder} at its "
            f"next start, once; offline it waits about 70 s for it at every start")

    def _read(self, path: Path) -> str | None:
        return read_owned(path)

    def install(self, path: Path, command: str, state_dir: Path, now: float | None = None) -> Change:
        """Write the plugin; a no-op when it is there as is. Another text at that name (an older
        Genesis's, or edited by hand) is backed up first."""
        changed, backup = write_owned(path, render(command), now)
        return Change(path, EVENTS if changed else (), (), backup, path.resolve() if path.is_symlink() else path)

    def uninstall(self, path: Path, state_dir: Path, now: float | None = None) -> Change:
        """Remove the plugin if it is ours; a file of that name that is not ours stays."""
        text = self._read(path)
        if text is None or command_of(text) is None:
            return Change(path, (), (), None)
        try:
            os.unlink(path)
        except OSError as exc:
            raise SettingsError(f"{path} cannot be removed ({exc.strerror}); {UNTOUCHED}") from None
        return Change(path, EVENTS, (), None)

    def installed_events(self, path: Path, command: str | None = None) -> list[str]:
        try:
            text = self._read(path)
        except SettingsError:
            return []
        found = command_of(text) if text is not None else None
        if found is None or (command is not None and not same_command(found, command)):
            return []
        return sorted(EVENTS)

    def installed_command(self, path: Path) -> str | None:
        """Our command, when the plugin is exactly as install writes it: an edited or older plugin
        may no longer beat (opencode skips a plugin that fails to load), so it counts as missing."""
        try:
            text = self._read(path)
        except SettingsError:
            return None
        command = command_of(text) if text is not None else None
        return command if command is not None and text == render(command) else None

    def payload(self, session: str, project: Path) -> bytes:
        """What the plugin writes on tool.execute.after (a self-test's: no tool input)."""
        return (json.dumps({"hook_event_name": AFTER, "session_id": session, "tool_name": "genesis-self-test",
                            "tool_use_id": "genesis-self-test", "tool_input": {}}) + "\n").encode()


OPENCODE_HOOKS = OpenCodePlugin()

"""A simulated agent that looks like Claude Code to the loop (for the demo and the tests).

Like `claude -p`, it reads hooks from the settings files Claude Code honours
(~/.claude/settings.json, .claude/settings.json, .claude/settings.local.json), fires
SessionStart, PreToolUse, PostToolUse / PostToolUseFailure, Stop and SessionEnd with
Claude-Code-shaped JSON on stdin and CLAUDE_* variables in the hook's environment, runs
each Bash tool command in its own session, and on SIGTERM ends the tool's session itself.

What it does in a phase comes from --script: comma-separated rules ITER:PHASE=ACTIONS,
first match wins, ITER a number or *, PHASE a name or *, ACTIONS joined by +:
  work    write a file and commit it         edit    change a file, no commit
  build   take the first open task in TASKS.md (`[ ]`, any list form), write a file for
          it, mark it `[?]` and commit       review  mark every `[?]` task `[x]`, commit
  server  start `python -m server.main` on --port in the background and leave it
  hang    a Bash call that hangs silently    idle    look around, change nothing
  fail    a Bash call that exits 3           exit:N  end with status N
  bash:C  run the Bash command C, %-encoded (%20 a space, %2C a comma, %2B a plus), as an
          agent that runs `git clean -fdx` or `pkill -f python` would
  slow:S  think for S seconds between calls
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.parse
import uuid
from pathlib import Path

from genesis.repo.tasks import DONE, OPEN, REVIEW, marked, parse

SETTINGS = (Path.home() / ".claude" / "settings.json", Path(".claude/settings.json"),
            Path(".claude/settings.local.json"))


class Agent:
    def __init__(self, port: int):
        self.session = str(uuid.uuid4())
        self.cwd = Path.cwd()
        self.port = port
        self.pause = 0.2
        self.tool: subprocess.Popen | None = None
        self.hooks = self._load_hooks()
        signal.signal(signal.SIGTERM, self._on_term)

    def _load_hooks(self) -> dict[str, list[tuple[str, dict]]]:
        found: dict[str, list[tuple[str, dict]]] = {}
        for path in SETTINGS:
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            for event, groups in (data.get("hooks") or {}).items():
                for group in groups if isinstance(groups, list) else []:
                    for hook in group.get("hooks", []):
                        if hook.get("type") == "command":
                            found.setdefault(event, []).append((group.get("matcher", ""), hook))
        return found

    def fire(self, event: str, **fields) -> None:
        payload = {"session_id": self.session,
                   "transcript_path": str(Path.home() / ".claude" / "projects" / "sim" / f"{self.session}.jsonl"),
                   "cwd": str(self.cwd), "permission_mode": "bypassPermissions", "hook_event_name": event,
                   **fields}
        env = {**os.environ, "CLAUDE_PID": str(os.getpid()), "CLAUDE_PROJECT_DIR": str(self.cwd),
               "CLAUDE_CODE_SESSION_ID": self.session, "CLAUDECODE": "1"}
        for matcher, hook in self.hooks.get(event, []):
            tool = fields.get("tool_name", "")
            if matcher not in ("", "*") and tool and not re.fullmatch(matcher, tool):
                continue
            try:
                subprocess.run(["/bin/sh", "-c", hook["command"]], input=json.dumps(payload).encode(),
                               env=env, cwd=self.cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               timeout=float(hook.get("timeout", 600)), start_new_session=True)
            except subprocess.TimeoutExpired:
                print(f"hook {event} timed out", flush=True)

    def call(self, tool: str, tool_input: dict, run) -> None:
        """One tool call with its hooks, as Claude Code makes it."""
        use_id = "toolu_" + uuid.uuid4().hex[:24]
        self.fire("PreToolUse", tool_name=tool, tool_input=tool_input, tool_use_id=use_id)
        print(f"[{tool}] {json.dumps(tool_input)[:100]}", flush=True)
        started = time.monotonic()
        ok, response = run()
        ms = int((time.monotonic() - started) * 1000)
        if ok:
            self.fire("PostToolUse", tool_name=tool, tool_input=tool_input, tool_response=response,
                      tool_use_id=use_id, duration_ms=ms)
        else:
            self.fire("PostToolUseFailure", tool_name=tool, tool_input=tool_input, tool_use_id=use_id,
                      error=response.get("stderr", "failed"), is_interrupt=False, duration_ms=ms)
        time.sleep(self.pause)

    def bash(self, command: str) -> None:
        def run():
            # Claude Code runs every Bash tool command in its own session.
            self.tool = subprocess.Popen(["/bin/bash", "-c", command], cwd=self.cwd, start_new_session=True,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
            out, err = self.tool.communicate()
            code, self.tool = self.tool.returncode, None
            return code == 0, {"stdout": out.decode(errors="replace"), "stderr": err.decode(errors="replace"),
                               "interrupted": False, "isImage": False}
        self.call("Bash", {"command": command, "description": command[:40]}, run)

    def write(self, rel: str, text: str) -> None:
        def run():
            path = self.cwd / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            return True, {"type": "create", "filePath": str(path)}
        self.call("Write", {"file_path": str(self.cwd / rel), "content": text}, run)

    def read(self, rel: str) -> None:
        def run():
            try:
                return True, {"file": {"content": (self.cwd / rel).read_text()[:200]}}
            except OSError as exc:
                return False, {"stderr": str(exc)}
        self.call("Read", {"file_path": str(self.cwd / rel)}, run)

    def _tasks(self) -> list[str]:
        self.read("TASKS.md")
        try:
            return (self.cwd / "TASKS.md").read_text().splitlines(keepends=True)
        except OSError:
            return []

    def build(self, phase: str, iteration: int) -> None:
        lines = self._tasks()
        task = next((t for t in parse("".join(lines)).items if t.state == OPEN), None)
        if task is None:
            return
        slug = re.sub(r"[^a-z0-9]+", "-", task.text.lower()).strip("-") or "task"
        self.write(f"work/{slug}.txt", f"{task.text}: built by the {phase} in iteration {iteration}\n")
        lines[task.line - 1] = marked(lines[task.line - 1], REVIEW) or lines[task.line - 1]
        self.write("TASKS.md", "".join(lines))
        self.bash(f"git add -A && git commit -qm 'build: {slug}'")

    def review(self) -> None:
        lines = self._tasks()
        built = [t.line - 1 for t in parse("".join(lines)).items if t.state == REVIEW]
        if not built:
            return
        for n in built:
            lines[n] = marked(lines[n], DONE) or lines[n]
        self.write("TASKS.md", "".join(lines))
        self.bash("git commit -qam 'verified the built tasks'")

    def _on_term(self, signum, _frame) -> None:
        if self.tool is not None:
            try:
                os.killpg(self.tool.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        self.fire("SessionEnd", reason="other")
        sys.exit(128 + signum)

    def perform(self, actions: list[str], phase: str, iteration: int) -> int:
        self.fire("SessionStart", source="startup")
        stamp = f"{phase.lower()}-{iteration}-{int(time.time() * 1000) % 100000}"
        for action in actions:
            name, _, arg = action.partition(":")
            if name == "slow":
                self.pause = float(arg or 1)
            elif name == "idle":
                self.read("README.md")
                self.bash("git status --short | head -5")
            elif name == "edit":
                self.write(f"work/{stamp}.txt", f"{phase} was here in iteration {iteration}\n")
            elif name == "work":
                self.read("README.md")
                self.write(f"work/{stamp}.txt", f"{phase} did iteration {iteration}\n")
                self.bash(f"git add -A && git commit -qm '{phase}: iteration {iteration}'")
            elif name == "build":
                self.build(phase, iteration)
            elif name == "review":
                self.review()
            elif name == "server":
                self.bash(f"nohup {sys.executable} -m server.main {self.port} >/dev/null 2>&1 &")
            elif name == "bash":
                self.bash(urllib.parse.unquote(arg))
            elif name == "fail":
                self.bash("echo before-fail; exit 3")
            elif name == "hang":
                self.bash(f"{sys.executable} -c 'import time; time.sleep(3600)'")
            elif name == "exit":
                return int(arg or 1)
            else:
                print(f"simagent: unknown action {action!r}", file=sys.stderr)
                return 2
        self.fire("Stop", stop_hook_active=False, last_assistant_message="done", background_tasks=[])
        self.fire("SessionEnd", reason="other")
        print(f"done: {phase} iteration {iteration} ({'+'.join(actions)})", flush=True)
        return 0


def choose(script: str, phase: str, iteration: int) -> list[str]:
    for rule in filter(None, (r.strip() for r in script.split(","))):
        where, _, actions = rule.partition("=")
        it, _, ph = where.partition(":")
        if it in ("*", str(iteration)) and ph in ("*", phase):
            return actions.split("+")
    return ["idle"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A simulated Claude Code for Genesis's demo and tests.")
    parser.add_argument("--script", default=os.environ.get("GENESIS_SIM_SCRIPT", "*:*=idle"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("GENESIS_SIM_PORT", "8080")))
    parser.add_argument("-p", "--print", dest="print_mode", action="store_true", help="ignored, as claude -p")
    parser.add_argument("prompt", nargs="?", default="")
    args, _unknown = parser.parse_known_args(argv)
    phase = os.environ.get("GENESIS_AGENT", "Agent")
    iteration = int(os.environ.get("GENESIS_ITERATION", "1") or 1)
    return Agent(args.port).perform(choose(args.script, phase, iteration), phase, iteration)


if __name__ == "__main__":
    sys.exit(main())

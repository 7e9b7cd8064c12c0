"""A real terminal for whole-loop tests: a tmux server of the test's own (its own socket)
holding one pane, as a user's terminal window would."""

from __future__ import annotations

import subprocess
import time
import uuid

INTERACTIVE = "bash --norc --noprofile -i"


class Terminal:
    """One pane running `command` (an interactive bash unless told otherwise)."""

    def __init__(self, env: dict[str, str], command: str = INTERACTIVE, width: int = 200, height: int = 50) -> None:
        self.socket = f"genesis-terminal-{uuid.uuid4().hex[:12]}"
        self.env = {k: v for k, v in env.items() if k != "TMUX"}  # never the developer's own tmux server
        self("new-session", "-d", "-s", "w", "-x", str(width), "-y", str(height), command)

    def __call__(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, *args], check=True, capture_output=True, text=True,
                              timeout=10, env=self.env).stdout

    def type(self, line: str) -> None:
        """Type a command line and press Enter."""
        self("send-keys", "-t", "w", "-l", line)
        self("send-keys", "-t", "w", "Enter")

    def screen(self) -> str:
        """Everything the pane showed (its history too), wrapped lines joined."""
        return self("capture-pane", "-p", "-J", "-S", "-500", "-t", "w")

    def until(self, predicate, what: str, timeout: float = 30.0) -> str:
        """The first screen the predicate accepts, within the deadline."""
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            if predicate(screen):
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; the screen:\n{screen}")
            time.sleep(0.1)

    def close(self) -> None:
        """The terminal closed: its server killed, the pane's processes hung up on."""
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, timeout=10, env=self.env)

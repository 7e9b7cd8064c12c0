"""The adapter interface and its records: what the loop asks of any agent CLI, answered here
for a plain text CLI (its output is its transcript, and nothing is read into it)."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path
    from typing import Mapping

    from genesis.agents.hook.selftest import HookCheck
    from genesis.agents.hook.spec import HookSpec
    from genesis.phases import Phase

__all__ = ["Account", "Adapter", "ApiError", "ApiRetry", "Ending", "Limit", "OutputReader", "Result", "TextReader",
           "MAX_RESULT_CHARS", "MODEL_CHARS", "PERMISSION_REFUSED", "REFUSAL", "last_line", "key_fingerprint", "Login",
           "LOGGED_IN", "LOGGED_OUT", "LOGIN_UNKNOWN"]

MAX_RESULT_CHARS = 16 << 10  # the final result kept for the report and the completion phrase
MODEL_CHARS = 100            # a model's name as a CLI's record gives it, at most
# ApiError.code of a refusal by the model's safeguards: the same request would be refused again.
REFUSAL = "refusal"
LOGGED_IN, LOGGED_OUT, LOGIN_UNKNOWN = "yes", "no", "unknown"
# ApiError.code of a tool call the CLI refused because it needs an approval nobody is there to
# give: a configuration of the agent command that no retry changes (its message says the fix).
PERMISSION_REFUSED = "permission_refused"


@dataclass(frozen=True)
class Limit:
    """A usage limit: the agent refuses to work until it resets."""
    resets_at: float | None      # epoch seconds; None when the message names no time
    kind: str                    # "five_hour", "seven_day", "session", "extra_usage", ... ("" unknown)
    message: str                 # the agent's own words


@dataclass(frozen=True)
class Account:
    """Whose usage a limit counts against: the CLI, its own folder (where its login lives) and
    the API key its environment gives it, as a fingerprint (never the key). None: not known."""
    cli: str
    home: str | None             # the CLI's folder, absolute; "" when the CLI has none
    key: str | None              # key_fingerprint(); "" when no key variable is set

    def binds(self, other: "Account") -> bool:
        """Whether a limit met by this account also holds for `other`: the same CLI, and the same
        folder and key, or a part of this account that is not known."""
        return (self.cli == other.cli and self.home in (None, other.home) and self.key in (None, other.key))

    def describe(self) -> str:
        """The account in words: its folder and its key's fingerprint."""
        if self.home is None and self.key is None:
            return "account unknown"
        parts = [f"config {self.home}" if self.home else "no config folder" if self.home == "" else "",
                 f"key {self.key}" if self.key else "no API key set" if self.key == "" else ""]
        return "; ".join(p for p in parts if p)


@dataclass(frozen=True)
class Login:
    """Whether the CLI has a login, as far as its environment and its files tell (no network call)."""
    state: str                   # LOGGED_IN | LOGGED_OUT | LOGIN_UNKNOWN
    found: str                   # in words: what was found, or what was looked for


def key_fingerprint(env: "Mapping[str, str]", names: tuple[str, ...]) -> str:
    """The variables of `names` set in env and a short hash of their values (it tells two keys
    apart and gives nothing of either away); "" when none is set."""
    found = [name for name in names if env.get(name)]
    if not found:
        return ""
    digest = hashlib.sha256("\0".join(f"{name}={env[name]}" for name in found).encode()).hexdigest()[:12]
    return f"{'+'.join(found)}#{digest}"


@dataclass(frozen=True)
class ApiError:
    """The model API failed the agent's run."""
    retryable: bool              # True: an outage or transient error (back off, retry); False: fatal (stop)
    status: int | None           # the HTTP status, when known
    code: str                    # the CLI's name for it: "server_error", "authentication_failed", ...
    message: str                 # the agent's own message


@dataclass(frozen=True)
class Result:
    """What the agent reported at the end of its run (Claude Code's `result` record)."""
    subtype: str = ""
    is_error: bool = False
    num_turns: int | None = None
    total_cost_usd: float | None = None
    terminal_reason: str = ""
    api_error_status: int | None = None
    session_id: str = ""
    text: str = ""               # the final result text, at most MAX_RESULT_CHARS
    input_tokens: int | None = None   # prompt tokens, cache reads and writes included
    output_tokens: int | None = None
    model: str = ""              # the model the run used, as the CLI's own records name it ("": not named)


@dataclass(frozen=True)
class Ending:
    """What the agent's output says about how its run ended."""
    result: Result | None = None
    limit: Limit | None = None
    api_error: ApiError | None = None
    final_text: str = ""         # the agent's final message (never tool output): for a completion phrase

    @classmethod
    def of(cls, found: "Limit | ApiError | None", result: Result | None = None, final_text: str = "") -> "Ending":
        """The ending whose trouble is `found`, a usage limit or an API error (or neither)."""
        return cls(result=result, limit=found if isinstance(found, Limit) else None,
                   api_error=found if isinstance(found, ApiError) else None, final_text=final_text)


@dataclass(frozen=True)
class ApiRetry:
    """The CLI is inside its own API retries: it waits `delay` seconds, then tries again."""
    attempt: int
    max_retries: int
    delay: float
    status: int | None
    error: str
    seen: float                  # when it was read, on the watcher's monotonic clock


class OutputReader:
    """Reads an agent's output line by line (in the output thread, while the agent runs)."""

    retry: ApiRetry | None = None  # the latest event, while nothing else came after it
    turns: int | None = None       # the model's turns so far, when the output tells
    hopeless: ApiError | Limit | None = None  # the CLI keeps retrying what no retry of its own can fix (a
    #                                           fatal error, or a usage limit hours away): end it now
    result_at: float | None = None  # when its final result was read (the watcher's monotonic clock), while no
    #                                 turn has started since; None: no result yet
    background: tuple[str, ...] = ()  # the work it left running in the background (commands, sub-agents), by name
    wakeup_at: float | None = None  # when the wake-up it scheduled itself is due (the watcher's monotonic clock);
    #                                 None: none pending
    speaks_first = False           # its output starts within seconds, before any model call (a silent start is a hang)

    def feed(self, line: str) -> list[str]:
        """The transcript lines for one line of output (given without its newline)."""
        raise NotImplementedError

    def ending(self, returncode: int | None) -> Ending:
        """How the run ended, read from everything fed; returncode None: it was killed."""
        raise NotImplementedError


class TextReader(OutputReader):
    """Plain text output: the transcript is the output itself; its last line is its final message."""

    def __init__(self) -> None:
        self.last = ""

    def feed(self, line: str) -> list[str]:
        if line.strip():
            self.last = line.strip()[:MAX_RESULT_CHARS]
        return [line]

    def ending(self, returncode: int | None) -> Ending:
        return Ending(final_text=self.last if returncode == 0 else "")


def _filled(path: "Path") -> bool:
    """A regular file with something in it."""
    try:
        return path.is_file() and path.stat().st_size > 0
    except OSError:
        return False


def read_config(path: "Path", most: int = 1 << 20) -> str | None:
    """A CLI's own config file's text, at most `most` bytes (a larger one is not read), or None."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(most + 1)
    except (OSError, ValueError):
        return None
    return data.decode("utf-8", "replace") if len(data) <= most else None


def last_line(text: str) -> str:
    return next((line.strip() for line in reversed(text.splitlines()) if line.strip()), "")


class Adapter:
    """A text CLI without hooks: the command as configured, its output as its transcript.

    Subclasses (one per CLI Genesis knows, and the generic CLI) add the flags that make the
    output structured, read it into events, and install and check their own hooks.
    """

    name = ""                    # GENESIS_AGENT_CLI's value for it
    program = ""                 # the executable's name this adapter is chosen by
    version = ""                 # the version the test suite drives
    prompt_on_stdin = False      # the CLI reads its prompt from stdin when none is given
    hook_required = False        # without a working hook, refuse to start (else warn)
    home_var = ""                # the variable that moves the CLI's own folder (and its login) elsewhere
    key_vars: tuple[str, ...] = ()   # the variables the CLI reads an API key or token from
    install = ""                 # the command that installs the CLI
    login_command = ""           # the command that logs it in
    login_files: tuple[str, ...] = ()  # files in its own folder (home) that hold a login
    api_hosts: tuple[str, ...] = ()  # where its API and login are reached: the box's allow-list (allowlist.py)
    base_url_vars: tuple[str, ...] = ()  # variables that point it at another API endpoint, allowed too

    @property
    def hooks(self) -> "HookSpec | None":
        """How its heartbeat hook is installed; None: it has none."""
        return None

    def hook_check(self, project: "Path", env: "Mapping[str, str]", heartbeat: "Path") -> "HookCheck | None":
        """Run the installed hook as the CLI would and see that its beat lands; None: no hooks."""
        if self.hooks is None:
            return None
        from genesis.agents.hook.selftest import spec_self_test
        return spec_self_test(self.hooks, project, env, heartbeat)

    def home(self, env: "Mapping[str, str]") -> "Path | None":
        """The CLI's own folder, where its login lives; None: it has none."""
        return None

    def box_paths(self, env: "Mapping[str, str]") -> "tuple[Path, ...]":
        """What of HOME the box's private HOME keeps for the CLI, writable: its own folder (its
        config and login) and any other file it keeps there. Its key variables pass too."""
        home = self.home(env)
        return (home,) if home is not None else ()

    def network_hosts(self, env: "Mapping[str, str]") -> "tuple[str, ...]":
        """What the box's allow-list lets the CLI reach: its API hosts, and the URL each of its
        base-URL variables names (a stub or a gateway it is configured with)."""
        return self.api_hosts + tuple(env[name] for name in self.base_url_vars if env.get(name))

    def box_keys(self, env: "Mapping[str, str]") -> "tuple[str, ...]":
        """The variables holding its key that pass into the box: its key variables."""
        return self.key_vars

    def account(self, env: "Mapping[str, str]") -> Account:
        """The account a run with this environment uses: a usage limit belongs to it."""
        home = self.home(env)
        return Account(self.name, os.path.abspath(home) if home is not None else "",
                       key_fingerprint(env, self.key_vars))

    def login(self, env: "Mapping[str, str]", project: "Path | None" = None) -> Login:
        """Its login from a key variable or a login file; without either it may still log in
        another way (a keychain, a provider's own login): then Genesis cannot tell."""
        keys = [name for name in self.key_vars if env.get(name)]
        if keys:
            return Login(LOGGED_IN, f"{' and '.join(keys)} set")
        home = self.home(env)
        for name in self.login_files if home is not None else ():
            if _filled(home / name):
                return Login(LOGGED_IN, f"logged in ({home / name})")
        files = f", no {' or '.join(str(home / n) for n in self.login_files)}" if home and self.login_files else ""
        keys_said = f"none of {', '.join(self.key_vars)} set" if self.key_vars else "no key variable it reads"
        return Login(LOGIN_UNKNOWN, f"cannot tell: {keys_said}{files}; it may log in another way")

    def environment(self) -> dict[str, str]:
        """Variables the CLI needs to run unattended; the loop sets each only where the user did not."""
        return {}

    def command(self, argv: tuple[str, ...], phase: "Phase | None" = None) -> tuple[str, ...]:
        """The command line of a phase; the prompt is appended as its last argument."""
        return tuple(argv)

    def raw_suffix(self, argv: tuple[str, ...]) -> str | None:
        """The suffix of the raw output file kept beside the transcript; None: the output is
        its own transcript."""
        return None

    def reader(self, argv: tuple[str, ...], clock=None) -> OutputReader:
        """A fresh reader for one run of `argv` (the command as command() made it)."""
        return TextReader()

    def options_problem(self, argv: tuple[str, ...], phase: "Phase") -> str | None:
        """Why a phase's per-CLI options cannot apply to this CLI, or None."""
        if phase.max_turns is not None or phase.max_budget_usd is not None:
            return (f"PHASE_{phase.name}_MAX_TURNS and _MAX_BUDGET_USD are Claude Code options; "
                    f"{argv[0]} does not take them: unset them")
        return None

"""aider: `aider --yes-always --message PROMPT`, its plain-text output, and no hooks.

aider fires no hook per tool call: it sends no tools to the model at all, applies the edits
the model writes in its edit format, and runs only the commands it is given (`--test-cmd`
with `--auto-test`, `--lint-cmd`) in its own process group; a shell command the model
suggests is never run unattended. Its output, streamed as the model writes, is its only
sign of life, so a long silent model call or a long silent test command looks like a hang.

Its output is shown as it is, and read line by line for the lines aider's own code prints
(the model's text and a command's output share the stream: an error line quoted in a reply
is followed by that reply's Tokens line, which says the API answered, so it is not taken):
- after each reply, `Tokens: 1.2k sent, 50 received. Cost: $0.01 message, $0.02 session.`
  (the cost only when it knows the model's prices; the session's total is the run's cost);
- a failed model call, in litellm's words and wrapped at 80 columns:
  `litellm.RateLimitError: RateLimitError: OpenAIException - <the provider's message>`,
  often followed by aider's own sentence on it, then `Retrying in 0.5 seconds...` while it
  retries (from 0.25 s, doubling, while the delay stays within 60 s: 8 retries, each try
  three requests as its HTTP client retries twice quietly; two minutes in all against a
  stub); it then gives up, and still exits 0.
A usage limit is a rate limit whose message says when to try again ("Please try again in
6m0s"); OpenAI's `insufficient_quota` (no credit left) and "Insufficient credits" are
billing errors no retry fixes, read as fatal at aider's first retry.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from genesis.agents.hook.spec import home_dir

from genesis.agents.base import MAX_RESULT_CHARS, Adapter, ApiError, ApiRetry, Ending, Limit, OutputReader, Result

if TYPE_CHECKING:
    from typing import Mapping

    from genesis.phases import Phase

__all__ = ["Aider", "AiderReader", "classify", "wait_of"]

MESSAGE_FLAGS = ("--message", "-m", "--msg")
# The flags an unattended run needs, each added unless the command names it or its opposite.
UNATTENDED = (
    (("--yes-always",), "--yes-always"),
    (("--pretty", "--no-pretty"), "--no-pretty"),            # plain text: no colours, no markdown boxes
    (("--check-update", "--no-check-update"), "--no-check-update"),
    (("--show-release-notes", "--no-show-release-notes"), "--no-show-release-notes"),
    (("--analytics", "--no-analytics", "--analytics-disable"), "--no-analytics"),
    # Genesis commits each phase's work under its own name (partial work too); aider's own
    # commits would each cost a model call for the message.
    (("--auto-commits", "--no-auto-commits"), "--no-auto-commits"),
)

# aider's retries of a failed model call: from 0.25 s, doubling, while the delay stays within
# 60 s (its RETRY_TIMEOUT): 0.5, 1, 2, 4, 8, 16, 32 and the first 0.25.
MAX_RETRIES = 8
RETRY_SPAN = 120.0  # seconds aider's own retries last at most (its backoff, measured)

ERROR_HEAD = re.compile(r"litellm\.(?P<name>\w+): (?:(?P=name): )?(?P<message>.*)")
RETRYING = re.compile(r"Retrying in (?P<delay>\d+(?:\.\d+)?) seconds\.\.\.")
TOKENS = re.compile(r"Tokens: (?P<sent>[\d.]+k?) sent(?:, [\d.]+k? cache write)?(?:, [\d.]+k? cache hit)?, "
                    r"(?P<received>[\d.]+k?) received\.(?P<rest>.*)")
COST = re.compile(r"Cost: \$(?P<message>[\d.]+) message, \$(?P<session>[\d.]+) session\.")
ADDED_OUTPUT = re.compile(r"Added \d+ lines? of output to the chat\.")
# aider's own sentences after an error it knows (aider/exceptions.py, 0.86).
DESCRIPTIONS = frozenset((
    "The API provider is not able to authenticate you. Check your API key.",
    "The API provider's servers are down or overloaded.",
    "The API provider has refused the request due to a safety policy about the content.",
    "The API provider was unable to fetch one or more images.",
    "The API provider has rate limited you. Try again later or check your quotas.",
    "The API provider timed out without returning a response. They may be down or overloaded.",
    "Insufficient credits with the API provider. Please add credits.",
    "You need to: pip install boto3",
    "OpenRouter or the upstream API provider is down, overloaded or rate limiting your requests.",
))

# The provider's words for an account with no credit left: no wait brings it back.
NO_CREDIT = (("exceeded your current quota", "check your plan and billing"), ("insufficient credits",))
# "Please try again in 6m0s", "try again in 20s", "in 120ms", "Please retry after 7 seconds".
WAIT = re.compile(r"(?:try again|retry) (?:in|after) (?P<wait>(?:\d+(?:\.\d+)?(?:ms|h|m|s))+"
                  r"|\d+(?:\.\d+)? ?(?:seconds?|secs?|minutes?|mins?|hours?)\b)", re.IGNORECASE)
WAIT_PART = re.compile(r"(\d+(?:\.\d+)?) ?(ms|h|m|s|seconds?|secs?|minutes?|mins?|hours?)", re.IGNORECASE)
UNIT = {"ms": 0.001, "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1, "m": 60, "min": 60, "mins": 60,
        "minute": 60, "minutes": 60, "h": 3600, "hour": 3600, "hours": 3600}

# litellm's exception names (as aider prints them): (retryable, HTTP status, Genesis's code).
ERRORS = {
    "AuthenticationError": (False, 401, "authentication_failed"),
    "PermissionDeniedError": (False, 403, "permission_denied"),
    "NotFoundError": (False, 404, "model_not_found"),
    "BadRequestError": (False, 400, "invalid_request"),
    "UnprocessableEntityError": (False, 422, "invalid_request"),
    "RateLimitError": (True, 429, "rate_limit"),
    "InternalServerError": (True, 500, "server_error"),
    "BadGatewayError": (True, 502, "server_error"),
    "ServiceUnavailableError": (True, 503, "overloaded"),
    "Timeout": (True, None, "timeout"),
    "APIConnectionError": (True, None, "connection_failed"),
    "APIError": (True, None, "server_error"),
}


def present(argv: tuple[str, ...], names: tuple[str, ...]) -> bool:
    return any(arg in names or arg.split("=", 1)[0] in names for arg in argv)


def wait_of(message: str) -> float | None:
    """Seconds the provider says to wait before trying again, or None when it names no wait."""
    found = WAIT.search(message)
    if found is None:
        return None
    return sum(float(n) * UNIT[unit.lower()] for n, unit in WAIT_PART.findall(found.group("wait")))


def classify(name: str, message: str, now: float, said: str = "") -> Limit | ApiError | None:
    """What a failed model call aider gave up on means for the loop, or None when it is not
    the API's (a content refusal, say: a fresh run may go another way). `said` is aider's
    whole line for it."""
    said = said or f"litellm.{name}: {message}"
    words = message.lower()
    if any(all(part in words for part in parts) for parts in NO_CREDIT):
        return ApiError(False, 429 if name == "RateLimitError" else 402, "billing_error", said)
    if name == "RateLimitError":
        wait = wait_of(message)
        if wait is not None:
            return Limit(resets_at=now + wait, kind="rate_limit", message=said)
    if name not in ERRORS:
        return None
    retryable, status, code = ERRORS[name]
    if name == "InternalServerError" and "connection error" in words:
        status, code = None, "connection_failed"   # litellm's name for an API that did not answer
    return ApiError(retryable, status, code, said)


def tokens(value: str) -> int:
    """aider's rounded count: "595", "1.2k", "12k"."""
    return round(float(value[:-1]) * 1000) if value.endswith("k") else int(float(value))


class AiderReader(OutputReader):
    """One run's output: shown as it is; read for replies, their tokens and cost, and errors."""

    def __init__(self, mono: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self.mono, self.wall = mono, wall
        self.retry: ApiRetry | None = None
        self.turns = 0
        self.sent = self.received = 0
        self.cost: float | None = None
        self.reply = ""                 # the latest reply's text (the lines before its Tokens line)
        self._lines: list[str] = []     # the lines since the last of aider's own
        self._block: list[str] | None = None   # an error being read (it may be wrapped over lines)
        self._error: tuple[str, str, float, str] | None = None  # the last failed call: name, message, when, line
        self._attempt = 0

    def feed(self, line: str) -> list[str]:
        said = line.strip()
        if self._block is not None:
            if said and not self._ends_block(said):
                self._block.append(line.rstrip("\n"))
                return [line]
            self._close_block()
        head = ERROR_HEAD.fullmatch(said)
        if head and "Exception - " in said:
            self._block = [said]
            return [line]
        if self._error is not None and said in DESCRIPTIONS:
            return [line]
        if (retrying := RETRYING.fullmatch(said)) and self._error is not None:
            self._retrying(float(retrying.group("delay")))
            return [line]
        if said:
            self.retry = None
        if (used := TOKENS.fullmatch(said)) is not None:
            self._reply(used)
        elif (cost := COST.fullmatch(said)) is not None:
            self.cost = float(cost.group("session"))
        elif ADDED_OUTPUT.fullmatch(said) or said.startswith("Repo-map:"):
            self._lines = []
        elif said or self._lines:
            self._lines.append(line)
        return [line]

    def _ends_block(self, said: str) -> bool:
        return bool(said in DESCRIPTIONS or RETRYING.fullmatch(said) or ERROR_HEAD.fullmatch(said)
                    or TOKENS.fullmatch(said))

    def _close_block(self) -> None:
        """An error read to its end: rich wraps at spaces, keeping the space at a break it made
        within the width and dropping it at a break right at the width."""
        text = ""
        for part in self._block or []:
            text += part if not text or text.endswith(" ") else " " + part
        head = ERROR_HEAD.fullmatch(text.strip())
        self._block = None
        self._lines = []
        if head is not None:
            self._error = (head.group("name"), head.group("message").strip(), self.wall(), text.strip())

    def _retrying(self, delay: float) -> None:
        name, message, _, said = self._error
        self._attempt += 1
        _, status, _ = ERRORS.get(name, (True, None, ""))
        self.retry = ApiRetry(attempt=self._attempt, max_retries=MAX_RETRIES, delay=delay, status=status,
                              error=name, seen=self.mono())
        found = classify(name, message, self.wall(), said)
        if self.hopeless is not None:
            return
        if isinstance(found, ApiError) and found.code == "billing_error":
            self.hopeless = found   # aider would retry it for two minutes in vain
        elif isinstance(found, Limit) and found.resets_at is not None and found.resets_at - self.wall() > RETRY_SPAN:
            self.hopeless = found   # a limit past aider's own retries: wait it out the loop's way

    def _reply(self, used: re.Match[str]) -> None:
        """A reply came: its tokens and cost; the API answered, so an earlier error is over."""
        self.turns += 1
        self.sent += tokens(used.group("sent"))
        self.received += tokens(used.group("received"))
        if (cost := COST.search(used.group("rest"))) is not None:
            self.cost = float(cost.group("session"))
        self.reply = "\n".join(part.rstrip() for part in self._lines).strip()[:MAX_RESULT_CHARS]
        self._lines = []
        self._error, self._attempt = None, 0

    def ending(self, returncode: int | None) -> Ending:
        if self._block is not None:
            self._close_block()
        found = classify(*self._error) if self._error is not None else None
        limit = found if isinstance(found, Limit) else None
        api_error = found if isinstance(found, ApiError) else None
        failed = self._error is not None or returncode != 0
        result = None
        if self.turns or self._error is not None:
            result = Result(subtype="error" if failed else "success", is_error=failed, num_turns=self.turns,
                            total_cost_usd=self.cost, api_error_status=api_error.status if api_error else None,
                            text=self.reply if not failed else "", input_tokens=self.sent if self.turns else None,
                            output_tokens=self.received if self.turns else None)
        return Ending(result=result, limit=limit, api_error=api_error,
                      final_text=self.reply if returncode == 0 and self._error is None else "")


class Aider(Adapter):
    name = "aider"
    program = "aider"
    version = "0.86.2"
    hooks = None                 # no per-tool-call hook: its output is its sign of life
    hook_required = False
    # No folder of its own: its keys come from the environment (or a .env aider reads itself).
    key_vars = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "OPENROUTER_API_KEY", "DEEPSEEK_API_KEY")
    api_hosts = ("api.openai.com", "api.anthropic.com", "generativelanguage.googleapis.com", "openrouter.ai",
                 "api.deepseek.com")
    base_url_vars = ("OPENAI_API_BASE", "AIDER_OPENAI_API_BASE", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL",
                     "AIDER_ANTHROPIC_API_BASE", "OPENROUTER_API_BASE")
    install = "pipx install aider-chat"

    def box_paths(self, env: Mapping[str, str]) -> tuple[Path, ...]:
        """Its settings and caches in HOME (~/.aider.conf.yml, ~/.aider/ and the like)."""
        home = home_dir(env)
        return (home / ".aider", home / ".aider.conf.yml", home / ".aider.model.settings.yml",
                home / ".aider.model.metadata.json")

    def command(self, argv: tuple[str, ...], phase: "Phase | None" = None) -> tuple[str, ...]:
        """The unattended flags the command lacks, then `--message` (the prompt follows it)."""
        argv = tuple(argv)
        head, tail = (argv[:-1], argv[-1:]) if argv[-1:] and argv[-1] in MESSAGE_FLAGS else (argv, ("--message",))
        added = tuple(flag for names, flag in UNATTENDED if not present(argv, names))
        return head + added + tail

    def environment(self) -> dict[str, str]:
        # aider offers to open a URL from an error or a model warning, and --yes-always accepts:
        # no browser tab (or console browser waiting on a terminal) at night.
        return {"BROWSER": "true"}

    def reader(self, argv: tuple[str, ...], clock=None) -> OutputReader:
        return AiderReader(clock.mono, clock.wall) if clock is not None else AiderReader()

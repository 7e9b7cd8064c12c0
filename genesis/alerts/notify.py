"""Telling the operator: desktop, webhook (Slack-compatible), ntfy and a command, each try
bounded, failed tries retried after a short backoff, every channel in its own thread so a
slow one never holds up the others.

No error message names a URL: a webhook's URL is itself a secret (Slack's are), and the
errors go to the ledger.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import shutil
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Callable, Collection, Mapping

from genesis.alerts.bounded import run_bounded
from genesis.alerts.channels import configured
from genesis.alerts.message import ntfy_headers, safe_ticket, slack_payload, text, title
from genesis.alerts.settings import AlertSettings
from genesis.alerts.tickets import Ticket

__all__ = ["Channel", "Failed", "Told", "channels_for", "deliver", "tell", "post", "send_seconds"]

MAX_RESPONSE = 64 << 10
USER_AGENT = "genesis-alerts"
URGENCY = {"low": "low", "medium": "normal", "high": "critical", "critical": "critical"}


class Failed(Exception):
    """One try failed; `retry`: whether another try may succeed (a 4xx will not)."""

    def __init__(self, message: str, retry: bool = True):
        super().__init__(message)
        self.retry = retry


@dataclass(frozen=True)
class Told:
    """What became of one ticket: the channels that took it, those that failed (with why) and
    those skipped because the ticket is below their minimum severity (with why)."""
    delivered: tuple[str, ...]
    failed: Mapping[str, str]
    skipped: Mapping[str, str]


@dataclass(frozen=True)
class Channel:
    name: str
    send: Callable[[Ticket, float], None]   # (ticket, timeout): returns when delivered, raises Failed


# --- HTTP -------------------------------------------------------------------------------

class _SameScheme(urllib.request.HTTPRedirectHandler):
    """Follows only 307/308 (which keep the POST and its body) to the same scheme; any other
    redirect is an error, never a silent downgrade to http or a body dropped by a GET."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        old, new = urllib.parse.urlsplit(req.full_url), urllib.parse.urlsplit(newurl)
        if code not in (307, 308) or new.scheme != old.scheme:
            return None
        keep = {k: v for k, v in req.headers.items()  # set by us: not Host, not Content-Length
                if k.lower() != "authorization" or new.netloc == old.netloc}  # credentials stay with their host
        return urllib.request.Request(newurl, data=req.data, headers=keep, method=req.get_method())


_OPENER = urllib.request.build_opener(_SameScheme)


def post(url: str, body: bytes, headers: Mapping[str, str], timeout: float) -> int:
    """POST body; the status of a 2xx answer, else Failed (retry for 5xx, 408, 429 and
    network errors). Credentials in the URL go into a Basic Authorization header."""
    parts = urllib.parse.urlsplit(url)
    headers = {"User-Agent": USER_AGENT, **headers}
    if parts.username is not None or parts.password is not None:
        pair = f"{urllib.parse.unquote(parts.username or '')}:{urllib.parse.unquote(parts.password or '')}"
        headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode("ascii")
        host = parts.hostname or ""
        netloc = (f"[{host}]" if ":" in host else host) + (f":{parts.port}" if parts.port else "")
        url = urllib.parse.urlunsplit(parts._replace(netloc=netloc))
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with _OPENER.open(request, timeout=timeout) as answer:
            answer.read(MAX_RESPONSE)
            return answer.status
    except urllib.error.HTTPError as exc:
        code = exc.code
        exc.close()
        if 300 <= code < 400:
            raise Failed(f"HTTP {code}: a redirect that is not followed (only 307/308 to the same scheme); "
                         f"set the final URL", retry=False) from None
        raise Failed(f"HTTP {code}", retry=code >= 500 or code in (408, 429)) from None
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, TimeoutError) or "timed out" in str(reason):
            raise Failed(f"no answer within {timeout:g}s") from None
        raise Failed(f"could not connect ({getattr(reason, 'strerror', None) or reason})") from None
    except TimeoutError:
        raise Failed(f"no answer within {timeout:g}s") from None
    except (OSError, http.client.HTTPException, ValueError) as exc:
        raise Failed(f"the exchange failed ({type(exc).__name__}: {getattr(exc, 'strerror', None) or exc})") \
            from None


# --- channels -----------------------------------------------------------------------------

def _webhook(url: str, env: Mapping[str, str], actions_url: str | None = None) -> Channel:
    def send(ticket: Ticket, timeout: float) -> None:
        from genesis.actions.alerting import links_for  # reads the configuration: only a delivery with links pays for it

        payload = slack_payload(ticket, env)
        links = links_for(ticket, actions_url, env)
        if links:  # a link each: it opens the dashboard's page for that action, whose one button does it
            payload["genesis"]["actions"] = links
            payload["blocks"].append({"type": "actions", "elements": [
                {"type": "button", "text": {"type": "plain_text", "text": link["label"]}, "url": link["url"]}
                for link in links]})
        body = json.dumps(payload).encode()
        post(url, body, {"Content-Type": "application/json; charset=utf-8"}, timeout)

    return Channel("webhook", send)


def _ntfy(url: str, env: Mapping[str, str], actions_url: str | None = None) -> Channel:
    def send(ticket: Ticket, timeout: float) -> None:
        from genesis.actions.alerting import links_for, ntfy_actions  # as in _webhook

        links = links_for(ticket, actions_url, env)
        post(url, text(ticket, env).encode(), {"Content-Type": "text/plain; charset=utf-8",
                                               **ntfy_headers(ticket, env),
                                               **({"Actions": ntfy_actions(links)} if links else {})}, timeout)

    return Channel("ntfy", send)


def _run(argv: list[str], stdin: bytes, env: Mapping[str, str], timeout: float, what: str) -> None:
    done = run_bounded(argv, stdin, env, timeout)
    if done.error:
        raise Failed(done.error, retry=False)
    if done.returncode is None:
        raise Failed(f"{what} did not finish within {timeout:g}s")
    if done.returncode != 0:
        raise Failed(f"{what} exited with status {done.returncode}")


def _command(argv: tuple[str, ...], env: Mapping[str, str]) -> Channel:
    def send(ticket: Ticket, timeout: float) -> None:
        data = json.dumps(safe_ticket(ticket, env)).encode()
        extra = {"GENESIS_ALERT_SEVERITY": ticket.severity, "GENESIS_ALERT_TEXT": text(ticket, env)}
        _run(list(argv), data, {**env, **extra}, timeout, f"the notify command {os.path.basename(argv[0])}")

    return Channel("command", send)


def _desktop(tool: str | None, platform: str, env: Mapping[str, str]) -> Channel:
    def send(ticket: Ticket, timeout: float) -> None:
        if tool is None:
            want = "osascript" if platform == "darwin" else "notify-send"
            raise Failed(f"{want} not found on PATH (GENESIS_NOTIFY_DESKTOP=true)", retry=False)
        head, body = title(ticket, env), text(ticket, env)
        if platform == "darwin":  # the texts go in as arguments, never into the script's source
            argv = [tool, "-e", "on run argv", "-e",
                    "display notification (item 2 of argv) with title (item 1 of argv)", "-e", "end run", head, body]
        else:
            argv = [tool, "--app-name=Genesis", f"--urgency={URGENCY[ticket.severity]}", "--", head, body]
        _run(argv, b"", env, timeout, os.path.basename(tool))

    return Channel("desktop", send)


def send_seconds(settings: AlertSettings) -> float:
    """How long every try of a channel may take, with the pauses between them (channels run
    side by side, so this bounds them all)."""
    pauses = sum(settings.backoff[min(i, len(settings.backoff) - 1)] for i in range(settings.retries))
    return settings.timeout * (settings.retries + 1) + pauses


def channels_for(settings: AlertSettings, env: Mapping[str, str] | None = None,
                 which: Callable[..., str | None] = shutil.which, platform: str = sys.platform) -> list[Channel]:
    """The configured channels that can send (channels.configured). Desktop `auto` needs the
    tool and a desktop session; `true` without the tool is a channel that fails, saying so."""
    env = dict(os.environ if env is None else env)
    found: list[Channel] = []
    for state in configured(settings, env, which, platform):
        if state.off:
            continue
        if state.name == "desktop":
            found.append(_desktop(state.tool, platform, env))
        elif state.name == "webhook" and settings.webhook:
            found.append(_webhook(settings.webhook, env, settings.actions_url))
        elif state.name == "ntfy" and settings.ntfy:
            found.append(_ntfy(settings.ntfy, env, settings.actions_url))
        elif state.name == "command" and settings.command:
            found.append(_command(settings.command, env))
    return found


# --- delivery -----------------------------------------------------------------------------

def _tries(channel: Channel, ticket: Ticket, settings: AlertSettings, deadline: float,
           sleep: Callable[[float], None]) -> str | None:
    """None once delivered, else the last error (with how many tries it took)."""
    tries = settings.retries + 1
    error = "not tried: no time left"
    for attempt in range(tries):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        try:
            channel.send(ticket, min(settings.timeout, left))
            return None
        except Failed as exc:
            error = str(exc) + (f" (try {attempt + 1} of {tries})" if tries > 1 else "")
            if not exc.retry:
                break
        except Exception as exc:  # a channel's bug must not cost the others
            error = f"{type(exc).__name__}: {exc}"
            break
        if attempt + 1 < tries:
            pause = settings.backoff[min(attempt, len(settings.backoff) - 1)]
            if time.monotonic() + pause >= deadline:
                break
            sleep(pause)
    return error


def deliver(ticket: Ticket, channels: list[Channel], settings: AlertSettings, deadline: float,
            sleep: Callable[[float], None] = time.sleep) -> tuple[list[str], dict[str, str]]:
    """(channels that delivered, {channel: error}), every channel tried in parallel until
    `deadline` (monotonic); one still trying then counts as failed."""
    results: dict[str, str | None] = {}

    def attempt(channel: Channel) -> None:
        results[channel.name] = _tries(channel, ticket, settings, deadline, sleep)

    threads = [(c, threading.Thread(target=attempt, args=(c,), daemon=True, name=f"notify-{c.name}"))
               for c in channels]
    for _, thread in threads:
        thread.start()
    for _, thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    delivered = [c.name for c, _ in threads if c.name in results and results[c.name] is None]
    failed = {c.name: results.get(c.name) or "still trying at the deliverer's deadline"
              for c, _ in threads if c.name not in delivered}
    return delivered, failed


def tell(ticket: Ticket, settings: AlertSettings, deadline: float, env: Mapping[str, str] | None = None,
         to: Collection[str] | None = None, sleep: Callable[[float], None] = time.sleep,
         which: Callable[..., str | None] = shutil.which, platform: str = sys.platform) -> Told:
    """Send ticket through every channel whose minimum severity it reaches (the loop's end
    included: by its own severity), until deadline (monotonic). `to`: only these channels,
    whatever their minimum: a follow-up (a resolved stall) goes wherever its ticket went."""
    channels = channels_for(settings, env, which, platform)
    if to is not None:
        chosen, skipped = [c for c in channels if c.name in to], {}
    else:
        chosen = [c for c in channels if settings.wants(c.name, ticket.severity)]
        skipped = {c.name: f"{ticket.severity} is below its minimum severity, {settings.minimum(c.name)}"
                   for c in channels if not settings.wants(c.name, ticket.severity)}
    delivered, failed = deliver(ticket, chosen, settings, deadline, sleep) if chosen else ([], {})
    return Told(tuple(delivered), failed, skipped)

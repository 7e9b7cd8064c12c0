"""What a notification says, per channel: one short text, a Slack-compatible payload, ntfy's
headers. Every channel leads with one title (the project and the cause: "night2: Builder
stuck, retrying"), then a few short lines: what happened, what Genesis already did, whether
you must act. The whole ticket rides along for machines (the webhook's `genesis` key, the
command's stdin). Every text is made safe and redacted once more here: whatever a ticket carries (an
agent's words among them), no escape code reaches a screen and no secret of this machine's
environment leaves it."""

from __future__ import annotations

import base64
from pathlib import PurePath
from typing import Mapping

from genesis.redact import redact
from genesis.alerts.tickets import Ticket
from genesis.words import one_line

__all__ = ["title", "body", "text", "slack_payload", "ntfy_headers", "safe_ticket", "PRIORITY"]

PRIORITY = {"low": "low", "medium": "default", "high": "high", "critical": "urgent"}
TAGS = {"low": "information_source", "medium": "warning", "high": "rotating_light", "critical": "sos"}
EMOJI = {"low": ":information_source:", "medium": ":warning:", "high": ":rotating_light:", "critical": ":sos:"}


def safe_ticket(ticket: Ticket, env: Mapping[str, str] | None = None) -> dict:
    """The ticket's JSON with every text field redacted against this environment."""
    data = ticket.to_json()
    for key, value in data.items():
        if isinstance(value, str) and key not in ("ticket_id", "created_at", "severity"):
            data[key] = redact(one_line(value, None), env)
    return data


def _name(project: str) -> str:
    return one_line(PurePath(project).name or project, None)


def title(ticket: Ticket, env: Mapping[str, str] | None = None) -> str:
    """`project: cause`, short enough for a phone's one line."""
    return redact(one_line(f"{_name(ticket.project)}: {ticket.headline or ticket.cause}", None), env)


def body(ticket: Ticket, env: Mapping[str, str] | None = None) -> list[str]:
    """The few lines under the title (an older ticket without its own: its evidence and what to do)."""
    lines = list(ticket.lines) or [ticket.evidence, f"What to do: {ticket.suggested_action}"]
    return [redact(one_line(line, None), env) for line in lines if line]


def text(ticket: Ticket, env: Mapping[str, str] | None = None) -> str:
    """Plain text: the title on the first line, then the body's lines."""
    return "\n".join([title(ticket, env), *body(ticket, env)])


def _mrkdwn(value: str) -> str:
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_payload(ticket: Ticket, env: Mapping[str, str] | None = None) -> dict:
    """Slack's incoming-webhook shape ({text, blocks}) plus the whole ticket under "genesis"."""
    where = " · ".join(filter(None, [f"run {ticket.run_id}", ticket.phase,
                                     f"iteration {ticket.iteration}" if ticket.iteration is not None else "",
                                     ticket.severity]))
    head = f"{EMOJI[ticket.severity]} *{title(ticket, env)}*"
    said = "\n".join(body(ticket, env))
    blocks = [
        {"type": "section", "text": {"type": "mrkdwn", "text": _mrkdwn(redact(head, env))}},
        {"type": "section", "text": {"type": "mrkdwn", "text": _mrkdwn(said)}},
        {"type": "context", "elements": [{"type": "mrkdwn", "text": _mrkdwn(redact(one_line(where, None), env))}]},
    ]
    return {"text": text(ticket, env), "blocks": blocks, "genesis": safe_ticket(ticket, env)}


def _header(value: str) -> str:
    """One header line: no CR/LF (no header injection); non-ASCII as RFC 2047, which ntfy reads."""
    value = " ".join(value.split())
    if value.isascii():
        return value
    return "=?UTF-8?B?" + base64.b64encode(value.encode()).decode("ascii") + "?="


def ntfy_headers(ticket: Ticket, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Title, priority, tags; a stall being retried and its resolution share one sequence id,
    so that ntfy 2.16 and later replace the stall's notification in place (an older server
    ignores the header: the resolution is a follow-up)."""
    tags = ["genesis", "white_check_mark" if ticket.resolves else TAGS[ticket.severity]] + \
        (["checkered_flag"] if ticket.final else [])
    headers = {"Title": _header(title(ticket, env)), "Priority": PRIORITY[ticket.severity], "Tags": ",".join(tags)}
    sequence = ticket.resolves or (ticket.ticket_id if ticket.kind == "retry" else None)
    if sequence:
        headers["X-Sequence-ID"] = sequence
    return headers

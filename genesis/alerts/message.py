"""What a notification says, per channel: one short text, a Slack-compatible payload, ntfy's
headers. Every text is made safe and redacted once more here: whatever a ticket carries (an
agent's words among them), no escape code reaches a screen and no secret of this machine's
environment leaves it."""

from __future__ import annotations

import base64
from pathlib import PurePath
from typing import Mapping

from genesis.redact import redact
from genesis.alerts.tickets import Ticket
from genesis.words import one_line

__all__ = ["title", "text", "slack_payload", "ntfy_headers", "safe_ticket", "PRIORITY"]

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
    what = "loop ended" if ticket.final else ticket.severity
    return redact(f"Genesis {_name(ticket.project)}: {what}", env)


def text(ticket: Ticket, env: Mapping[str, str] | None = None) -> str:
    """Plain text: the cause on the first line, then the evidence and what to do."""
    where = ", ".join(filter(None, [ticket.phase, f"iteration {ticket.iteration}" if ticket.iteration is not None
                                    else ""]))
    lines = [f"[{ticket.severity}] {_name(ticket.project)}: {ticket.cause}" + (f" ({where})" if where else ""),
             ticket.evidence, f"What to do: {ticket.suggested_action}", f"run {ticket.run_id}"]
    return redact("\n".join(one_line(line, None) for line in lines if line), env)


def _mrkdwn(value: str) -> str:
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_payload(ticket: Ticket, env: Mapping[str, str] | None = None) -> dict:
    """Slack's incoming-webhook shape ({text, blocks}) plus the whole ticket under "genesis"."""
    where = " · ".join(filter(None, [f"run {ticket.run_id}", ticket.phase,
                                     f"iteration {ticket.iteration}" if ticket.iteration is not None else ""]))
    head = one_line(f"{EMOJI[ticket.severity]} *{ticket.severity}* · {_name(ticket.project)} · {ticket.cause}", None)
    said = (f"{one_line(ticket.evidence or ticket.reasoning, None)}\n"
            f"*What to do:* {one_line(ticket.suggested_action, None)}")
    blocks = [
        {"type": "section", "text": {"type": "mrkdwn", "text": _mrkdwn(redact(head, env))}},
        {"type": "section", "text": {"type": "mrkdwn", "text": _mrkdwn(redact(said, env))}},
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
    tags = ["genesis", TAGS[ticket.severity]] + (["checkered_flag"] if ticket.final else [])
    return {"Title": _header(title(ticket, env)), "Priority": PRIORITY[ticket.severity], "Tags": ",".join(tags)}

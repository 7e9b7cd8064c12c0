"""The alert's action links: each names one action on exactly one loop (and task), expires, is
signed with the control folder's key (HMAC-SHA256) and works once.

A link is `<payload>.<mac>`, both URL-safe base64: the payload is the action, the project, the
run, the task, when it expires and a random nonce. Anything changed in it breaks the MAC; a
used nonce is kept (until its link would have expired anyway) so the same link never acts twice.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import hmac
import json
import os
import secrets
from dataclasses import asdict, dataclass
from pathlib import Path

from genesis.store.atomicio import CorruptFile, read_json, write_json

__all__ = ["Link", "LinkRefused", "sign", "read", "redeem", "used", "LIFETIME", "USED_FILE"]

LIFETIME = 24 * 3600.0      # seconds an alert's link works: the night it was sent in, and the morning
USED_FILE = "links-used.json"
MAX_LINK = 2048


class LinkRefused(ValueError):
    """The link does not act: forged, expired or used; the message says which."""


@dataclass(frozen=True)
class Link:
    action: str
    project: str
    run_id: str
    task: str
    expires: float
    nonce: str


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(key: bytes, payload: str) -> str:
    return _b64(hmac.new(key, payload.encode("ascii"), hashlib.sha256).digest())


def sign(key: bytes, action: str, project: str, run_id: str, task: str, now: float,
         lifetime: float = LIFETIME) -> str:
    """A new link for that action on that loop (and task)."""
    link = Link(action, project, run_id, task, now + lifetime, secrets.token_urlsafe(12))
    payload = _b64(json.dumps(asdict(link), separators=(",", ":"), sort_keys=True).encode("utf-8"))
    return f"{payload}.{_mac(key, payload)}"


def read(key: bytes, token: str, now: float) -> Link:
    """What a link asks, if it is ours and not expired (LinkRefused otherwise); nothing is spent."""
    payload, dot, mac = token.partition(".")
    if not dot or len(token) > MAX_LINK or not hmac.compare_digest(mac.encode("ascii", "replace"),
                                                                   _mac(key, payload).encode("ascii")):
        raise LinkRefused("this link is not one Genesis signed (changed or forged): it does nothing")
    try:
        link = Link(**json.loads(_unb64(payload)))
    except (ValueError, TypeError):
        raise LinkRefused("this link cannot be read: it does nothing") from None
    if now >= link.expires:
        raise LinkRefused("this link has expired: it does nothing; act from the dashboard or the terminal")
    return link


def _used(folder: Path) -> dict:
    try:
        found = read_json(folder / USED_FILE)
    except (CorruptFile, OSError):
        found = None
    return found if isinstance(found, dict) else {}


def used(folder: Path, link: Link) -> bool:
    """Whether the link was used already (a look, nothing spent: the page before the button says so)."""
    return link.nonce in _used(folder)


def redeem(folder: Path, key: bytes, token: str, now: float) -> Link:
    """The link's action, spent: a second use is refused (LinkRefused) as is a forged or expired one."""
    link = read(key, token, now)
    lock = os.open(folder / (USED_FILE + ".lock"), os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        spent = {k: v for k, v in _used(folder).items()
                 if isinstance(v, (int, float)) and v > now}   # an expired link is refused as such anyway
        if link.nonce in spent:
            raise LinkRefused("this link was used already: it does nothing more")
        spent[link.nonce] = link.expires
        write_json(folder / USED_FILE, spent)
    finally:
        os.close(lock)
    return link

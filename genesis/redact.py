"""Secrets out of every text Genesis keeps or shows: alerts, the ledger, the console and its
log, incidents, status and the report (text, HTML, JSON). An agent's words reach all of them,
and an agent may print a key it read; what leaves the terminal is read by more people (a chat
channel, a phone, a shared report) than the machine's owner.

A leaf: it imports nothing of Genesis, so the ledger and the console can use it.
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Any, Mapping

__all__ = ["redact", "redact_all", "secret_values", "MARK"]

MARK = "[redacted]"
MIN_SECRET = 8           # an environment value shorter than this is too common a string to hide
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD", re.I)

# Private keys (PEM and OpenSSH, PGP's key blocks): the whole block, or what is left of it
# when a tail or a cut took its head or its foot.
PRIVATE_KEY = re.compile(
    r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?(?:-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)"
    r"|(?:^[A-Za-z0-9+/=]{16,}[ \t]*\r?\n)*^[ \t]*-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----",
    re.S | re.M)
# A long base64 run with upper and lower case letters and digits (a key's body line, an AWS
# secret key, a high-entropy token): hex digests (one case) and words with - . _ stay.
BASE64_RUN = re.compile(r"(?<![A-Za-z0-9+/=_\-.])[A-Za-z0-9+/]{40,}={0,2}(?![A-Za-z0-9+/=_\-.])")
# Whole tokens, replaced entirely.
TOKENS = re.compile(
    r"\bsk-ant-[A-Za-z0-9_\-]{4,}"                 # Anthropic keys (sk-ant-api03-..., sk-ant-oat01-...)
    r"|\bsk-[A-Za-z0-9_\-]{8,}"                     # OpenAI-style keys
    r"|\b[sr]k_(?:live|test)_[A-Za-z0-9]{8,}"       # Stripe keys
    r"|\bgh[pousr]_[A-Za-z0-9]{8,}"                 # GitHub tokens (ghp_, gho_, ghu_, ghs_, ghr_)
    r"|\bgithub_pat_[A-Za-z0-9_]{8,}"
    r"|\bglpat-[A-Za-z0-9_\-]{8,}"                  # GitLab tokens
    r"|\bxox[abprse]-[A-Za-z0-9\-]{6,}"             # Slack tokens
    r"|\bnpm_[A-Za-z0-9]{20,}"                      # npm tokens
    r"|\bAIza[0-9A-Za-z_\-]{30,}"                   # Google API keys
    r"|\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]+"  # JSON web tokens
    r"|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")              # AWS access key ids
# A token after a label: the label stays, so the reader still sees what was there.
BEARER = re.compile(r"\b(Bearer)(\s+)[A-Za-z0-9._~+/=\-]{8,}", re.I)
AUTHORIZATION = re.compile(r"""\b(Authorization["']?\s*[=:]\s*["']?)(?:(?:Basic|Bearer|Token)\s+)?[^\s"',;]+""", re.I)
ASSIGNED = re.compile(
    r"""\b([A-Za-z_]*(?:password|passwd|token|secret|api_?key|access_?key|secret_?key|private_?key))"""
    r"""(["']?\s*[=:]\s*)("[^"\n]*"|'[^'\n]*'|[^\s"'&,;]+)""", re.I)
# A variable named like a secret, as a .env file or a shell sets it (SECRET_KEY=..., DB_PASS=...).
ENV_ASSIGNED = re.compile(
    r"""\b((?:export\s+)?[A-Z][A-Z0-9_]*_(?:KEY|TOKEN|SECRET|PASSWORD|PASS|PWD|CREDENTIALS?))(\s*=\s*)"""
    r"""("[^"\n]*"|'[^'\n]*'|[^\s"'&,;]+)""")
URL_CREDENTIALS = re.compile(r"\b([a-z][a-z0-9+.\-]*://)[^/\s:@]+:[^/\s@]+@", re.I)


def secret_values(env: Mapping[str, str] | None = None) -> list[str]:
    """The values of environment variables named like a secret, longest first (so a value
    that contains another is hidden whole)."""
    env = os.environ if env is None else env
    found = {value for name, value in env.items() if SECRET_NAME.search(name) and len(value) >= MIN_SECRET}
    return sorted(found, key=len, reverse=True)


def redact(text: str, env: Mapping[str, str] | None = None) -> str:
    """text with private key blocks, known token shapes, labelled secrets, credentials in URLs
    and the values of secret-named environment variables replaced by MARK."""
    return _redact(text, secret_values(env))


def _redact(text: str, values: list[str]) -> str:
    for value in values:
        text = text.replace(value, MARK)
    text = PRIVATE_KEY.sub(MARK, text)
    text = TOKENS.sub(MARK, text)
    text = BASE64_RUN.sub(_high_entropy, text)
    text = AUTHORIZATION.sub(lambda m: f"{m.group(1)}{MARK}", text)
    text = BEARER.sub(lambda m: f"{m.group(1)}{m.group(2)}{MARK}", text)
    text = ASSIGNED.sub(lambda m: f"{m.group(1)}{m.group(2)}{MARK}", text)
    text = ENV_ASSIGNED.sub(lambda m: f"{m.group(1)}{m.group(2)}{MARK}", text)
    return URL_CREDENTIALS.sub(lambda m: f"{m.group(1)}{MARK}@", text)


def _high_entropy(found: re.Match) -> str:
    run = found.group(0)
    mixed = any(c.isupper() for c in run) and any(c.islower() for c in run) and any(c.isdigit() for c in run)
    return MARK if mixed else run


def redact_all(value: Any, env: Mapping[str, str] | None = None) -> Any:
    """value with every text in it redacted: strings, and those inside lists, tuples, dicts
    (their values) and dataclasses (a frozen one is copied); anything else as it is."""
    return _walk(value, secret_values(env))  # the environment read once for the whole walk


def _walk(value: Any, values: list[str]) -> Any:
    if isinstance(value, str):
        return _redact(value, values)
    if isinstance(value, dict):
        return {key: _walk(item, values) for key, item in value.items()}
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(_walk(item, values) for item in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: _walk(getattr(value, f.name), values) for f in dataclasses.fields(value) if f.init}
        return dataclasses.replace(value, **changes)
    return value

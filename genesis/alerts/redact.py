"""Secrets out of every text an alert carries: a notification leaves the machine, and its
receiver (a chat channel, a phone) is read by more people than the loop's logs."""

from __future__ import annotations

import os
import re
from typing import Mapping

__all__ = ["redact", "secret_values", "MARK"]

MARK = "[redacted]"
MIN_SECRET = 8           # an environment value shorter than this is too common a string to hide
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD", re.I)

# Whole tokens, replaced entirely.
TOKENS = re.compile(
    r"\bsk-ant-[A-Za-z0-9_\-]{4,}"                 # Anthropic keys (sk-ant-api03-..., sk-ant-oat01-...)
    r"|\bsk-[A-Za-z0-9_\-]{8,}"                     # OpenAI-style keys
    r"|\bgh[pousr]_[A-Za-z0-9]{8,}"                 # GitHub tokens (ghp_, gho_, ghu_, ghs_, ghr_)
    r"|\bgithub_pat_[A-Za-z0-9_]{8,}"
    r"|\bxox[abprse]-[A-Za-z0-9\-]{6,}"             # Slack tokens
    r"|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")              # AWS access key ids
# A token after a label: the label stays, so the reader still sees what was there.
BEARER = re.compile(r"\b(Bearer)(\s+)[A-Za-z0-9._~+/=\-]{8,}", re.I)
AUTHORIZATION = re.compile(r"""\b(Authorization["']?\s*[=:]\s*["']?)(?:(?:Basic|Bearer|Token)\s+)?[^\s"',;]+""", re.I)
ASSIGNED = re.compile(
    r"""\b([A-Za-z_]*(?:password|passwd|token|secret|api_?key|access_?key))(["']?\s*[=:]\s*)"""
    r"""("[^"\n]*"|'[^'\n]*'|[^\s"'&,;]+)""", re.I)
URL_CREDENTIALS = re.compile(r"\b([a-z][a-z0-9+.\-]*://)[^/\s:@]+:[^/\s@]+@", re.I)


def secret_values(env: Mapping[str, str] | None = None) -> list[str]:
    """The values of environment variables named like a secret, longest first (so a value
    that contains another is hidden whole)."""
    env = os.environ if env is None else env
    found = {value for name, value in env.items() if SECRET_NAME.search(name) and len(value) >= MIN_SECRET}
    return sorted(found, key=len, reverse=True)


def redact(text: str, env: Mapping[str, str] | None = None) -> str:
    """text with known token shapes, labelled secrets, credentials in URLs and the values of
    secret-named environment variables replaced by MARK."""
    for value in secret_values(env):
        text = text.replace(value, MARK)
    text = TOKENS.sub(MARK, text)
    text = AUTHORIZATION.sub(lambda m: f"{m.group(1)}{MARK}", text)
    text = BEARER.sub(lambda m: f"{m.group(1)}{m.group(2)}{MARK}", text)
    text = ASSIGNED.sub(lambda m: f"{m.group(1)}{m.group(2)}{MARK}", text)
    return URL_CREDENTIALS.sub(lambda m: f"{m.group(1)}{MARK}@", text)

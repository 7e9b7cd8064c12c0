"""The environment the agent gets in its box: the caller's, less the secrets and the sockets.

What passes whatever its name: the CLI's own key variables (its adapter's key_vars), a
variable whose value is a path GENESIS_BOX_ALLOW gives back, and Genesis's own (GENESIS_*).
What is dropped: a name that says it holds a secret (KEY, TOKEN, SECRET, PASSWORD, PASSWD,
CREDENTIAL, ..._PASS, ..._PWD: redact.py's words), a cloud's or a container engine's
account (AWS_*, AZURE_*, GOOGLE_APPLICATION_CREDENTIALS, KUBECONFIG, DOCKER_*...), a socket's
address (SSH_AUTH_SOCK, DBUS_SESSION_BUS_ADDRESS, GPG_AGENT_INFO...: sockets.py), and a
value that looks like a token or holds a URL's password (redact.py's patterns).

HOME is private in the box, so git finds no ~/.gitconfig there: the user's name and email
from it pass as GIT_AUTHOR_*/GIT_COMMITTER_* (unless set), so the agent's own commits work.
"""

from __future__ import annotations

import re
import subprocess
from typing import Iterable, Mapping

from genesis.redact import SECRET_NAME, TOKENS, URL_CREDENTIALS
from genesis.sandbox.sockets import SOCKET_VARS

__all__ = ["boxed_env", "git_identity", "dropped_by_name"]

SECRET_WORDS = re.compile(r"PASSWD|CREDENTIAL|_PASS$|_PWD$|^PASS$|(?:^|_)AUTH(?:_|$)", re.I)
ACCOUNT_PREFIXES = ("AWS_", "AZURE_", "ARM_", "GOOGLE_APPLICATION_CREDENTIALS", "CLOUDSDK_", "KUBECONFIG",
                    "DOCKER_", "PODMAN_", "VAULT_", "OP_SESSION", "NETRC", "HCLOUD_", "DIGITALOCEAN_")
IDENTITY = (("user.name", ("GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME")),
            ("user.email", ("GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL")))


def dropped_by_name(name: str) -> bool:
    upper = name.upper()
    return (upper in SOCKET_VARS or upper.startswith(ACCOUNT_PREFIXES) or bool(SECRET_NAME.search(upper))
            or bool(SECRET_WORDS.search(upper)))


def _looks_secret(value: str) -> bool:
    return bool(TOKENS.search(value) or URL_CREDENTIALS.search(value))


def boxed_env(env: Mapping[str, str], passes: Iterable[str]) -> tuple[dict[str, str], tuple[str, ...]]:
    """The box's environment, and the names left out (sorted: for the start line and the ledger)."""
    keep = set(passes)
    out: dict[str, str] = {}
    left: list[str] = []
    for name, value in env.items():
        if name in keep or name.startswith("GENESIS_") or not (dropped_by_name(name) or _looks_secret(value)):
            out[name] = value
        else:
            left.append(name)
    return out, tuple(sorted(left))


def git_identity(env: Mapping[str, str], timeout: float = 5.0) -> dict[str, str]:
    """GIT_AUTHOR_*/GIT_COMMITTER_* from the user's global git config (read outside the box, no
    repository's; one git call), those not set. The project's own config is in the box already."""
    wanted = [(key, names) for key, names in IDENTITY if not all(env.get(n) for n in names)]
    if not wanted:
        return {}
    try:
        done = subprocess.run(["git", "config", "--global", "--get-regexp", r"^user\.(name|email)$"], cwd="/",
                              env=dict(env), capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return {}
    values = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
    return {n: values[key] for key, names in wanted if values.get(key) for n in names if not env.get(n)}

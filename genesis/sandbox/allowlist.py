"""Where the agent's traffic may go (GENESIS_NETWORK=allowlist): a list of hosts, each with
the ports it may be reached on, asked by the proxy (proxy.py) for every connection.

An entry is `host` (ports 80 and 443), `host:port` (that port alone) or `*.domain` (every
name below the domain, ports 80 and 443). A loopback address (127.0.0.0/8, ::1, localhost)
is the host's own services (the dashboard, Temporal, databases): reached only when an
entry names it with its port, never through a name that resolves to it (proxy.py checks the
address it connects to).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Iterable
from urllib.parse import urlsplit

__all__ = ["Entry", "Allowlist", "AllowlistError", "parse_entries", "entry_of_url", "is_loopback",
           "REGISTRIES", "WEB_PORTS"]

WEB_PORTS = (80, 443)
# The package registries an agent's builds install from (npm, PyPI, crates, Go, Maven, RubyGems...).
REGISTRIES = ("registry.npmjs.org", "registry.yarnpkg.com", "pypi.org", "files.pythonhosted.org", "crates.io",
              "static.crates.io", "index.crates.io", "proxy.golang.org", "sum.golang.org", "repo.maven.apache.org",
              "repo1.maven.org", "plugins.gradle.org", "services.gradle.org", "rubygems.org", "index.rubygems.org",
              "registry.bun.sh", "jsr.io", "deb.nodesource.com")
MAX_ENTRIES = 512
_NAME = re.compile(r"^(\*\.)?[a-z0-9_]([a-z0-9_-]{0,62})(\.[a-z0-9_]([a-z0-9_-]{0,62}))*\.?$")


class AllowlistError(ValueError):
    """GENESIS_NETWORK_ALLOW cannot be read; the message says what to write."""


def is_loopback(host: str) -> bool:
    """A name or address of the machine's own loopback."""
    host = host.strip("[]").lower().rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or address.is_unspecified or bool(mapped and mapped.is_loopback)


@dataclass(frozen=True)
class Entry:
    host: str                      # lower case; `*.domain` for the names below it
    ports: tuple[int, ...]         # the ports it may be reached on
    why: str = ""                  # where it came from: the CLI, a registry, a git remote, the setting

    def matches(self, host: str, port: int) -> bool:
        if port not in self.ports:
            return False
        if is_loopback(self.host):  # localhost:4010 and 127.0.0.1:4010 are one service (the bridge asks for the latter)
            return is_loopback(host)
        if self.host.startswith("*."):
            return host.endswith(self.host[1:])
        return host == self.host

    def said(self) -> str:
        ports = "" if self.ports == WEB_PORTS else ":" + ",".join(map(str, self.ports))
        return f"{self.host}{ports}"


def _host_port(text: str) -> tuple[str, int | None]:
    text = text.strip()
    if text.startswith("["):  # [::1]:8080
        host, _, rest = text[1:].partition("]")
        return host.lower(), int(rest[1:]) if rest.startswith(":") and rest[1:].isdigit() else None
    if text.count(":") == 1:
        host, port = text.split(":")
        if not port.isdigit():
            raise AllowlistError(f"{text!r}: the port after ':' must be a number")
        return host.lower(), int(port)
    return text.lower(), None


def _entry(text: str, why: str) -> Entry:
    host, port = _host_port(text)
    host = host.rstrip(".")
    if port is not None and not 0 < port < 65536:
        raise AllowlistError(f"{text!r}: a port is 1 to 65535")
    literal = _is_address(host)
    if not host or not (literal or _NAME.match(host)):
        raise AllowlistError(f"{text!r}: expected a host name, an address, or *.domain, with an optional :port")
    if is_loopback(host) and port is None:
        raise AllowlistError(f"{text!r}: a loopback address is the machine's own services; name the one port "
                             f"to allow (e.g. 127.0.0.1:8080)")
    return Entry(host, (port,) if port is not None else WEB_PORTS, why)


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def parse_entries(value: str, why: str = "GENESIS_NETWORK_ALLOW") -> tuple[Entry, ...]:
    """`host[:port],...` (commas or spaces between); AllowlistError saying what to write."""
    words = [w for w in re.split(r"[,\s]+", value.strip()) if w]
    if len(words) > MAX_ENTRIES:
        raise AllowlistError(f"{len(words)} hosts: at most {MAX_ENTRIES}")
    return tuple(_entry(w, why) for w in words)


def entry_of_url(url: str, why: str) -> Entry | None:
    """The host and port a base URL names (http: 80, https: 443 unless it says), or None."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    port = port or (443 if parts.scheme == "https" else 80)
    try:
        return _entry(f"[{parts.hostname}]:{port}" if ":" in parts.hostname else f"{parts.hostname}:{port}", why)
    except AllowlistError:
        return None


@dataclass(frozen=True)
class Allowlist:
    entries: tuple[Entry, ...]

    @classmethod
    def of(cls, entries: Iterable[Entry]) -> "Allowlist":
        unique: dict[tuple[str, tuple[int, ...]], Entry] = {}
        for entry in entries:
            unique.setdefault((entry.host, entry.ports), entry)
        return cls(tuple(unique.values())[:MAX_ENTRIES])

    def allows(self, host: str, port: int) -> Entry | None:
        """The entry that lets `host:port` through, or None."""
        host = host.strip("[]").lower().rstrip(".")
        return next((e for e in self.entries if e.matches(host, port)), None)

    def loopback_ports(self) -> tuple[int, ...]:
        """Ports of the host's loopback the list names (a CLI's base URL on 127.0.0.1): the box
        forwards its own loopback's same port to them, so the URL works unchanged inside."""
        return tuple(sorted({p for e in self.entries if is_loopback(e.host) for p in e.ports}))

    def said(self, most: int = 12) -> str:
        names = [e.said() for e in self.entries]
        more = f" and {len(names) - most} more" if len(names) > most else ""
        return ", ".join(names[:most]) + more

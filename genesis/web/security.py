"""What keeps the dashboard's pages to their reader: the token, the Host check and the headers.

The dashboard shows agents' words, task titles and paths; the page must never run them, a
site the reader visits must never read them (DNS rebinding: a foreign name resolving to
127.0.0.1), and another machine may read them only with the token printed at start.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets

__all__ = ["CSP", "PAGE_HEADERS", "API_HEADERS", "cookie_name", "new_token", "token_ok", "is_loopback", "allowed_hosts",
           "host_ok", "bearer", "key_cookie", "csrf_of", "same_origin", "CSRF_HEADER"]

CSRF_HEADER = "x-genesis-csrf"

# No inline script or style anywhere, nothing from another origin: a title that slips past
# escaping still cannot run, and a page cannot be framed.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
PAGE_HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
                "Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY"}
API_HEADERS = {**PAGE_HEADERS, "Cache-Control": "no-store"}


def cookie_name(port: int) -> str:
    """The token's cookie: a cookie is the host's, whatever its port, so two dashboards on one
    machine must not share a name (each would overwrite the other's)."""
    return f"genesis_token_{port}"


def key_cookie(port: int) -> str:
    """The write key's cookie (HttpOnly, SameSite=Strict): a browser that holds it may act."""
    return f"genesis_key_{port}"


def csrf_of(key: str) -> str:
    """The anti-CSRF token a page sends with each action, in a header a cross-site form cannot set:
    derived from the write key, given only to a page of this origin (`/api/csrf`: no CORS)."""
    return hmac.new(key.encode("utf-8"), b"genesis-dashboard-csrf", "sha256").hexdigest()


def same_origin(origin: str | None, fetch_site: str | None, host: str | None) -> bool:
    """A write comes from a page of this server: its Origin (when the browser sends one) names this
    host, and Sec-Fetch-Site (when sent) says same-origin. A form on another site fails both."""
    if fetch_site is not None and fetch_site not in ("same-origin", "none"):
        return False
    if origin is None:
        return True
    here = (host or "").strip().lower()
    return bool(here) and origin.strip().lower() in (f"http://{here}", f"https://{here}")


LOCAL_NAMES = ("localhost", "127.0.0.1", "[::1]", "::1")


def new_token() -> str:
    """A fresh token: shown once at start, never stored."""
    return secrets.token_urlsafe(32)


def token_ok(given: str | None, token: str) -> bool:
    """given is the token, compared in constant time (a timing difference would leak it)."""
    if not given:
        return False
    return hmac.compare_digest(given.encode("utf-8", "replace"), token.encode("utf-8"))


def bearer(header: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header."""
    if not header:
        return None
    scheme, _, value = header.strip().partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


def is_loopback(host: str) -> bool:
    """host is this machine only: a loopback address or the name localhost (what the name
    resolves to is checked on the bound socket: server.serve)."""
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def allowed_hosts(host: str, port: int) -> frozenset[str] | None:
    """The Host headers a request may carry: the bound address (and, on loopback, the local names),
    with and without the port. None for a wildcard bind (every address of the machine): any name
    may reach it, and the token it cannot run without is the guard."""
    if host.strip("[]") in ("0.0.0.0", "::", ""):
        return None
    names = {host.lower(), f"[{host.lower()}]" if ":" in host and not host.startswith("[") else host.lower()}
    if is_loopback(host):
        names.update(LOCAL_NAMES)
    return frozenset(n for name in names for n in (name, f"{name}:{port}"))


def host_ok(header: str | None, allowed: frozenset[str] | None) -> bool:
    """The request's Host header names this server (a foreign one is a rebinding attempt)."""
    if allowed is None:
        return True
    return bool(header) and header.strip().lower() in allowed

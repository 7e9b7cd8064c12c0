"""How a Genesis process reaches Temporal: the client's options (TLS, an API key) for the home,
the workers and `fleet status --engine temporal`, and riding out the server's outage.

The SDK's workers keep polling through an outage on their own; its client calls give up after
about ten seconds (`RPCError` UNAVAILABLE, "tcp connect error"). The home's calls go through
`Outage`, which says when Temporal became unreachable, tries again with a growing backoff and
says when it is back: the fleet lives in Temporal, nothing is lost by waiting for it.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Awaitable, Callable, Mapping, TypeVar

from temporalio.client import Client
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.service import RPCError, RPCStatusCode, TLSConfig

from genesis.clock import iso
from genesis.config import ConfigError
from genesis.temporal.settings import TemporalSettings

__all__ = ["client_options", "connect", "unreachable", "backoff", "Outage", "API_KEY_ENV", "runtime_for"]

API_KEY_ENV = "GENESIS_TEMPORAL_API_KEY"   # the key itself, in the environment only (never a setting shown)
RETRY_FIRST = 1.0      # seconds before the first new try of a call Temporal did not answer
RETRY_MOST = 30.0      # seconds between two tries, at most
CONNECT_PATIENCE = 120.0   # seconds a process's first connection waits for an unreachable server
SAY_EVERY = 60.0       # seconds between two lines saying Temporal is still unreachable
MAX_FILE = 1 << 20     # bytes of a certificate, key or API-key file: far more than a real one
# What an unreachable or restarting server answers; anything else is a real error, said as it is.
UNREACHABLE = frozenset({RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED})
CUT = ("transport error", "tcp connect error", "connection reset", "broken pipe")
T = TypeVar("T")
_RUNTIMES: dict[tuple[str, str], Runtime] = {}   # one per endpoint in a process: its port is bound once


def _read(key: str, path: str) -> bytes:
    try:
        with open(Path(path).expanduser(), "rb") as handle:
            data = handle.read(MAX_FILE + 1)
    except OSError as exc:
        raise ConfigError(f"{key}={path!r}: cannot be read ({exc.strerror or exc}): give a readable file") from None
    if not data.strip() or len(data) > MAX_FILE:
        raise ConfigError(f"{key}={path!r}: empty or too large to be a PEM file or a key")
    return data


def client_options(settings: TemporalSettings, env: Mapping[str, str]) -> dict:
    """Client.connect's keyword arguments for these settings: TLS when a CA, a certificate or an
    API key is set (Temporal Cloud takes an API key over TLS only), mutual TLS with a certificate
    and its key, and the API key from GENESIS_TEMPORAL_API_KEY, else from the file
    GENESIS_TEMPORAL_API_KEY_FILE names. ConfigError says what is wrong; no secret in it."""
    options: dict = {"namespace": settings.namespace}
    key = (env.get(API_KEY_ENV) or "").strip()
    if not key and settings.api_key_file:
        key = _read("GENESIS_TEMPORAL_API_KEY_FILE", settings.api_key_file).decode("utf-8", "replace").strip()
    if bool(settings.tls_cert) != bool(settings.tls_key):
        raise ConfigError("GENESIS_TEMPORAL_TLS_CERT and GENESIS_TEMPORAL_TLS_KEY go together (mutual TLS): "
                          "set both, or neither")
    if settings.tls_ca or settings.tls_cert or key:
        options["tls"] = TLSConfig(
            server_root_ca_cert=_read("GENESIS_TEMPORAL_TLS_CA", settings.tls_ca) if settings.tls_ca else None,
            client_cert=_read("GENESIS_TEMPORAL_TLS_CERT", settings.tls_cert) if settings.tls_cert else None,
            client_private_key=_read("GENESIS_TEMPORAL_TLS_KEY", settings.tls_key) if settings.tls_key else None)
    if key:
        options["api_key"] = key
    return options


def runtime_for(settings: TemporalSettings) -> Runtime | None:
    """The SDK's runtime serving its metrics for Prometheus at GENESIS_TEMPORAL_METRICS (None: the
    default runtime, no endpoint), tagged with this machine's name; ConfigError when the address
    cannot be bound (another process has it: give each its own port)."""
    if not settings.metrics:
        return None
    key = (settings.metrics, settings.host)
    if key not in _RUNTIMES:
        try:
            _RUNTIMES[key] = Runtime(telemetry=TelemetryConfig(
                metrics=PrometheusConfig(bind_address=settings.metrics, durations_as_seconds=True),
                global_tags={"genesis_host": settings.host}))
        except Exception as exc:  # noqa: BLE001 - the SDK's core says it as a plain error
            raise ConfigError(f"GENESIS_TEMPORAL_METRICS={settings.metrics!r}: cannot serve the metrics there "
                              f"({exc}); give this process a free HOST:PORT of its own") from None
    return _RUNTIMES[key]


def unreachable(exc: BaseException) -> bool:
    """The server did not answer (down, restarting, the network): worth another try. Client.connect
    says it with a RuntimeError, a call with an RPCError."""
    if isinstance(exc, RPCError):   # a call cut by the server's death says "transport error", status UNKNOWN
        return exc.status in UNREACHABLE or any(word in str(exc).lower() for word in CUT)
    return isinstance(exc, RuntimeError) and "Failed client connect" in str(exc) and \
        ("connect error" in str(exc) or "Connection refused" in str(exc) or "timed out" in str(exc).lower())


def backoff(tries: int) -> float:
    """Seconds before the next try after `tries` failed ones in a row: 1, 2, 4 ... 30."""
    return min(RETRY_MOST, RETRY_FIRST * 2 ** max(0, tries - 1))


@dataclass
class Outage:
    """Since when Temporal has not answered the home, and what to say about it."""
    address: str
    say: Callable[[str, str], None]
    clock: Callable[[], float] = time.time
    since: float | None = None
    tries: int = 0
    said: float = 0.0

    def failed(self, exc: BaseException) -> float:
        """One call met the outage: said at its start and every SAY_EVERY; the wait before the next try."""
        now = self.clock()
        if self.since is None:
            self.since, self.said = now, now
            self.say(f"Temporal unreachable at {self.address} since {iso(now)} ({_short(exc)}), retrying; "
                     f"the fleet goes on once it answers", "warn")
        elif now - self.said >= SAY_EVERY:
            self.said = now
            self.say(f"Temporal still unreachable at {self.address} since {iso(self.since)} "
                     f"({now - self.since:.0f}s), retrying", "warn")
        self.tries += 1
        return backoff(self.tries)

    def answered(self) -> None:
        if self.since is not None:
            self.say(f"Temporal answers again at {self.address} after {self.clock() - self.since:.0f}s: the fleet "
                     f"goes on", "info")
        self.since, self.tries = None, 0

    async def call(self, make: Callable[[], Awaitable[T]], give_up: Callable[[], bool] = lambda: False) -> T:
        """make()'s result, tried again for as long as Temporal is unreachable (unless give_up())."""
        while True:
            try:
                done = await make()
            except (RPCError, RuntimeError) as exc:
                if not unreachable(exc) or give_up():
                    raise
                await asyncio.sleep(self.failed(exc))
                continue
            self.answered()
            return done


def _short(exc: BaseException) -> str:
    text = str(exc)
    return "tcp connect error" if "tcp connect error" in text else text.splitlines()[0][:160] if text else type(
        exc).__name__


async def connect(settings: TemporalSettings, identity: str, env: Mapping[str, str] | None = None,
                  outage: Outage | None = None, patience: float = CONNECT_PATIENCE) -> Client:
    """A client of the settings' server; with an Outage, connecting waits out an unreachable server
    for `patience` seconds (a server restarting; a wrong address is said well before a night is lost)."""
    options = client_options(settings, os.environ if env is None else env)
    runtime = runtime_for(settings)
    if runtime is not None:
        options["runtime"] = runtime

    def make() -> Awaitable[Client]:
        return Client.connect(settings.address, identity=identity, **options)

    if outage is None:
        return await make()
    return await outage.call(make, give_up=lambda: outage.clock() - (outage.since or outage.clock()) >= patience)

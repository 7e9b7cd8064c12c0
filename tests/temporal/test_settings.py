"""The engine's knobs: documented defaults, the hostname as the machine's name, bad values refused."""

from __future__ import annotations

import pytest

from genesis.config import ConfigError, Setting
from genesis.temporal.settings import temporal_settings


def settings(**values: str) -> dict[str, Setting]:
    return {key: Setting(value, "env") for key, value in values.items()}


def test_defaults():
    s = temporal_settings({}, hostname="build-7.example.org")
    assert (s.engine, s.address, s.namespace, s.queue_prefix, s.host) == \
        ("local", "127.0.0.1:7233", "default", "genesis", "build-7")
    assert (s.heartbeat, s.host_wait, s.remote, s.account) == (60.0, 300.0, "origin", "")


def test_set_values_are_read():
    s = temporal_settings(settings(GENESIS_FLEET_ENGINE="Temporal", GENESIS_TEMPORAL_ADDRESS="tmp.corp:7233",
                                   GENESIS_TEMPORAL_HOST="gpu-2", GENESIS_TEMPORAL_HEARTBEAT_SECONDS="3",
                                   GENESIS_TEMPORAL_ACCOUNT="team-max"))
    assert (s.engine, s.address, s.host, s.heartbeat, s.account) == ("temporal", "tmp.corp:7233", "gpu-2", 3.0,
                                                                     "team-max")


@pytest.mark.parametrize("key,value,said", [
    ("GENESIS_FLEET_ENGINE", "k8s", "expected local or temporal"),
    ("GENESIS_TEMPORAL_ADDRESS", "localhost", "HOST:PORT"),
    ("GENESIS_TEMPORAL_ADDRESS", "h:99999", "HOST:PORT"),
    ("GENESIS_TEMPORAL_HOST", "a/b", "letters, digits"),
    ("GENESIS_TEMPORAL_TASK_QUEUE", "-x", "letters, digits"),
    ("GENESIS_TEMPORAL_HEARTBEAT_SECONDS", "0", "1s to 3600s"),
    ("GENESIS_TEMPORAL_HOST_WAIT_SECONDS", "soon", "is not a duration: write 90s, 15m or 2h"),
])
def test_bad_values_are_refused_with_their_key(key, value, said):
    with pytest.raises(ConfigError, match=f"{key}.*{said}"):
        temporal_settings(settings(**{key: value}))

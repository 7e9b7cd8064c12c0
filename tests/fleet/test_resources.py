"""What a fleet may use: --parallel auto, the knobs, port ranges."""

from __future__ import annotations

import pytest

from genesis.config import ConfigError, Setting
from genesis.fleet.resources import AUTO_CAP, MB, fleet_settings, parallel_of, port_range


def settings(**values: str) -> dict[str, Setting]:
    return {k: Setting(v, "--set") for k, v in values.items()}


def test_the_defaults():
    fleet = fleet_settings({})
    assert (fleet.child_iterations, fleet.stagger, fleet.memory_per_agent, fleet.memory_floor, fleet.port_base,
            fleet.ports_per_task, fleet.check) == (6, 5.0, 400 * MB, 1024 * MB, 20000, 10, 2.0)


@pytest.mark.parametrize("cores, free_mb, expected", [
    (2, 16000, 2),      # the cores bound it
    (16, 1000, 2),      # the memory: 1000 MB / 400 MB
    (64, 64000, AUTO_CAP),
    (4, 100, 1),        # never fewer than one
])
def test_parallel_auto_from_cores_and_free_memory(cores, free_mb, expected):
    assert parallel_of("auto", fleet_settings({}), cores=cores, available=free_mb * MB) == expected


def test_parallel_n_and_bad_values():
    fleet = fleet_settings({})
    assert parallel_of("3", fleet) == 3
    for bad in ("0", "-1", "three", "65", ""):
        with pytest.raises(ConfigError, match="--parallel"):
            parallel_of(bad, fleet)


def test_a_bad_knob_is_named():
    with pytest.raises(ConfigError, match="GENESIS_FLEET_PORT_BASE='80'.*1024 to 65535"):
        fleet_settings(settings(GENESIS_FLEET_PORT_BASE="80"))
    with pytest.raises(ConfigError, match="GENESIS_FLEET_STAGGER_SECONDS='soon'"):
        fleet_settings(settings(GENESIS_FLEET_STAGGER_SECONDS="soon"))


def test_port_ranges_are_disjoint_and_stay_below_65536():
    fleet = fleet_settings(settings(GENESIS_FLEET_PORT_BASE="65500", GENESIS_FLEET_PORTS_PER_TASK="10"))
    ranges = [port_range(slot, fleet) for slot in range(8)]
    assert all(base + count - 1 <= 65535 for base, count in ranges)
    fleet = fleet_settings({})
    spans = [set(range(b, b + n)) for b, n in (port_range(s, fleet) for s in range(8))]
    assert all(not (a & b) for i, a in enumerate(spans) for b in spans[i + 1:])

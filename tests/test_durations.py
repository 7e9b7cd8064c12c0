"""The one grammar of a duration setting (genesis/durations.py)."""

import pytest

from genesis.durations import seconds, unit_of, with_unit, written


@pytest.mark.parametrize("raw, unit, held", [
    ("90s", "s", 90), ("15m", "s", 900), ("2h", "s", 7200), ("1d", "s", 86400), ("1.5h", "m", 5400),
    (" 45 m ", "s", 2700), ("15M", "s", 900), (".5", "s", 0.5), ("90", "s", 90), ("90", "m", 5400),
    ("2", "h", 7200), ("0", "m", 0),
])
def test_a_duration_is_a_number_with_a_unit_or_a_bare_number_in_the_names_unit(raw, unit, held):
    assert seconds("KNOB", raw, unit) == held


@pytest.mark.parametrize("raw", ["15x", "", "m", "-1", "1e3", "nan", "inf", "15 min", "1h30m", "0x10"])
def test_anything_else_is_refused_with_what_to_write(raw):
    with pytest.raises(ValueError, match=r"^HEARTBEAT_STALE='.*' \(env\) is not a duration: write 90s, 15m or 2h "
                                         r"\(a bare number means minutes\)$"):
        seconds("HEARTBEAT_STALE", raw, "m", "env")


def test_a_names_unit_is_its_suffix_else_seconds():
    assert [unit_of(name) for name in ("KILL_GRACE_SECONDS", "TOOL_BUSY_MAX_MINUTES", "GENESIS_MAX_RUNTIME_HOURS",
                                       "HEARTBEAT_STALE", "HEARTBEAT_CHECK_INTERVAL")] == ["s", "m", "h", "s", "s"]


def test_an_old_names_bare_number_gets_its_unit_and_anything_else_is_kept():
    assert [with_unit(raw, "m") for raw in ("15", "1.5", "90s", "soon")] == ["15m", "1.5m", "90s", "soon"]


def test_seconds_are_written_in_the_largest_unit_that_divides_them_and_read_back_the_same():
    cases = {90: "90s", 900: "15m", 5400: "90m", 7200: "2h", 172800: "2d", 0.2: "0.2s", 0: "0s", 1234567: "1234567s"}
    assert {value: written(value) for value in cases} == cases
    assert all(seconds("K", written(value), "s") == value for value in cases)

"""The doom-loop judge: the severity ladder, both wedged patterns, near misses, clamping."""

from __future__ import annotations

from genesis.health.doomloop import DOOM_LOOP, STALL_SAME_TOOL, DoomLimits, judge
from genesis.health.toollog import FAILURE, POST, ToolCall, input_hash

_t = iter(range(1, 10**6))


def done(cmd: str, ok: bool, tool: str = "Bash") -> ToolCall:
    return ToolCall(float(next(_t)), POST if ok else FAILURE, tool, "", input_hash(tool, cmd), ok, 5, cmd)


def test_the_same_failing_command_is_a_stall_with_its_name_and_count() -> None:
    calls = [done("pytest -x", False) for _ in range(6)]
    j = judge(calls, repo_changed=True)
    assert j.pattern == STALL_SAME_TOOL
    assert j.wedged == "stall_same_tool: Bash 'pytest -x' failed 6 times in a row"
    assert (j.severity, j.steps_since_success) == ("warn", 6)


def test_near_miss_five_failures_then_a_success_is_not_wedged() -> None:
    calls = [done("pytest -x", False) for _ in range(5)]
    j = judge(calls, repo_changed=False)
    assert (j.wedged, j.severity, j.steps_since_success) == ("", "warn", 5)
    j = judge(calls + [done("pytest -x", True)], repo_changed=False)
    assert (j.wedged, j.severity, j.steps_since_success) == ("", "ok", 0)
    # failures of different inputs are steps, not a stall
    mixed = [done(f"ls missing-{i}", False) for i in range(10)]
    assert judge(mixed, repo_changed=True).wedged == ""


def test_a_cycle_over_few_inputs_without_repository_change_is_a_doom_loop() -> None:
    calls = [done("pytest -x", i % 2 == 0) if i % 2 else done("cat a.py", True, "Read") for i in range(12)]
    j = judge(calls, repo_changed=False)
    assert j.pattern == DOOM_LOOP
    assert j.wedged.startswith("doom_loop: the last 12 calls cycle over 2 inputs and the repository did not change")
    assert "Read 'cat a.py'" in j.wedged and j.severity == "ok"


def test_near_misses_of_the_cycle() -> None:
    cycle = [done(f"step {i % 3}", True) for i in range(12)]
    assert judge(cycle, repo_changed=True).wedged == ""           # the repository changes: work is done
    assert judge(cycle[:11], repo_changed=False).wedged == ""     # not yet 12 calls
    four = [done(f"step {i % 4}", True) for i in range(12)]
    assert judge(four, repo_changed=False).wedged == ""           # 4 distinct inputs
    unknown = cycle[:-1] + [ToolCall(99.0, POST, "TodoWrite", "", "", True, None, "")]
    assert judge(unknown, repo_changed=False).wedged == ""        # an unknown input is never "the same"


def test_the_severity_ladder() -> None:
    def severity(n: int) -> str:
        return judge([done(f"probe {i}", False) for i in range(n)], repo_changed=True).severity
    assert [severity(n) for n in (0, 4, 5, 9, 10, 14, 15, 19, 20, 40)] == [
        "ok", "ok", "warn", "warn", "medium", "medium", "high", "high", "critical", "critical"]
    assert judge([], repo_changed=False).severity == "ok"


def test_limits_are_clamped_to_sane_bounds_and_a_rising_ladder() -> None:
    wild = DoomLimits(warn=0, medium=1, high=1, critical=-5, same_failures=1, cycle_window=2, cycle_inputs=99)
    c = wild.clamped()
    assert (c.warn, c.medium, c.high, c.critical) == (2, 3, 4, 5)
    assert c.same_failures == 3 and c.cycle_inputs == 10 and c.cycle_window == 20
    assert DoomLimits(warn="7", same_failures="x").clamped() == DoomLimits(warn=7)  # type: ignore[arg-type]
    assert DoomLimits().clamped() == DoomLimits()
    # clamping applies when judging: a stall threshold of 1 acts as 3
    assert judge([done("x", False)] * 2, repo_changed=True, limits=wild).wedged == ""
    assert judge([done("x", False) for _ in range(3)], repo_changed=True, limits=wild).pattern == STALL_SAME_TOOL

"""The watcher's decision replayed over scripted histories: no process, no clock, no sleep."""

from __future__ import annotations

from genesis.agents.base import ApiRetry
from genesis.health.activity import Sample, Usage
from genesis.health.heartbeat import Heartbeat
from genesis.procs.proctree import ProcId
from genesis.watch.decide import End, Judgement, Observation, Rules, State, Verdict, begin, decide, this_runs

RUN = "run-d"
WALL0 = 1_800_000_000.0
STALE = "no heartbeat for 11.0s (stale after 10s)"
DISK = ("disk full: heartbeats cannot be written (/state/hb); silence is not counted while it lasts (the runtime "
        "cap still applies)")


def rules(**kw) -> Rules:
    """A 10 s window checked every second, a cap far away unless given."""
    return Rules(**{"run_id": RUN, "stale_after": 10.0, "interval": 1.0, "started": 0.0, "started_wall": WALL0,
                    "max_runtime": 1000.0, "heartbeat_dir": "/state/hb", **kw})


def beat(at: float, event: str = "PostToolUse", tool: str = "Bash", run_id: str = RUN) -> Heartbeat:
    return Heartbeat(WALL0 + at, "", "Builder", tool, event, "s-1", 4242, run_id)


def at(t: float, **kw) -> Observation:
    """The observation of the check at t seconds after the start."""
    return Observation(mono=t, wall=WALL0 + t, **kw)


def replay(r: Rules, history) -> tuple[State, list[Verdict]]:
    """Each observation through the decision in turn, the state carried; the verdicts up to the first end."""
    state, verdicts = begin(r), []
    for obs in history:
        state, verdict = decide(r, state, obs)
        verdicts.append(verdict)
        if verdict.end is not None:
            break
    return state, verdicts


def cpu(seconds: float) -> Sample:
    """The tool's tree: one test runner that has used `seconds` of CPU so far."""
    return Sample({ProcId(5150, 1.0): Usage(seconds, 0, "pytest -x")})


def test_a_healthy_run_beating_at_every_check_goes_on_and_says_nothing():
    _, verdicts = replay(rules(), [at(t, beat=beat(t - 0.5)) for t in range(1, 200)])
    assert len(verdicts) == 199 and all(v.end is None and v.notes == () and v.warning == "" for v in verdicts)
    assert {v.health.classification for v in verdicts} == {"healthy"}
    assert verdicts[-1].health.last_event == "PostToolUse Bash, 0s ago"
    assert verdicts[-1].health.idle == 0.5


def test_a_stale_heartbeat_ends_the_watch_one_window_after_the_last_beat():
    _, verdicts = replay(rules(), [at(t, beat=beat(2)) for t in range(2, 100)])
    assert verdicts[-1].end == End("stuck", 11.0, STALE, window="stale")
    assert len(verdicts) == 12  # the check at t=13
    assert [v.health.classification for v in verdicts[3:6]] == ["healthy", "healthy", "slow"]  # idle 3, 4, 5
    assert verdicts[-1].health.classification == "stuck" and verdicts[-1].health.reason == STALE


def test_output_is_life_while_it_never_beat_but_only_a_window_past_its_last_beat():
    _, never = replay(rules(), [at(t, received=100 * t) for t in range(1, 500)])
    assert all(v.end is None for v in never)
    _, stopped = replay(rules(), [at(t, received=100 * min(t, 5)) for t in range(1, 500)])
    assert len(stopped) == 16 and stopped[-1].end == End("stuck", 11.0, STALE, window="stale")  # its last output came at t=5
    _, beat_once = replay(rules(), [at(t, beat=beat(2) if t >= 2 else None, received=100 * t) for t in range(1, 500)])
    # output counts up to t=12 (one window after the beat at t=2); stale one window and a check later
    assert len(beat_once) == 23
    assert beat_once[-1].end == End("stuck", 11.0, f"{STALE}; its output alone no longer counts: the last heartbeat "
                                                   f"was 21.0s ago, more than a window", window="stale")


def test_output_does_not_count_when_it_is_not_to():
    _, verdicts = replay(rules(count_output=False), [at(t, received=100 * t) for t in range(1, 500)])
    assert verdicts[-1].end == End("stuck", 11.0, STALE, window="stale") and len(verdicts) == 11


def test_a_busy_tool_lives_past_the_window_and_a_silent_one_is_stuck_before_it():
    r = rules(tool_silent=3.0, tool_busy_max=100.0)
    flying = Judgement(flying="Bash: pytest -x since 02:00:00")
    busy = [at(t, beat=beat(1, "PreToolUse"), activity=cpu(t), judged=flying) for t in range(1, 31)]
    silent = [at(t, beat=beat(1, "PreToolUse"), activity=cpu(30), judged=flying) for t in range(31, 100)]
    _, verdicts = replay(r, busy + silent)
    assert verdicts[1].notes == ("inside Bash for 1s, silent but busy (1.00s CPU: pytest -x): not stuck (allowed up "
                                 "to 100s); running Bash: pytest -x since 02:00:00",)
    assert all(v.notes == () for v in verdicts[2:])  # said once per tool call
    assert all(v.end is None and v.health.stall_score == 0.0 for v in verdicts[1:30])  # 29 s: past the window
    assert verdicts[31].health.classification == "slow"  # 2 s of the 3 s tool-silent window
    assert len(verdicts) == 33  # the check at t=33: 3 s after its tree last worked
    assert verdicts[-1].end == End("stuck", 3.0, "inside Bash for 32s, and its processes used no CPU, did no I/O, "
                                                 "started nothing and printed nothing for 3.0s (tool-silent window "
                                                 "3s); the tool in flight: Bash: pytest -x since 02:00:00",
                                     window="tool_silent")


def test_a_tool_busy_longer_than_its_ceiling_is_left_to_the_general_window():
    r = rules(tool_silent=3.0, tool_busy_max=20.0)
    _, verdicts = replay(r, [at(t, beat=beat(1, "PreToolUse"), activity=cpu(t)) for t in range(1, 100)])
    assert len(verdicts) == 32  # busy counted up to t=21, stale 11 s later
    # What ran out is the busy tool's allowance, then the general window: both are named.
    assert verdicts[-1].end == End("stuck", 11.0, "inside Bash for 31s, busy past the tool-busy maximum (20s), and "
                                                  "no heartbeat for 11.0s more (stale after 10s)", window="tool_busy")


def test_a_busy_tool_that_misses_the_last_checks_cpu_is_still_ended_by_its_busy_allowance():
    # As above, but the tree got no CPU at the very check where the window runs out (a loaded
    # machine): it worked a second before, within its tool-silent window, so what ran out is
    # still the busy allowance, and it is named so.
    r = rules(tool_silent=3.0, tool_busy_max=20.0)
    used = [min(t, 31) for t in range(1, 100)]
    _, verdicts = replay(r, [at(t, beat=beat(1, "PreToolUse"), activity=cpu(used[t - 1])) for t in range(1, 100)])
    assert len(verdicts) == 32 and verdicts[-1].end.window == "tool_busy", verdicts[-1].end
    assert "busy past the tool-busy maximum (20s)" in verdicts[-1].end.detail


def test_a_hookless_agent_whose_processes_work_past_the_ceiling_is_ended_by_the_tool_busy_window():
    r = rules(tool_silent=3.0, tool_busy_max=20.0, hookless=True)
    _, verdicts = replay(r, [at(t, activity=cpu(t)) for t in range(1, 100)])
    assert verdicts[-1].end.window == "tool_busy", verdicts[-1].end
    assert verdicts[-1].end.detail.startswith("its processes worked for ")
    assert "busy past the tool-busy maximum (20s)" in verdicts[-1].end.detail


def test_a_hookless_tree_that_misses_a_checks_cpu_on_a_loaded_machine_gets_no_fresh_allowance():
    # Every third check the busy tree got no CPU (the machine is loaded): a gap shorter than the
    # tool-silent window does not break its work, so the ceiling still ends it.
    r = rules(tool_silent=3.0, tool_busy_max=20.0, hookless=True)
    used = [t - t // 3 for t in range(1, 100)]  # the CPU seconds used by check t: none in every third second
    _, verdicts = replay(r, [at(t, activity=cpu(used[t - 1])) for t in range(1, 100)])
    assert verdicts[-1].end is not None and verdicts[-1].end.window == "tool_busy", verdicts[-1].end
    assert len(verdicts) < 40  # ended by the ceiling (20 s) and the window (10 s), not left to run


def test_a_hookless_tree_that_rests_a_whole_tool_silent_window_starts_a_fresh_allowance():
    # It works 15 s, rests 5 s (more than the 3 s window), works again: the ceiling counts anew.
    r = rules(tool_silent=3.0, tool_busy_max=20.0, hookless=True)
    used = [min(t, 15) + max(0, t - 20) for t in range(1, 36)]
    _, verdicts = replay(r, [at(t, activity=cpu(used[t - 1])) for t in range(1, 36)])
    assert all(v.end is None for v in verdicts), [v.end for v in verdicts if v.end]


def test_an_idle_tool_past_the_ceiling_is_not_said_to_be_busy():
    # In a tool whose tree never works, a tool-silent window longer than the general one: the
    # general window fires, long past the busy ceiling, and that is what it is called.
    _, verdicts = replay(rules(tool_silent=50.0, tool_busy_max=5.0),
                         [at(t, beat=beat(1, "PreToolUse"), activity=cpu(0)) for t in range(1, 100)])
    assert verdicts[-1].end == End("stuck", 11.0, "no heartbeat for 11.0s (stale after 10s)", window="stale")


def test_the_judge_finding_it_wedged_ends_it_with_the_judges_words():
    wedged = Judgement("the same Bash call 6 times in a row", "critical", 12, "Bash: make", None)
    _, verdicts = replay(rules(), [at(1, beat=beat(0.5)), at(2, beat=beat(1.5), judged=wedged)])
    assert verdicts[0].end is None
    assert verdicts[1].end == End("wedged", 0.0, "the same Bash call 6 times in a row")
    health = verdicts[1].health
    assert (health.classification, health.severity, health.tool_calls, health.reason) == (
        "wedged", "critical", 12, "the same Bash call 6 times in a row")


def test_overtime_at_the_deadline_however_alive_it_is():
    _, verdicts = replay(rules(max_runtime=5.0), [at(t, beat=beat(t - 0.5)) for t in range(1, 100)])
    assert len(verdicts) == 5 and verdicts[-1].end == End("overtime", 0.5, "ran for 5s, past the runtime cap (5s)",
                                                                     window="runtime")


def test_an_api_retry_wait_holds_off_staleness_until_its_announced_delay_is_over():
    first = ApiRetry(attempt=1, max_retries=10, delay=30.0, status=529, error="overloaded", seen=5.0)
    second = ApiRetry(attempt=2, max_retries=10, delay=30.0, status=529, error="overloaded", seen=40.0)
    history = [at(t, retry=None if t < 5 else first if t < 40 else second) for t in range(1, 200)]
    state, verdicts = replay(rules(), history)
    said = [(i + 1, v.notes) for i, v in enumerate(verdicts) if v.notes]
    assert said == [(5, ("the model API is failing (529 overloaded); the agent retries by itself (attempt 1 of 10, "
                         "next in 30s): waiting on the API, not stuck",)),
                    (40, ("the model API is failing (529 overloaded); the agent retries by itself (attempt 2 of 10, "
                          "next in 30s): waiting on the API, not stuck",))]
    assert verdicts[19].health.classification == "healthy" and verdicts[19].health.stall_score == 0.0
    assert len(verdicts) == 81 and verdicts[-1].end == End("stuck", 11.0, STALE, window="stale")  # the second wait ends at 70
    assert state.api_retries == 2


def test_a_full_disk_holds_the_window_and_is_said_once():
    history = [at(t, beat=beat(1), disk_full=2 <= t <= 50) for t in range(1, 200)]
    state, verdicts = replay(rules(), history)
    assert [v.notes for v in verdicts[:3]] == [(), (DISK,), ()]
    assert all(v.end is None for v in verdicts[:60])
    assert len(verdicts) == 61 and verdicts[-1].end == End("stuck", 11.0, STALE, window="stale")  # a window after the last full check
    assert state.disk_full


def test_warn_only_records_would_be_kills_says_them_once_a_window_and_ends_only_at_the_cap():
    state, verdicts = replay(rules(enforce=False, max_runtime=40.0), [at(t) for t in range(1, 100)])
    warned = [(i + 1, v.warning) for i, v in enumerate(verdicts) if v.warning]
    assert warned == [(11, f"would kill as stuck (GENESIS_HEALTH_ENFORCE=false, so it runs on): {STALE}"),
                      (21, "would kill as stuck (GENESIS_HEALTH_ENFORCE=false, so it runs on): no heartbeat for "
                           "21.0s (stale after 10s)"),
                      (31, "would kill as stuck (GENESIS_HEALTH_ENFORCE=false, so it runs on): no heartbeat for "
                           "31.0s (stale after 10s)")]
    assert verdicts[15].health.classification == "stuck" and verdicts[15].end is None
    assert len(verdicts) == 40 and verdicts[-1].end == End("overtime", 40.0, "ran for 40s, past the runtime "
                                                                       "cap (40s)", window="runtime")
    assert len(state.would_kill) == 20  # the newest, from t=21 to t=40
    assert state.would_kill[0] == "no heartbeat for 21.0s (stale after 10s)"
    assert state.would_kill[-1] == "no heartbeat for 40.0s (stale after 10s)"


def test_a_beat_from_another_run_is_ignored_and_one_that_names_no_run_counts():
    _, other = replay(rules(), [at(t, beat=beat(t - 0.5, run_id="run-other")) for t in range(1, 100)])
    assert len(other) == 11 and other[-1].end == End("stuck", 11.0, STALE, window="stale")
    assert other[-1].health.last_event == "none yet"
    _, unnamed = replay(rules(), [at(t, beat=beat(t - 0.5, run_id="")) for t in range(1, 100)])
    assert all(v.end is None for v in unnamed)
    assert this_runs(beat(1, run_id="run-other"), RUN) is None and this_runs(None, RUN) is None


def test_a_hopeless_reader_ends_it_at_once_after_what_the_check_had_to_say():
    state0 = begin(rules())
    obs = at(1, planted="a FIFO was planted at the heartbeat path and removed", disk_full=True,
             upkeep=("the log could not be written",), hopeless="Rate limit reached. Please try again in 1h.")
    state, verdict = decide(rules(), state0, obs)
    assert verdict == Verdict(("a FIFO was planted at the heartbeat path and removed", DISK,
                               "the log could not be written"),
                              end=End("api_fatal", detail="Rate limit reached. Please try again in 1h."))
    assert state.window == state0.window and state.disk_full


def test_what_was_planted_is_said_each_time_and_named_once_in_the_stale_detail():
    planted = "a symlink was planted at the heartbeat path and removed"
    history = [at(t, planted=planted if t in (3, 5) else "") for t in range(1, 100)]
    _, verdicts = replay(rules(), history)
    assert [i + 1 for i, v in enumerate(verdicts) if v.notes == (planted,)] == [3, 5]
    assert verdicts[-1].end == End("stuck", 11.0, f"{STALE}; {planted}", window="stale")
    in_tool = [at(t, beat=beat(1, "PreToolUse"), planted=planted if t == 2 else "") for t in range(1, 100)]
    _, verdicts = replay(rules(tool_silent=3.0), in_tool)
    assert verdicts[-1].end.detail.endswith(f"(tool-silent window 3s); {planted}")


def test_the_decision_is_a_function_of_its_inputs_alone():
    r = rules(tool_silent=3.0)
    state, _ = replay(r, [at(t, beat=beat(1, "PreToolUse"), activity=cpu(t), received=t) for t in range(1, 10)])
    obs = at(10, beat=beat(1, "PreToolUse"), activity=cpu(9.5), received=10)
    assert decide(r, state, obs) == decide(r, state, obs)
    assert decide(r, state, obs)[0] != state  # the carried state moved on, the given one did not


# --- the hang classes with their own short windows, and work in the background -------------

BUILD = ("command Build in the background",)


def test_nothing_on_the_output_and_no_heartbeat_ends_at_the_first_event_window_as_stuck():
    r = rules(stale_after=900.0, first_event_after=60.0)
    _, verdicts = replay(r, [at(t) for t in range(1, 200)])
    assert len(verdicts) == 60
    assert verdicts[-1].end == End("stuck", 60.0, "no first event in 60s: nothing on its output and no heartbeat "
                                                  "since it started (hung at start-up)", window="first_event")


def test_a_first_line_of_output_or_a_first_heartbeat_leaves_the_silence_to_the_general_window():
    r = rules(stale_after=900.0, first_event_after=60.0)
    _, spoke = replay(r, [at(t, received=120 if t >= 2 else 0) for t in range(1, 200)])
    _, beat_once = replay(r, [at(t, beat=beat(3) if t >= 3 else None) for t in range(1, 200)])
    assert all(v.end is None for v in spoke + beat_once) and len(spoke) == len(beat_once) == 199


def test_the_first_event_window_is_off_at_zero():
    _, verdicts = replay(rules(stale_after=900.0), [at(t) for t in range(1, 200)])
    assert all(v.end is None for v in verdicts)


def test_a_result_written_and_no_exit_ends_as_done_at_the_result_exit_window_not_as_stuck():
    r = rules(stale_after=900.0, result_exit_after=30.0, tool_silent=5.0)
    history = [at(t, beat=beat(4), received=500, result_at=5.0 if t >= 5 else None) for t in range(1, 200)]
    _, verdicts = replay(r, history)
    assert len(verdicts) == 35  # the check 30 s after the result
    assert verdicts[-1].end == End("done", 30.0, "result written, process did not exit: its final result came 30s "
                                                 "ago and nothing of its own is left to run (window 30s); the "
                                                 "phase's work is done: ended as done, not stuck",
                                   window="result_exit")
    assert verdicts[-1].health.classification == "healthy"


def test_processes_that_work_after_the_result_put_its_end_off_until_they_have_been_quiet_a_window():
    # A hook of the CLI's end (SessionEnd) that runs for a while: something of its own still runs.
    r = rules(stale_after=900.0, result_exit_after=30.0, tool_silent=5.0)
    used = [min(t, 50) for t in range(1, 200)]  # its tree works until t=50
    history = [at(t, beat=beat(4), received=500, result_at=5.0 if t >= 5 else None, activity=cpu(used[t - 1]))
               for t in range(1, 200)]
    _, verdicts = replay(r, history)
    assert len(verdicts) == 80  # quiet from t=50: 30 s later
    assert verdicts[-1].end.status == "done" and verdicts[-1].end.idle == 75.0


def test_a_new_turn_after_the_result_takes_the_result_back():
    # The CLI woke the model (a background command ended): the reader clears result_at.
    r = rules(stale_after=900.0, result_exit_after=30.0)
    history = [at(t, beat=beat(4), received=500, result_at=5.0 if 5 <= t < 20 else None) for t in range(1, 200)]
    _, verdicts = replay(r, history)
    assert all(v.end is None for v in verdicts)


def test_after_its_result_a_busy_background_command_is_waited_for_a_silent_one_ends_the_phase_as_done():
    r = rules(stale_after=10.0, result_exit_after=30.0, tool_silent=5.0, tool_busy_max=300.0)
    busy = [at(t, beat=beat(t, "Stop", "") if t < 4 else beat(4, "Stop", ""), received=500,
               result_at=5.0 if t >= 5 else None, background=BUILD, activity=cpu(t)) for t in range(1, 120)]
    silent = [at(t, beat=beat(4, "Stop", ""), received=500, result_at=5.0, background=BUILD, activity=cpu(119))
              for t in range(120, 300)]
    _, verdicts = replay(r, busy + silent)
    assert verdicts[0].notes == ("it works in the background (command Build in the background): judged by its "
                                 "processes, busy or silent, as a tool in flight is",)
    # 115 s of busy background work: far past the stale (10 s) and result-exit (30 s) windows.
    assert all(v.end is None for v in verdicts[:119])
    end = verdicts[-1].end
    assert (end.status, end.window, len(verdicts)) == ("done", "result_exit", 124)  # 5 s after it last worked
    assert "waits on its background command Build in the background, whose processes were silent for 5s" in end.detail


def test_busy_background_work_holds_the_stale_window_and_once_silent_the_window_counts_again():
    # No result yet: the model ended its turn and waits on its background build (no hook fires).
    r = rules(stale_after=10.0, tool_silent=5.0, tool_busy_max=300.0)
    busy = [at(t, beat=beat(2, "Stop", ""), background=BUILD, activity=cpu(t)) for t in range(3, 60)]
    silent = [at(t, beat=beat(2, "Stop", ""), background=BUILD, activity=cpu(59)) for t in range(60, 200)]
    _, verdicts = replay(r, busy + silent)
    assert all(v.end is None for v in verdicts[:57])
    assert verdicts[-1].end.status == "stuck" and verdicts[-1].end.window == "stale"
    assert len(verdicts) == 57 + 11  # the stale window runs from the last busy check (t=59): ends at t=70


def test_background_work_busy_past_the_tool_busy_maximum_no_longer_holds_the_stale_window():
    r = rules(stale_after=10.0, tool_silent=5.0, tool_busy_max=30.0)
    _, verdicts = replay(r, [at(t, beat=beat(2, "Stop", ""), background=BUILD, activity=cpu(t))
                             for t in range(3, 200)])
    assert verdicts[-1].end.status == "stuck" and len(verdicts) < 60


def test_warn_only_mode_does_not_end_a_run_that_wrote_its_result():
    r = rules(stale_after=900.0, result_exit_after=30.0, enforce=False)
    _, verdicts = replay(r, [at(t, beat=beat(4), received=500, result_at=5.0) for t in range(5, 200)])
    assert all(v.end is None for v in verdicts)
    assert any("would kill" in v.warning for v in verdicts)


# --- a wake-up the CLI scheduled itself ---------------------------------------------------------

def test_a_scheduled_wake_up_is_waited_for_past_every_window_until_it_comes():
    # The turn ends at t=5 with its result; the wake-up is due at t=400, fires at t=420 (late, in the margin).
    r = rules(stale_after=10.0, result_exit_after=30.0, tool_silent=5.0)
    asleep = [at(t, beat=beat(4, "Stop", ""), received=500, result_at=5.0, wakeup_at=400.0) for t in range(5, 420)]
    woken = [at(t, beat=beat(t, "UserPromptSubmit", ""), received=900) for t in range(420, 440)]
    _, verdicts = replay(r, asleep + woken)
    assert all(v.end is None for v in verdicts)
    assert verdicts[200].health.classification == "healthy"  # not slow, not stuck: asleep on purpose
    said = [n for v in verdicts for n in v.notes if "wake-up" in n]
    assert said == ["its turn is over and it waits for the wake-up it scheduled, due in 395s: asleep on purpose, "
                    "not stuck, until then plus 60s"]


def test_a_scheduled_wake_up_that_never_comes_is_stuck_at_its_due_time_plus_the_margin():
    r = rules(stale_after=10.0, result_exit_after=30.0, tool_silent=5.0, wakeup_margin=60.0)
    _, verdicts = replay(r, [at(t, beat=beat(4, "Stop", ""), received=500, result_at=5.0, wakeup_at=400.0)
                             for t in range(5, 1000)])
    end = verdicts[-1].end
    assert (end.status, end.window, 5 + len(verdicts) - 1) == ("stuck", "wakeup", 460)
    assert end.detail == ("scheduled wake-up did not come: it was due 60s ago (margin 60s) and nothing else will "
                          "wake it")


def test_a_wake_up_scheduled_by_a_turn_that_then_hangs_holds_no_window():
    # No result: the turn did not end, so the wake-up is no reason for its silence.
    r = rules(stale_after=10.0)
    _, verdicts = replay(r, [at(t, beat=beat(4), received=500, wakeup_at=400.0) for t in range(5, 1000)])
    _, without = replay(r, [at(t, beat=beat(4), received=500) for t in range(5, 1000)])
    assert (verdicts[-1].end.window, len(verdicts)) == ("stale", len(without)) and len(without) < 15


def test_a_woken_turn_that_hangs_is_stuck_one_stale_window_after_it_woke():
    r = rules(stale_after=10.0, result_exit_after=30.0)
    asleep = [at(t, beat=beat(4, "Stop", ""), received=500, result_at=5.0, wakeup_at=100.0) for t in range(5, 100)]
    hung = [at(t, beat=beat(4, "Stop", ""), received=500) for t in range(100, 400)]  # woken, then nothing
    _, verdicts = replay(r, asleep + hung)
    end = verdicts[-1].end
    assert (end.status, end.window, 5 + len(verdicts) - 1) == ("stuck", "stale", 110)

"""Silences on purpose and the hang classes, with the real Claude Code through the real loop.

Each case is scripted by the stub of the Messages API (tests/e2e/stub_api.py); what the
pinned CLI emits in each is written down in docs/concepts/silences.md. A case the real CLI
does not show by itself (a CLI silent from its start) is played by a stand-in `claude` that
behaves so, and says it. Only the Builder runs: its case is each night's point. The readers'
and the watcher's decisions on each case are replayed on the recordings and scripted histories
in tests/agents/test_claude_stream.py and tests/watch/test_decide.py.
"""

from __future__ import annotations

import json
import os
import sys
import time

import pytest
from e2e.harness import LOOP_ENV, Loop, as_agent, genesis
from e2e.stub_api import StubAPI
from helpers.agent import script
from helpers.state import events_of

from genesis import exitcodes

pytestmark = pytest.mark.claude

FLAGS = "-p --output-format stream-json --verbose --dangerously-skip-permissions"


@pytest.fixture
def stub():
    api = StubAPI().start()
    yield api
    api.shutdown()


@pytest.fixture
def e2e(claude, stub, project, hermetic, tmp_path):
    """A project with the hook installed the user's way, and the loop's environment."""
    as_agent(project)
    genesis("--project", str(project), "hook", "install")
    env = {**os.environ, **LOOP_ENV,
           "ANTHROPIC_BASE_URL": stub.url, "ANTHROPIC_API_KEY": "sk-ant-stub",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
           "DISABLE_AUTOUPDATER": "1", "DISABLE_ERROR_REPORTING": "1",
           "GENESIS_AGENT_CMD": f"{claude} {FLAGS}"}
    if os.geteuid() == 0:
        env["IS_SANDBOX"] = "1"  # Claude Code refuses to skip permissions as root otherwise
    env["GENESIS_PHASES"] = "Builder"  # the Builder's silence is each test's point
    return Loop(project, env, tmp_path)


def ends(loop: Loop, phase: str = "Builder") -> list[dict]:
    return [e for e in events_of(loop.project) if e["event"] == "phase_end" and e["phase"] == phase]


def test_a_background_build_busy_past_the_stale_window_is_waited_for_and_the_phase_finishes(e2e):
    # The CLI writes its result at once and waits, with no hook and no output, for its build: 12 s,
    # two of the 6 s stale windows.
    e2e.phase("Builder", "background", seconds=12)
    done, _ = e2e.run("--max-iterations", "1")
    assert done.returncode == 0, done.stdout
    assert "it works in the background (command Build in the background)" in done.stdout
    assert "Builder: finished" in done.stdout and "Builder: stuck" not in done.stdout
    [end] = ends(e2e)
    assert (end["status"], end["ending"], end["duration"] > 12) == ("exited", "finished", True)
    assert (e2e.project / "bg.txt").read_text() == "built\n"
    assert e2e.leftovers() == []


def test_an_async_sub_agent_busy_past_the_stale_window_is_the_agent_working_and_the_phase_finishes(e2e):
    # The main turn ends at once (no result yet); the sub-agent's build works 16 s, two 8 s stale windows.
    e2e.phase("Builder", "async_agent", seconds=16)
    e2e.env.update(HEARTBEAT_STALE="8s", TOOL_SILENT="5s")
    done, _ = e2e.run("--max-iterations", "1")
    assert done.returncode == 0, done.stdout
    assert "Builder: finished" in done.stdout and "Builder: stuck" not in done.stdout
    [end] = ends(e2e)
    assert (end["status"], end["ending"], end["duration"] > 16) == ("exited", "finished", True)
    assert (e2e.project / "sub.txt").read_text() == "sub\n"
    assert e2e.leftovers() == []


def test_a_result_written_while_an_idle_background_command_holds_the_cli_ends_as_done_not_stuck(e2e):
    e2e.phase("Builder", "background_hang")
    e2e.env.update(HEARTBEAT_STALE="120s", TOOL_SILENT="3s", AGENT_RESULT_EXIT_WINDOW="5s")
    done, _ = e2e.run("--max-iterations", "1")
    assert done.returncode == 0, done.stdout
    assert "result written, process did not exit" in done.stdout, done.stdout
    [end] = ends(e2e)  # done: not retried as a stuck phase is
    assert (end["status"], end["window"], end["ending"]) == ("done", "result_exit", "finished")
    assert end["result"] == "Started it in the background." and end["duration"] < 60
    assert "waits on its background command Serve in the background" in end["detail"]
    assert (e2e.project / "bg-shell.pid").read_text().strip().isdigit()  # the command ran, and was ended:
    assert e2e.leftovers() == []


def test_a_wake_up_the_model_scheduled_is_waited_for_past_the_windows_and_the_woken_turn_finishes_the_phase(e2e):
    # ScheduleWakeup (60 s, due at the next whole minute): the CLI writes its result and waits, idle, with no
    # hook and no output, then runs the woken turn. Past the stale (20 s) and result-exit (5 s) windows.
    e2e.phase("Builder", "wakeup")
    # The wake-up is due 60 to 120 s after it is scheduled, by the clock's second: the harness's 120 s
    # runtime cap would end the phase as overtime whenever the first turn ended late in its minute.
    e2e.env.update(HEARTBEAT_STALE="20s", AGENT_RESULT_EXIT_WINDOW="5s", TOOL_SILENT="5s", AGENT_MAX_RUNTIME="4m")
    done, _ = e2e.run("--max-iterations", "1")
    assert done.returncode == 0, done.stdout
    assert "its turn is over and it waits for the wake-up it scheduled, due in" in done.stdout
    assert "Builder: stuck" not in done.stdout and "result written, process did not exit" not in done.stdout
    [end] = ends(e2e)
    assert (end["status"], end["ending"], end["result"]) == ("exited", "finished", "Woken: the build is done.")
    assert end["duration"] > 60
    assert e2e.leftovers() == []


def test_a_refusal_by_the_models_safeguards_ends_the_phase_as_refused_and_the_loop_with_37(e2e, stub):
    e2e.phase("Builder", "refusal")
    done, _ = e2e.run("--max-iterations", "3")
    assert done.returncode == exitcodes.POLICY_REFUSED, done.stdout
    assert "no fallback agent is set (GENESIS_FALLBACK_AGENT_CMD)" in done.stdout
    assert "Builder: refused by the model's safeguards: API Error: Opus 4.8's safeguards flagged" in done.stdout
    assert "Retrying the same agent would be refused again" in done.stdout
    [end] = ends(e2e)  # not retried
    assert (end["ending"], end["api_error"]["code"]) == ("refused", "refusal")
    assert len(stub.messages()) == 3  # the CLI's own: the refused turn, once more, its fallback model


def test_a_refusal_is_retried_with_the_fallback_agent_another_model_which_finishes_the_phase(e2e, stub, claude):
    e2e.phase("Builder", "refusal", allow="claude-haiku-4-5")
    e2e.env["GENESIS_FALLBACK_AGENT_CMD"] = f"{claude} --model claude-haiku-4-5 {FLAGS}"
    done, _ = e2e.run("--max-iterations", "1")
    assert done.returncode == 0, done.stdout
    assert "The same agent would be refused again; the fallback agent" in done.stdout
    first, second = ends(e2e)
    assert (first["ending"], first["api_error"]["code"]) == ("refused", "refusal")
    assert (second["ending"], second["result"]) == ("finished", "Done by another model.")
    [retry] = [e for e in events_of(e2e.project) if e["event"] == "retry"]
    assert retry["type"] == "refused" and "claude-haiku-4-5" in retry["new_cmd"]
    builder = [r["body"]["model"] for r in stub.messages() if "SCENARIO: refusal" in json.dumps(r["body"])]
    assert builder[-1] == "claude-haiku-4-5" and "claude-haiku-4-5" not in builder[:3]  # refused 3 times first


def test_a_limit_weeks_away_ends_the_night_with_exit_36_and_the_date(e2e, stub):
    e2e.phase("Builder", "progress")
    del e2e.env["ANTHROPIC_API_KEY"]
    e2e.env["CLAUDE_CODE_OAUTH_TOKEN"] = "tok-stub"  # a subscriber
    window = stub.limit(None, time.time() + 20 * 86400, "seven_day")
    done, _ = e2e.run("--max-iterations", "3")
    assert done.returncode == exitcodes.LIMIT_FAR, done.stdout
    assert "a monthly or credit-pool limit, not a night's wait: stopping" in done.stdout
    assert time.strftime("%Y-%m-%d", time.gmtime(window.resets_at)) in done.stdout
    assert len(stub.messages()) == 1


# --- what only a hung or buggy CLI does: a stand-in `claude` ---------------------------------

SILENT = """#!{python}
import time
time.sleep(600)
"""

def stand_in(e2e: Loop, text: str) -> None:
    folder = e2e.tmp / "bin"
    folder.mkdir(exist_ok=True)
    path = script(folder / "claude", text.format(python=sys.executable))
    e2e.env["GENESIS_AGENT_CMD"] = f"{path} {FLAGS}"


def test_a_cli_silent_from_its_start_is_stuck_at_the_first_event_window(e2e):
    # The real CLI writes its init record within seconds, before any API call (docs/concepts/silences.md).
    stand_in(e2e, SILENT)
    e2e.env.update(HEARTBEAT_STALE="120s", AGENT_FIRST_EVENT_WINDOW="3s")
    done, _ = e2e.run("--max-iterations", "1")
    assert done.returncode == 0, done.stdout
    assert "Builder: stuck: no first event in 3s: nothing on its output and no heartbeat" in done.stdout
    builders = ends(e2e)
    assert [(e["status"], e["window"]) for e in builders] == [("stuck", "first_event")] * 2  # retried once
    assert all(e["duration"] < 30 for e in builders)
    assert e2e.leftovers() == []


def test_a_dead_stream_is_ended_by_the_clis_own_watchdog_at_the_window_genesis_sets_and_read_as_an_outage(e2e, stub):
    # Every answer stops after message_start and the connection stays open: only the CLI sees no byte comes.
    e2e.phase("Builder", "drop")
    # Its first run outlasts the outage's maximum (6 s): the loop stops after it (the backoff between
    # runs is tests/e2e/test_night.py's).
    e2e.env.update(AGENT_STREAM_IDLE_WINDOW="10s", HEARTBEAT_STALE="120s", GENESIS_MAX_OUTAGE_MINUTES="0.1")
    done, _ = e2e.run("--max-iterations", "3")
    assert done.returncode == exitcodes.API_OUTAGE, done.stdout
    builders = ends(e2e)
    assert len(builders) == 1 and all((e["status"], e["ending"], e["api_error"]["code"]) == ("exited", "outage",
                                                                                  "stream_idle_timeout")
                            for e in builders)
    first = [r["at"] for r in stub.messages()][:2]
    assert 9.5 <= first[1] - first[0] < 60  # the CLI asked again after its 10 s watchdog, not its 5 min

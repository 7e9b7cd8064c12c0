"""An agent inside its CLI's own API retries is waiting on the API, not stuck.

Claude Code retries a failing API call by itself (about 190 s in all by default) and makes
no tool call meanwhile, so no heartbeat comes. With stream-json output it says so: each
`api_retry` event names the delay before its next try. The watcher counts the agent alive
until that delay is over, and counts silence again after it. Real processes print
recorded-shape events; the real CLI's are in tests/fixtures/claude/.
"""

from __future__ import annotations

import json

import pytest
from helpers.agent import supervised

from genesis.agents.claude.stream import StreamReader
from genesis.health.heartbeat import hook_script

RETRY = {"type": "system", "subtype": "api_retry", "attempt": 1, "max_retries": 10, "retry_delay_ms": 0,
         "error_status": 529, "error": "overloaded", "session_id": "s-1"}


def run_agent(tmp_path, delays_ms: list[int], pause: float):
    """An agent that beats once, then prints an api_retry event per delay, `pause` s apart, then
    fails as the CLI does when its retries are spent."""
    lines = [json.dumps({**RETRY, "attempt": n, "retry_delay_ms": d}) for n, d in enumerate(delays_ms, 1)]
    script = (
        "import subprocess, sys, time\n"
        "subprocess.run(['bash', sys.argv[1], 'Bash'], stdin=subprocess.DEVNULL)\n"
        f"for line in {lines!r}:\n"
        f"    print(line, flush=True); time.sleep({pause})\n"
        "print('{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":true,\"terminal_reason\":\"api_error\","
        "\"api_error_status\":529,\"result\":\"API Error: 529 Overloaded.\",\"num_turns\":1,"
        "\"total_cost_usd\":0,\"session_id\":\"s-1\"}', flush=True)\n"
        "sys.exit(1)\n")
    return supervised(tmp_path, script, run_id="run-api", name="agent.py", args=(str(hook_script()),),
                      raw_log=tmp_path / "agent.jsonl", reader=StreamReader(), count_output=False)


@pytest.mark.whole
@pytest.mark.fault(41)
def test_an_agent_retrying_the_api_for_longer_than_the_window_is_not_killed(tmp_path):
    # Three retries announced 2.5 s apart, each with a 2.5 s delay: 7.5 s of silence, the window 1 s.
    out, notes, run = run_agent(tmp_path, [2500, 2500, 2500], pause=2.5)
    assert out.status == "exited" and out.returncode == 1, out
    assert out.api_retries == 3
    assert any("waiting on the API, not stuck" in n for n in notes)
    assert out.ending.api_error is not None and out.ending.api_error.retryable
    transcript = run.log.read_text()
    assert "API retry 1/10" in transcript and "API retry 3/10" in transcript
    assert transcript.count('"type"') == 0  # the transcript is readable, the raw stream is beside it
    assert run.raw_log.read_text().count('"api_retry"') == 3


@pytest.mark.fault(41)
def test_silence_past_the_announced_delay_is_stuck_again(tmp_path):
    # The CLI said it would retry in 0.2 s, then fell silent for good: stuck one window later.
    out, _, _ = run_agent(tmp_path, [200], pause=60)
    assert out.status == "stuck", out
    assert out.api_retries == 1


@pytest.mark.fault(42)
def test_a_cli_that_keeps_retrying_a_refused_login_is_ended_without_waiting_out_its_retries(tmp_path):
    # Claude Code retries a 401 for minutes with its default retries; three refusals in a row
    # are enough to know no retry will help (a token refresh had its chance).
    refused = [json.dumps({**RETRY, "attempt": n, "retry_delay_ms": 60000, "error_status": 401,
                           "error": "authentication_failed"}) for n in (1, 2, 3)]
    script = ("import time\n"
              f"for line in {refused!r}:\n"
              "    print(line, flush=True)\n"
              "time.sleep(120)\n")
    out, _, _ = supervised(tmp_path, script, run_id="run-api", name="agent.py", raw_log=tmp_path / "agent.jsonl",
                           reader=StreamReader(), stale_after=30.0, max_runtime=60.0)
    assert out.status == "api_fatal", out
    assert out.kill is not None and out.kill.survivors == ()
    err = out.ending.api_error
    assert (err.retryable, err.status, err.code) == (False, 401, "authentication_failed")
    assert "refused 3 tries in a row" in err.message


def test_a_cli_retrying_into_a_usage_limit_hours_away_is_ended_and_the_limit_waited_out_the_loops_way(tmp_path):
    # aider retries a rate limit for two minutes whatever its reset; one that resets in an hour
    # ends the run at aider's first retry, and the phase ends as a limit (the loop then waits).
    from genesis.agents.aider import AiderReader
    from genesis.loop.ending import how_it_ended

    said = ["litellm.RateLimitError: RateLimitError: OpenAIException - Rate limit reached. Please try again in 1h.",
            "The API provider has rate limited you. Try again later or check your quotas.",
            "Retrying in 0.2 seconds..."]
    script = ("import time\n"
              f"for line in {said!r}:\n"
              "    print(line, flush=True)\n"
              "time.sleep(120)\n")
    out, _, _ = supervised(tmp_path, script, run_id="run-api", name="agent.py", reader=AiderReader(),
                           stale_after=30.0, max_runtime=60.0, hookless=True, tool_silent=30.0)
    assert out.status == "api_fatal" and out.kill is not None and out.kill.survivors == (), out
    assert out.ending.limit.kind == "rate_limit" and out.ending.api_error is None
    assert how_it_ended(out) == "limit"

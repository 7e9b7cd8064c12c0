"""A night the API does not always serve: usage limits, outages and errors, with the real `claude`.

First the stub itself is checked against the real CLI: in each refusal mode `claude -p`
prints exactly the line measured against the real API's answers. Then whole nights run
with the shipped defaults (phases, triggers, prompts over TASKS.md, the hook installed the
user's way); only time is compressed, and the user's own environment for `claude` is set
where a case needs it (a subscriber's token, its retry count, its output format). The
assertions read the loop's events, the stub's record of every request and the exit code;
time only as the order of recorded timestamps against the stub's windows.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
from e2e.harness import (GENESIS, LOOP, NIGHT_KNOBS, agent_log, checklist, commits, leftovers, night_env, of, plan_night,
                         run_events, run_to_end)
from e2e.stub_api import StubAPI, Window, slug

from genesis.config import KNOBS

JITTER_DEFAULT = next(k.default for k in KNOBS if k.name == "GENESIS_LIMIT_JITTER_PERCENT")  # loops resume apart

pytestmark = pytest.mark.claude

TASKS = ["Add a /health endpoint with a test", "Log each request", "Read the port from PORT"]
ECHO = "You've hit your 5-hour limit · resets 5:13am (UTC)"
SERVER_HINT = ("This is a server-side issue, usually temporary — try again in a moment. If it persists, "
               "check your inference gateway (127.0.0.1:{port}).")
SLACK = 1.0  # seconds from an agent's exit to the wait being planned, at most
REQUESTS_PER_PHASE = 5  # the stub's Builder and Criticizer: cat, write or read, mark, commit, final text


def clock(epoch: float) -> str:
    """A reset as Claude Code shows it: 9:17am, 9am (no minutes on the hour), in UTC."""
    t = datetime.fromtimestamp(epoch, timezone.utc)
    hour = t.hour % 12 or 12
    return f"{hour}{t.strftime(':%M') if t.minute else ''}{'am' if t.hour < 12 else 'pm'}"


def day(epoch: float) -> str:
    t = datetime.fromtimestamp(epoch, timezone.utc)
    return f"{t.strftime('%b')} {t.day}, {clock(epoch)}"


def claude_env(stub: StubAPI, home: Path, subscriber: bool, **extra: str) -> dict[str, str]:
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "TZ": "UTC", "ANTHROPIC_BASE_URL": stub.url,
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1",
           "DISABLE_ERROR_REPORTING": "1", "IS_SANDBOX": "1", **extra}
    env["CLAUDE_CODE_OAUTH_TOKEN" if subscriber else "ANTHROPIC_API_KEY"] = "tok-stub" if subscriber else "sk-ant-stub"
    return env


# mode -> (set the refusal on the stub, a subscriber?, the one line claude prints, requests made)
MODES = {
    "five_hour": (lambda api, now: api.limit(None, now + 3600), True,
                  lambda w, port: f"You've hit your 5-hour limit · resets {clock(w.resets_at)} (UTC)", 1),
    "seven_day": (lambda api, now: api.limit(None, now + 3 * 86400, "seven_day"), True,
                  lambda w, port: f"You've hit your weekly limit · resets {day(w.resets_at)} (UTC)", 1),
    "rate_limit_api_key": (lambda api, now: api.limit(None, now + 3600), False,
                           lambda w, port: "API Error: Request rejected (429) · Rate limited", 1),
    "overloaded_529": (lambda api, now: api.outage(60), False,
                       lambda w, port: "API Error: 529 Overloaded. " + SERVER_HINT.format(port=port), 2),
    "server_500": (lambda api, now: api.outage(60, status=500), False,
                   lambda w, port: "API Error: 500 Internal server error. " + SERVER_HINT.format(port=port), 2),
    "auth_401": (lambda api, now: api.fail(401, "authentication_error", "invalid x-api-key"), False,
                 lambda w, port: "Invalid API key · Fix external API key", 1),
    "credit_400": (lambda api, now: api.fail(400, "invalid_request_error", "Your credit balance is too low to "
                                             "access the Anthropic API. Please go to Plans & Billing to upgrade "
                                             "or purchase credits."), False,
                   lambda w, port: "Credit balance is too low", 1),
}


@pytest.mark.parametrize("mode", sorted(MODES))
def test_the_stub_refuses_as_the_real_api_does(claude, fast_stub, tmp_path, mode):
    """`claude -p` in text mode prints exactly what it printed against the real answers."""
    refuse, subscriber, line, requests = MODES[mode]
    window = refuse(fast_stub, time.time())
    # One retry where the CLI retries (5xx), none where it would retry a 401 for minutes.
    env = claude_env(fast_stub, tmp_path, subscriber, CLAUDE_CODE_MAX_RETRIES="1" if requests > 1 else "0")
    done = subprocess.run([str(claude), "-p", "--dangerously-skip-permissions", "say hi"], env=env, cwd=tmp_path,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (1, line(window, fast_stub.server_address[1]) + "\n"), done.stderr
    asked = fast_stub.messages()
    assert [r["status"] for r in asked] == [window.status] * requests
    assert all(window.covers(r["at"]) for r in asked)


def test_a_refused_limit_in_stream_json_carries_the_headers_reset(claude, fast_stub, tmp_path):
    window = fast_stub.limit(None, time.time() + 1800)
    done = subprocess.run([str(claude), "-p", "--output-format", "stream-json", "--verbose",
                           "--dangerously-skip-permissions", "say hi"], env=claude_env(fast_stub, tmp_path, True),
                          cwd=tmp_path, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    events = [json.loads(line) for line in done.stdout.splitlines()]
    limit = [e["rate_limit_info"] for e in events if e["type"] == "rate_limit_event"]
    assert limit == [{"status": "rejected", "resetsAt": window.resets_at, "rateLimitType": "five_hour",
                      "isUsingOverage": False}]
    result = events[-1]
    assert (result["type"], result["is_error"], result["api_error_status"]) == ("result", True, 429)
    assert result["result"] == f"You've hit your 5-hour limit · resets {clock(window.resets_at)} (UTC)"


# --- whole nights -------------------------------------------------------------------------

def night(project: Path, env: dict[str, str], iterations: int = 8) -> tuple[subprocess.CompletedProcess, list[dict]]:
    done = run_to_end(["bash", str(LOOP), "--project", str(project), "--max-iterations", str(iterations)], env=env)
    return done, run_events(project)


def pairs(evs: list[dict], iteration: int, phase: str) -> list[tuple[str, str]]:
    """The phase_start/phase_end events of one phase in one iteration, in order."""
    return [(e["event"], e.get("ending", "")) for e in evs if e["event"] in ("phase_start", "phase_end")
            and (e["iteration"], e["phase"]) == (iteration, phase)]


def ended_done(done: subprocess.CompletedProcess, evs: list[dict]) -> None:
    end = of(evs, "loop_end")[-1]
    assert done.returncode == 0 and end["exit_code"] == 0, done.stdout
    assert end["reason"].startswith("done"), end


def inside(stub: StubAPI, window: Window) -> list[dict]:
    return [r for r in stub.messages() if window.covers(r["at"])]


def all_built(project: Path, tasks: list[str]) -> None:
    assert checklist(project, "HEAD") == {t: "x" for t in tasks}
    subjects = [s for _, s in commits(project)]
    assert all(f"build: {t}" in subjects for t in tasks), subjects


@pytest.mark.fault(38, 43)
def test_a_limit_mid_night_is_waited_out_a_quoted_one_is_not_and_the_done_phrase_ends_the_night(claude, fast_stub,
                                                                                                 project):
    """Three tasks, the first naming a limit: every phase `cat`s it, and iteration 1's Builder
    quotes it in its final message. Iteration 2's Builder meets a real five-hour limit at its
    second request (after its `cat TASKS.md`), for about 8 s; after the wait it runs again, and
    its final message holds the completion phrase, which ends the night with a task still open.
    (The readers' side of a quoted limit, in stream-json and text: tests/agents/test_claude_stream.py.)"""
    tasks = [f"Explain '{ECHO}' in the FAQ", *TASKS[1:]]
    plan_night(project, tasks)
    window = fast_stub.limit_after(2 * REQUESTS_PER_PHASE + 2, 8)  # iteration 1 is a Builder and a Criticizer
    phrase = f"Built '{tasks[1]}'"

    done, evs = night(project, night_env(fast_stub, subscriber=True, GENESIS_DONE_WHEN=f"phrase:{phrase}"))

    ended_done(done, evs)
    # Iteration 2's Builder said the phrase; the third task is still open, so only the phrase ended it.
    assert checklist(project, "HEAD") == {tasks[0]: "x", tasks[1]: "x", tasks[2]: " "}
    subjects = [s for _, s in commits(project)]
    assert all(f"build: {t}" in subjects for t in tasks[:2]), subjects
    # The quote paused nothing: iteration 1's Builder said it and finished, its work done.
    assert ECHO in agent_log(evs, 1, "Builder") and (project / slug(tasks[0])).is_file()
    assert [(e["iteration"], e["phase"]) for e in of(evs, "phase_end") if e["limit"] is not None] == [(2, "Builder")]
    margin = float(NIGHT_KNOBS["GENESIS_LIMIT_MARGIN_SECONDS"])
    # The API: exactly one request inside the window; the next one after the reset and the margin.
    asked = fast_stub.messages()
    refused = inside(fast_stub, window)
    assert len(refused) == 1 and refused[0]["status"] == 429, refused
    after = [r for r in asked if r["at"] > refused[0]["at"]]
    assert after and after[0]["at"] >= window.resets_at + margin
    assert [r["status"] for r in asked if r is not refused[0]] == [200] * (len(asked) - 1)
    # The loop: iteration 2's Builder ended on the limit, waited, and ran again to the end.
    assert pairs(evs, 2, "Builder") == [("phase_start", ""), ("phase_end", "limit"),
                                        ("phase_start", ""), ("phase_end", "finished")]
    limited = [e for e in of(evs, "phase_end") if e["ending"] == "limit"]
    assert len(limited) == 1 and limited[0]["limit"]["resets_at"] == window.resets_at, limited
    assert limited[0]["limit"]["kind"] == "five_hour"
    waits = of(evs, "wait_start")
    assert [(w["kind"], w["iteration"], w["phase"]) for w in waits] == [("limit", 2, "Builder")]
    jitter = margin * float(JITTER_DEFAULT) / 100
    assert window.resets_at + margin <= waits[0]["until"] <= window.resets_at + margin + jitter
    assert [w["how"] for w in of(evs, "wait_end")] == ["done"]
    retried = [e for e in of(evs, "phase_start") if (e["iteration"], e["phase"]) == (2, "Builder")][1]
    assert retried["epoch"] >= waits[0]["until"]
    # Both iterations made progress, the waiting one too; the wait itself never counted.
    # (An idle iteration that waited is not counted either: tests/loop/test_iteration.py.)
    ends = of(evs, "iteration_end")
    assert [(e["iteration"], e["progress"], e["no_progress"]) for e in ends] == [(1, True, 0), (2, True, 0)]
    assert [e["iteration"] for e in ends if e["waited"]] == [2]
    assert leftovers(project) == []


@pytest.mark.fault(39)
def test_a_weekly_limit_beyond_the_longest_wait_stops_the_night_with_exit_20(claude, fast_stub, project):
    plan_night(project, TASKS)
    window = fast_stub.limit(None, time.time() + 3 * 86400, "seven_day")

    done, evs = night(project, night_env(fast_stub, subscriber=True, TZ="UTC"))

    assert done.returncode == 20 and of(evs, "loop_end")[-1]["exit_code"] == 20, done.stdout
    assert [r["status"] for r in fast_stub.messages()] == [429]
    assert [(e["phase"], e["ending"]) for e in of(evs, "phase_end")] == [("Builder", "limit")]
    assert of(evs, "phase_end")[0]["limit"]["resets_at"] == window.resets_at
    assert of(evs, "wait_start") == []
    # The console says when the limit resets and to restart after it.
    reset = datetime.fromtimestamp(window.resets_at, timezone.utc)
    said = [line for line in done.stdout.splitlines() if "restart" in line.lower()]
    assert said, done.stdout
    assert any(reset.strftime("%Y-%m-%d %H:%M") in line for line in said), said
    assert leftovers(project) == []


@pytest.mark.fault(40)
def test_an_api_outage_is_retried_on_the_backoff_schedule(claude, fast_stub, project):
    tasks = TASKS[:1]
    plan_night(project, tasks)
    # From the second request of iteration 1's Builder, overloaded for about 8 s: typically
    # three attempts meet it (backoff 1, 2, then 4 s, the cap) and the fourth gets through.
    window = fast_stub.outage(8, after=2)
    first, cap = float(NIGHT_KNOBS["GENESIS_BACKOFF_FIRST_SECONDS"]), float(NIGHT_KNOBS["GENESIS_BACKOFF_MAX_SECONDS"])

    done, evs = night(project, night_env(fast_stub, CLAUDE_CODE_MAX_RETRIES="1"))

    ended_done(done, evs)
    all_built(project, tasks)
    waits = of(evs, "wait_start")
    assert len(waits) >= 2, waits  # at least one doubling to check
    assert all((w["kind"], w["iteration"], w["phase"]) == ("outage", 1, "Builder") for w in waits), waits
    assert [w["attempt"] for w in waits] == list(range(1, len(waits) + 1))
    asked = fast_stub.messages()
    failed = [e for e in of(evs, "phase_end") if e["ending"] == "outage"]
    assert len(failed) == len(waits)
    for attempt, (e, w) in enumerate(zip(failed, waits), start=1):
        # From the failed attempt's end to the wait's end: the schedule's delay (the jitter
        # only shortens it; the slack is the watcher's own work after the agent exits) ...
        planned, gone = min(first * 2 ** (attempt - 1), cap), e["started"] + e["duration"]
        assert 0.8 * planned - 0.01 <= w["until"] - gone <= planned + SLACK, (planned, e, w)
        # ... with no request while it is waited out, and the next one after it. (From the wait's
        # start: `started` is taken before the phase's preparation, so started + duration can fall
        # before the agent's last request.)
        assert not [r for r in asked if w["epoch"] <= r["at"] < w["until"]], w
        assert [r for r in asked if r["at"] >= w["until"]], w
    # Each attempt met the outage (two requests: claude's own retry), the last one got through
    # (its first request may still have met the outage's last moment).
    endings = pairs(evs, 1, "Builder")
    assert endings == [("phase_start", ""), ("phase_end", "outage")] * len(waits) + [("phase_start", ""),
                                                                                        ("phase_end", "finished")]
    refused = [r for r in asked if r["status"] != 200]
    assert refused == inside(fast_stub, window) and 2 * len(waits) <= len(refused) <= 2 * len(waits) + 1
    outage = [e for e in of(evs, "phase_end") if e["ending"] == "outage"][0]
    assert outage["api_error"]["retryable"] is True and outage["api_error"]["status"] == 529
    assert [w["how"] for w in of(evs, "wait_end")] == ["done"] * len(waits)
    assert all(e["no_progress"] == 0 for e in of(evs, "iteration_end"))
    assert leftovers(project) == []


def test_a_refused_tool_permission_ends_the_night_at_the_first_refusal_naming_the_fix(claude, fast_stub, project):
    """GENESIS_AGENT_CMD="claude -p", without --dangerously-skip-permissions. The real CLI (2.1.329)
    runs the Builder's `cat TASKS.md` (read-only: `"permission_decision": {"decision": "accept"}`);
    its next call, a Write into the project, needs approval, which `-p` has nobody to give:

      {"type":"system","subtype":"permission_denied","tool_name":"Write","tool_use_id":"toolu_…",
       "message":"Claude requested permissions to write to …/add-a-health-endpoint-with-a-test.txt,
       but you haven't granted it yet."}
      {"type":"user","message":{"role":"user","content":[{"type":"tool_result","content":"Claude
       requested permissions to write to …, but you haven't granted it yet.","is_error":true,
       "tool_use_id":"toolu_…"}]},"tool_use_result":"Error: Claude requested …",
       "tool_result_meta":[{"id":"toolu_…","non_execution_kind":"user-rejected",
       "permission_decision":{"decision":"reject","source":"config"}}]}

    Its Bash calls after it are refused alike ("message":"This command requires approval",
    "decision_reason_type":"other"), and left alone it ends with a `result` of subtype success,
    exit 0, each refused call in `permission_denials` (tests/fixtures/claude/permission_refused.jsonl).
    Before, every phase "finished" with nothing done until the breaker opened; now the first
    refusal ends the phase and the night with exit 22 and the fix, in the console, the ledger and
    the report."""
    plan_night(project, TASKS)

    done, evs = night(project, night_env(fast_stub, GENESIS_AGENT_CMD="claude -p"))

    assert done.returncode == 22, done.stdout
    (ended,) = of(evs, "phase_end")
    assert (ended["phase"], ended["ending"]) == ("Builder", "fatal"), ended
    assert ended["api_error"]["code"] == "permission_refused", ended
    fix = "Add --dangerously-skip-permissions to GENESIS_AGENT_CMD (or --permission-mode bypassPermissions"
    said = f"Claude Code said: Claude requested permissions to write to {project / slug(TASKS[0])}"
    assert ended["detail"].startswith("Claude Code refused a Write call that needs approval") and fix in ended["detail"]
    assert said in ended["detail"] and ended["detail"].endswith("but you haven't granted it yet."), ended["detail"]
    assert "Builder: Claude Code refused a Write call that needs approval" in done.stdout and fix in done.stdout
    end = of(evs, "loop_end")[-1]
    assert end["exit_code"] == 22 and fix in end["reason"], end
    assert len(of(evs, "phase_start")) == 1 and of(evs, "iteration_end") == [] and "no progress" not in done.stdout
    report = subprocess.run([*GENESIS, "--project", str(project), "report"], capture_output=True, text=True)
    assert fix in report.stdout, report.stdout
    assert leftovers(project) == []


@pytest.mark.fault(42)
def test_a_refused_login_stops_the_night_at_once_with_exit_22_not_after_minutes_of_retries(claude, fast_stub,
                                                                                            project):
    """With Claude Code's default retries a 401 is retried for minutes; its api_retry events
    say so, and after three refusals in a row Genesis ends the agent and the night: no wait,
    no other phase. (The CLI's own last word on a 401, read as fatal: the recording auth_401.jsonl
    in tests/agents/test_claude_stream.py.)"""
    plan_night(project, TASKS)
    fast_stub.fail(401, "authentication_error", "invalid x-api-key")

    done, evs = night(project, night_env(fast_stub))

    assert done.returncode == 22 and of(evs, "loop_end")[-1]["exit_code"] == 22, done.stdout
    (ended,) = of(evs, "phase_end")
    assert (ended["phase"], ended["status"], ended["ending"]) == ("Builder", "api_fatal", "fatal"), ended
    assert (ended["api_error"]["retryable"], ended["api_error"]["code"], ended["api_error"]["status"]) == (
        False, "authentication_failed", 401)
    assert "refused 3 tries in a row" in done.stdout
    assert len(of(evs, "phase_start")) == 1 and of(evs, "wait_start") == []
    assert 3 <= len(fast_stub.messages()) <= 5  # the first try and its refused retries, not ten
    assert leftovers(project) == []

"""Notification channels against a real local HTTP receiver and real commands: what each
one sends, retries (5xx retried, 4xx not), timeouts, redirects, parallel channels, and
no secret in any payload."""

from __future__ import annotations

import base64
import json
import os
import stat
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from helpers.receiver import Receiver
from helpers.waits import wait_for

from genesis.alerts.notify import Channel, Told, channels_for, deliver, tell
from genesis.alerts.settings import AlertSettings
from genesis.alerts.tickets import Ticket

SECRET = "supersecretvalue123"
KEY = "sk-ant-api03-Zx9_kQ7-vB2mN4pL8rT1yW6uE3oI5aS0dF"
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "MY_API_KEY": SECRET, "HOME": os.environ["HOME"]}
FAST = dict(timeout=1.0, retries=2, backoff=(0.05, 0.1), desktop="false")


def ticket(**change) -> Ticket:
    base = Ticket(ticket_id="ab" * 16, created_at="2026-11-21T03:14:00Z", run_id="run-1", iteration=3,
                  phase="Builder", project="/src/myapp", severity="high", cause="Builder wedged",
                  reasoning="the agent keeps calling tools and gets nowhere",
                  suggested_action="read the phase's log", evidence="doom_loop: the last 12 calls cycle over 2 inputs",
                  steps_since_success=12, stall_minutes=None, kind="health", final=False)
    return replace(base, **change)


def send(t: Ticket, **settings) -> tuple[list[str], dict[str, str]]:
    s = AlertSettings(**{**FAST, **settings})
    return deliver(t, channels_for(s, ENV), s, time.monotonic() + 30)


# --- webhook ----------------------------------------------------------------------------------

def test_the_webhook_gets_a_slack_payload_with_the_ticket():
    with Receiver() as rx:
        delivered, failed = send(ticket(), webhook=rx.url + "/services/T1/B2/xyz")
    assert (delivered, failed) == (["webhook"], {})
    [req] = rx.requests
    assert (req.method, req.path) == ("POST", "/services/T1/B2/xyz")
    assert req.headers["Content-Type"] == "application/json; charset=utf-8"
    body = req.json
    assert body["text"].startswith("myapp: Builder wedged\n")  # the title: the project and the cause
    assert [b["type"] for b in body["blocks"]] == ["section", "section", "context"]
    assert "*myapp: Builder wedged*" in body["blocks"][0]["text"]["text"]
    assert "high" in body["blocks"][2]["elements"][0]["text"]
    assert Ticket.from_json(body["genesis"]) == ticket()


@pytest.mark.fault(50)
def test_a_500_is_retried_and_then_delivered():
    with Receiver(fail_first=1) as rx:
        delivered, failed = send(ticket(), webhook=rx.url)
    assert (delivered, failed) == (["webhook"], {})
    assert [r.answered for r in rx.requests] == [500, 200]


def test_5xx_every_time_is_tried_retries_plus_one_times_then_failed():
    with Receiver(fail_first=10, fail_status=503) as rx:
        delivered, failed = send(ticket(), webhook=rx.url, retries=2)
    assert (delivered, failed) == ([], {"webhook": "HTTP 503 (try 3 of 3)"})
    assert len(rx.requests) == 3


def test_a_404_is_not_retried():
    with Receiver(status=404) as rx:
        delivered, failed = send(ticket(), webhook=rx.url)
    assert (delivered, failed) == ([], {"webhook": "HTTP 404 (try 1 of 3)"})
    assert len(rx.requests) == 1


def test_a_receiver_slower_than_the_timeout_counts_as_failed():
    with Receiver(delay=3.0) as rx:
        delivered, failed = send(ticket(), webhook=rx.url, timeout=0.5, retries=0)
    assert (delivered, failed) == ([], {"webhook": "no answer within 0.5s"})


def test_a_redirect_is_followed_only_as_307_308_to_the_same_scheme():
    with Receiver() as final, Receiver(redirect="") as hop:
        hop.redirect = final.url + "/moved"
        assert send(ticket(), webhook=hop.url) == (["webhook"], {})
        [moved] = final.requests
        assert moved.path == "/moved" and moved.json["genesis"]["cause"] == "Builder wedged"  # still a POST, body kept
        assert moved.headers["Host"] == final.url[len("http://"):]  # the new host's, not the old one's
        hop.redirect = "https" + final.url[len("http"):] + "/downgrade-or-upgrade"
        delivered, failed = send(ticket(), webhook=hop.url)
    assert delivered == [] and failed["webhook"].startswith("HTTP 307: a redirect that is not followed")
    assert len(final.requests) == 1


@pytest.mark.fault(50)
def test_an_unreachable_url_fails_without_naming_the_url():
    with Receiver() as rx:
        url = rx.url
    delivered, failed = send(ticket(), webhook=url + "/T0SECRETPATH", retries=0)
    assert delivered == [] and failed["webhook"].startswith("could not connect")
    assert "T0SECRETPATH" not in failed["webhook"] and "127.0.0.1" not in failed["webhook"]


# --- ntfy -------------------------------------------------------------------------------------

def test_ntfy_gets_the_text_with_title_priority_and_tags():
    with Receiver() as rx:
        assert send(ticket(severity="critical", cause="disk full"), ntfy=rx.url + "/night-watch") == (["ntfy"], {})
        assert send(ticket(severity="low", final=True, project="/src/café"), ntfy=rx.url + "/night-watch") == \
            (["ntfy"], {})
    first, second = rx.requests
    assert first.path == "/night-watch"
    assert first.body.decode().startswith("myapp: disk full\n")
    assert (first.headers["Title"], first.headers["Priority"], first.headers["Tags"]) == (
        "myapp: disk full", "urgent", "genesis,sos")
    # a non-ASCII title goes as RFC 2047 (ntfy decodes it), the loop's end is flagged
    encoded = base64.b64encode("café: Builder wedged".encode()).decode()
    assert second.headers["Title"] == f"=?UTF-8?B?{encoded}?="
    assert (second.headers["Priority"], second.headers["Tags"]) == ("low", "genesis,information_source,checkered_flag")


def test_credentials_in_the_url_go_as_basic_auth_not_in_the_request_line():
    with Receiver() as rx:
        url = rx.url.replace("http://", "http://me:pa55word@") + "/topic"
        assert send(ticket(), ntfy=url) == (["ntfy"], {})
    [req] = rx.requests
    assert req.path == "/topic"
    assert req.headers["Authorization"] == "Basic " + base64.b64encode(b"me:pa55word").decode()


# --- command and desktop -------------------------------------------------------------------------

def executable(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_the_command_gets_the_ticket_json_on_stdin_and_the_alert_in_its_env(tmp_path):
    out = tmp_path / "out"
    cmd = executable(tmp_path / "notify-me", f'cat > {out}.json; printf "%s|%s" "$GENESIS_ALERT_SEVERITY" '
                                             f'"$GENESIS_ALERT_TEXT" > {out}.env\n')
    assert send(ticket(), command=(str(cmd),)) == (["command"], {})
    assert Ticket.from_json(json.loads(Path(f"{out}.json").read_text())) == ticket()
    severity, text = Path(f"{out}.env").read_text().split("|", 1)
    assert severity == "high" and text.startswith("myapp: Builder wedged\n")


def test_a_failing_command_is_retried_then_failed(tmp_path):
    tries = tmp_path / "tries"
    cmd = executable(tmp_path / "notify-me", f"echo try >> {tries}; exit 1\n")
    assert send(ticket(), command=(str(cmd),), retries=1) == ([], {"command": "the notify command notify-me exited "
                                                                               "with status 1 (try 2 of 2)"})
    assert tries.read_text().count("try") == 2


def test_desktop_auto_needs_the_tool_and_a_session_true_says_what_is_missing(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    args = tmp_path / "args"
    executable(bin_dir / "notify-send", f'for a in "$@"; do printf "%s\\n" "$a"; done > {args}\n')
    env = {"PATH": str(bin_dir), "HOME": ENV["HOME"]}
    auto = AlertSettings(**{**FAST, "desktop": "auto"})
    assert channels_for(auto, env, platform="linux") == []                           # no desktop session
    [desktop] = channels_for(auto, {**env, "DISPLAY": ":0"}, platform="linux")
    assert deliver(ticket(), [desktop], auto, time.monotonic() + 30) == (["desktop"], {})
    assert args.read_text().splitlines()[:4] == ["--app-name=Genesis", "--urgency=critical", "--",
                                                 "myapp: Builder wedged"]
    forced = AlertSettings(**{**FAST, "desktop": "true"})
    [missing] = channels_for(forced, {"PATH": str(tmp_path / "empty"), "HOME": ENV["HOME"]}, platform="linux")
    assert deliver(ticket(), [missing], forced, time.monotonic() + 30) == (
        [], {"desktop": "notify-send not found on PATH (GENESIS_NOTIFY_DESKTOP=true) (try 1 of 3)"})
    assert channels_for(AlertSettings(**FAST), {**env, "DISPLAY": ":0"}, platform="linux") == []  # false: off


def test_macos_gets_the_texts_as_arguments_never_as_script_source(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    args = tmp_path / "args"
    executable(bin_dir / "osascript", f'for a in "$@"; do printf "%s\\n" "$a"; done > {args}\n')
    s = AlertSettings(**{**FAST, "desktop": "auto"})
    [desktop] = channels_for(s, {"PATH": str(bin_dir)}, platform="darwin")
    hostile = ticket(cause='quote " end tell; do shell script "rm -rf ~"')
    assert deliver(hostile, [desktop], s, time.monotonic() + 30) == (["desktop"], {})
    lines = args.read_text().splitlines()
    assert lines[:6] == ["-e", "on run argv", "-e", "display notification (item 2 of argv) with title (item 1 of argv)",
                         "-e", "end run"]
    assert lines[6] == 'myapp: quote " end tell; do shell script "rm -rf ~"'  # an argument, never source


# --- all channels ---------------------------------------------------------------------------------

def test_a_slow_channel_does_not_hold_up_the_others(tmp_path):
    done = tmp_path / "command-done"
    cmd = executable(tmp_path / "notify-me", f"cat > /dev/null; touch {done}\n")
    s = AlertSettings(**{**FAST, "timeout": 10.0})
    with Receiver(hold=True) as rx:
        result: list = []
        worker = threading.Thread(target=lambda: result.append(
            deliver(ticket(), channels_for(replace(s, webhook=rx.url, command=(str(cmd),)), ENV), s,
                    time.monotonic() + 30)))
        worker.start()
        rx.wait_for(1)
        wait_for(done.exists, what="the command channel to finish while the webhook is held")
        rx.release()
        worker.join(20)
    assert rx.released_in_time == [True]
    assert result == [(["webhook", "command"], {})]


def test_a_broken_channel_does_not_stop_the_others():
    def broken(t: Ticket, timeout: float) -> None:
        raise RuntimeError("a bug in a channel")

    with Receiver() as rx:
        s = AlertSettings(**{**FAST, "webhook": rx.url})
        channels = [Channel("desktop", broken), *channels_for(s, ENV)]
        assert deliver(ticket(), channels, s, time.monotonic() + 30) == (
            ["webhook"], {"desktop": "RuntimeError: a bug in a channel"})


@pytest.mark.fault(51)
def test_no_secret_reaches_any_payload(tmp_path):
    leaky = ticket(cause=f"key {KEY}", evidence=f"MY_API_KEY={SECRET}; x-api-key: {KEY}; token {SECRET}",
                   suggested_action=f"rotate {SECRET}")
    out = tmp_path / "out"
    cmd = executable(tmp_path / "notify-me", f'cat > {out}.json; printf "%s" "$GENESIS_ALERT_TEXT" > {out}.env\n')
    with Receiver() as hook, Receiver() as push:
        assert send(leaky, webhook=hook.url, ntfy=push.url, command=(str(cmd),)) == (
            ["webhook", "ntfy", "command"], {})
    sent = [hook.requests[0].body, push.requests[0].body, json.dumps(push.requests[0].headers).encode(),
            Path(f"{out}.json").read_bytes(), Path(f"{out}.env").read_bytes()]
    for payload in sent:
        assert SECRET.encode() not in payload and b"sk-ant-" not in payload, payload[:300]
    assert b"[redacted]" in sent[0] and b"[redacted]" in sent[1]


# --- each channel's minimum severity ------------------------------------------------------------

def test_a_channel_below_its_minimum_is_skipped_and_said_so_not_failed(tmp_path):
    ran = tmp_path / "ran"
    cmd = executable(tmp_path / "notify-me", f"echo ran >> {ran}\n")
    with Receiver() as hook, Receiver() as push:
        s = AlertSettings(**{**FAST, "webhook": hook.url, "ntfy": push.url, "command": (str(cmd),),
                             "ntfy_min": "high", "command_min": "critical"})
        medium = tell(ticket(severity="medium"), s, time.monotonic() + 30, ENV)
        high = tell(ticket(severity="high"), s, time.monotonic() + 30, ENV)
        # The loop's end goes by its own severity: a normal end (low) spares the phone.
        end = tell(ticket(severity="low", final=True, kind="loop_end"), s, time.monotonic() + 30, ENV)
    assert medium == Told(("webhook",), {}, {"ntfy": "medium is below its minimum severity, high",
                                            "command": "medium is below its minimum severity, critical"})
    assert high == Told(("webhook", "ntfy"), {}, {"command": "high is below its minimum severity, critical"})
    assert end.delivered == ("webhook",) and set(end.skipped) == {"ntfy", "command"}
    assert (len(hook.requests), len(push.requests)) == (3, 1)
    assert not ran.exists()


def test_a_follow_up_goes_wherever_its_ticket_went_whatever_the_minimum():
    with Receiver() as hook, Receiver() as push:
        s = AlertSettings(**{**FAST, "webhook": hook.url, "ntfy": push.url, "ntfy_min": "critical"})
        told = tell(ticket(severity="low"), s, time.monotonic() + 30, ENV, to=["ntfy"])
    assert told == Told(("ntfy",), {}, {})
    assert (len(hook.requests), len(push.requests)) == (0, 1)


def test_a_ticket_every_channel_skips_sends_nothing():
    with Receiver() as hook:
        s = AlertSettings(**{**FAST, "webhook": hook.url, "webhook_min": "high"})
        assert tell(ticket(severity="medium"), s, time.monotonic() + 30, ENV) == Told(
            (), {}, {"webhook": "medium is below its minimum severity, high"})
    assert hook.requests == []

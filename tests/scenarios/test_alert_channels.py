"""The real loop and its alert channels: the start names each channel and what it gets, a
channel below its minimum is skipped (and recorded so), and a misspelt channel variable
refuses the start with the name it meant instead of giving a night without alerts."""

from __future__ import annotations

import subprocess

import pytest
from helpers.loop import GENESIS, loop_env, run_loop
from helpers.receiver import Receiver
from helpers.state import events_of
from helpers.waits import wait_for


def test_the_start_names_the_channels_and_a_channel_below_its_minimum_is_skipped(one_builder):
    project, args = one_builder
    args = args + ("--max-iterations", "1")
    with Receiver() as hook, Receiver() as push:
        env = loop_env(GENESIS_NOTIFY_WEBHOOK=hook.url + "/T1/B2/s3cr3tpath", GENESIS_NOTIFY_NTFY=push.url,
                       GENESIS_NOTIFY_NTFY_MIN_SEVERITY="high")
        done = run_loop(project, *args, env=env)
        assert done.returncode == 0, done.stderr
        wait_for(lambda: any(e["ticket"]["final"] for e in events_of(project, kind="alert")), timeout=30,
                 what="the loop's end told")
    [line] = [line for line in done.stderr.splitlines() if "alerts: " in line]
    assert "alerts: webhook (all), ntfy (high and up); test them: " in line
    assert line.endswith(f" --project {project} alert test")  # a command that runs as printed (hints.py)
    assert "s3cr3tpath" not in done.stderr
    # A night that ended well is below the phone's minimum: the webhook has it, ntfy was spared.
    [end] = [e for e in events_of(project, kind="alert") if e["ticket"]["final"]]
    assert end["ticket"]["severity"] in ("low", "medium")
    assert (end["delivered"], end["failed"]) == (["webhook"], {})
    assert end["skipped"] == {"ntfy": f"{end['ticket']['severity']} is below its minimum severity, high"}
    assert push.requests == [] and len(hook.requests) >= 1


@pytest.mark.fault(89)
def test_a_misspelt_channel_refuses_the_start_with_the_name_it_meant(one_builder):
    """GENESIS_NOTIFY_WEBHOK was ignored with a warning among the start's lines: a night
    without a single alert, the user believing the phone would ring."""
    project, args = one_builder
    args = args + ("--max-iterations", "1")
    with Receiver() as hook:
        env = loop_env(GENESIS_NOTIFY_WEBHOK=hook.url, GENESIS_NOTIFY_NTFY=hook.url + "/topic")
        refused = run_loop(project, *args, env=env)
        shown = subprocess.run(GENESIS + ["--project", str(project), "config", "show"], env=env,
                               capture_output=True, text=True, timeout=60)
    said = ("GENESIS_NOTIFY_WEBHOK is set in the environment but is not an alert setting; did you mean "
            "GENESIS_NOTIFY_WEBHOOK?")
    assert refused.returncode == 2, refused.stderr
    assert said in refused.stderr
    assert not (project / "notes.txt").exists()          # no agent ran
    assert hook.requests == []
    assert shown.returncode == 2 and said in shown.stderr

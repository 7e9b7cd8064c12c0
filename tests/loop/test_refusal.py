"""A policy refusal in the single loop: the fallback agent tries it, or the loop ends with 37.

The decision is pure (after_refusal); the act is played on a real project's step and ledger.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from genesis import exitcodes
from genesis.loop import recovery
from genesis.loop.refusal import RefusalStep, after_refusal, act_on_refusal

RUN = "run-refusal"
CLAUDE = ("claude", "-p")
OTHER = ("codex", "exec")


@pytest.mark.parametrize("command, fallback, retries_left, budget_left, action, said", [
    (CLAUDE, OTHER, 2, 10, "fallback", "the fallback agent (codex exec) tries it"),
    (CLAUDE, (), 2, 10, "stop", "no fallback agent is set (GENESIS_FALLBACK_AGENT_CMD)"),
    (OTHER, OTHER, 2, 10, "stop", "the fallback agent (codex exec) was refused too"),
    (CLAUDE, OTHER, 0, 10, "stop", "the phase's retries (PHASE_RETRIES) are spent"),
    (CLAUDE, OTHER, 2, 0, "stop", "the night's recovery budget (GENESIS_MAX_RECOVERIES) is spent"),
])
def test_what_follows_a_policy_refusal(command, fallback, retries_left, budget_left, action, said):
    decided = after_refusal(command, fallback, retries_left, budget_left)
    assert decided.action == action and said in decided.why
    assert isinstance(decided, RefusalStep)


def test_with_no_fallback_agent_the_loop_ends_with_37_and_says_what_to_do(step, said):
    code = act_on_refusal(step, "Builder", 1, "Opus 4.8's safeguards flagged this message", CLAUDE)
    assert code == exitcodes.POLICY_REFUSED == 37
    [(kind, text)] = said
    assert kind == "error" and "no fallback agent is set" in text and "another model or CLI" in text
    [stop] = [e for e in step.events(kinds=("stop_reason",))]
    assert stop["code"] == 37 and "safeguards flagged" in stop["reason"]
    assert recovery.retries_so_far(step) == 0


def test_with_a_fallback_agent_the_phase_is_retried_with_it_and_its_own_refusal_ends_the_loop(step, said):
    step = replace(step, cfg=replace(step.cfg, fallback_agent_cmd=OTHER, retry_delay=0))
    assert act_on_refusal(step, "Builder", 1, "flagged", CLAUDE) == exitcodes.WAIT
    [retry] = step.events(kinds=("retry",))
    assert (retry["type"], retry["old_cmd"], retry["new_cmd"]) == ("refused", "claude -p", "codex exec")
    assert any("the fallback agent (codex exec) tries it" in text for _kind, text in said)
    # The retry runs the fallback agent; refused too, the loop stops: no third agent to try.
    assert recovery.retry_command(step, 1, "Builder") == OTHER
    assert act_on_refusal(step, "Builder", 1, "flagged again", OTHER) == exitcodes.POLICY_REFUSED
    assert "the fallback agent (codex exec) was refused too" in said[-1][1]
    assert len(step.events(kinds=("retry",))) == 1

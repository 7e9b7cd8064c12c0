"""A refusal by the model's safeguards (a policy refusal): specific to the task and the model.

The same request to the same model is refused again on every retry, so the phase is never
retried with the agent that was refused: it is retried with the fallback agent
(GENESIS_FALLBACK_AGENT_CMD, "try a different model") when one is set and is not the agent
refused, within the phase's retries and the night's recovery budget; otherwise the loop ends
with POLICY_REFUSED (37) and says what to do. A refused tool permission is another cause
(the agent command's configuration, which binds every loop alike): it ends with AGENT_FATAL.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING

from genesis import exitcodes
from genesis.loop import recovery

if TYPE_CHECKING:
    from genesis.loop.step import Step

__all__ = ["RefusalStep", "after_refusal", "act_on_refusal"]


@dataclass(frozen=True)
class RefusalStep:
    action: str      # fallback (retry the phase with the fallback agent) | stop (POLICY_REFUSED)
    why: str


def after_refusal(command: tuple[str, ...], fallback: tuple[str, ...], retries_left: int,
                  budget_left: int) -> RefusalStep:
    """What follows a policy refusal of `command`'s request (pure)."""
    if not fallback:
        return RefusalStep("stop", "no fallback agent is set (GENESIS_FALLBACK_AGENT_CMD)")
    if tuple(command) == tuple(fallback):
        return RefusalStep("stop", f"the fallback agent ({shlex.join(fallback)}) was refused too")
    if retries_left <= 0:
        return RefusalStep("stop", "the phase's retries (PHASE_RETRIES) are spent, so the fallback agent cannot "
                                   "try it")
    if budget_left <= 0:
        return RefusalStep("stop", "the night's recovery budget (GENESIS_MAX_RECOVERIES) is spent, so the "
                                   "fallback agent cannot try it")
    return RefusalStep("fallback", f"the fallback agent ({shlex.join(fallback)}) tries it")


def act_on_refusal(step: "Step", phase: str, iteration: int, message: str, command: tuple[str, ...]) -> int:
    """The phase's exit code after a policy refusal: WAIT (the fallback agent's retry is planned)
    or POLICY_REFUSED."""
    cfg = step.cfg
    decided = after_refusal(command, cfg.fallback_agent_cmd,
                            cfg.phase_retries - recovery.retries_so_far(step, iteration, phase),
                            cfg.max_recoveries - recovery.retries_so_far(step))
    if decided.action == "fallback":
        step.say(f"{phase}: the model's safeguards refused the request: {message}. The same agent would be "
                 f"refused again; {decided.why}", "warn")
        code = recovery.after_stall(step, phase, iteration, "refused", f"refused by the model's safeguards: "
                                    f"{message}", command)
        if code is not None:
            return code
        decided = RefusalStep("stop", "the phase's retries (PHASE_RETRIES) are spent")
    reason = (f"the model's safeguards refused the request: {message}. Retrying the same agent would be refused "
              f"again, and {decided.why}: stopping. Restart with another model or CLI (GENESIS_AGENT_CMD, "
              f"GENESIS_FALLBACK_AGENT_CMD), or rephrase the task")
    step.say(f"{phase}: {reason}", "error")
    step.event("stop_reason", code=exitcodes.POLICY_REFUSED, reason=f"{phase}: {reason}"[:1000])
    return exitcodes.POLICY_REFUSED

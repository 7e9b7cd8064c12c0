"""A fleet's child asks its monitor before it starts an agent again after its agent died.

An agent killed by a signal Genesis did not send (the OOM killer, a kill -9) leaves its loop
running, and the loop's next phase starts an agent again: a restart, which the fleet's restart
budget (GENESIS_FLEET_RESTART_EVERY_SECONDS) bounds as it bounds a relaunch. The monitor reads
the death from the child's ledger (fleet/children.agent_deaths), asks the budget, and answers
in the heartbeat file it writes each check (`<fleet dir>/monitor.json`):

    "agent_restarts": {"<task id>": {"died": <the death's epoch>, "held": <epoch, while held>}}

Before an agent starts (after the phase's trigger and the known limits said it runs), a child
whose run's last phase ended in such a death reads its answer: the go (an answer for that
death, not held) starts the agent; otherwise the loop plans a wait (kind `budget`) until the
time the budget holds it to, or a few seconds while the monitor has not read the death yet,
and runs the phase again. Nothing is asked of a monitor whose heartbeat has no such answers
(the Temporal worker's: a named capability of the local fleet, fleet/decide.CAPABILITIES),
nor of one that looks down (GENESIS_FLEET_MONITOR_STALE_SECONDS), and a death it has not
answered within that window is not waited on longer. One small file read per phase, only in
a fleet's child; the hook and the watcher are untouched.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from genesis.loop.monitorwatch import HEARTBEAT, MAX_BYTES
from genesis.loop.onetask import task_id_of
from genesis.loop.waiting import Pending, plan
from genesis.store.atomicio import CorruptFile, finite, read_json

if TYPE_CHECKING:
    from genesis.loop.step import Step

__all__ = ["ANSWERS", "ASK_EVERY", "agent_died", "wait_for_go"]

ANSWERS = "agent_restarts"   # monitor.json's key: the monitor answers such asks
ASK_EVERY = 5.0              # seconds between two looks while the monitor has not answered (or answered late)
_SIGNAL_DEATHS = frozenset({128 + signal.SIGKILL, 128 + signal.SIGSEGV, 128 + signal.SIGBUS, 128 + signal.SIGABRT})


def agent_died(end: Mapping) -> bool:
    """Whether a phase_end says its agent died by a signal Genesis did not send."""
    code = end.get("returncode")
    return not end.get("killed") and isinstance(code, int) and not isinstance(code, bool) and \
        (code < 0 or code in _SIGNAL_DEATHS)


def wait_for_go(step: "Step", phase: str, iteration: int, env: Mapping[str, str], now: float | None = None
                ) -> int | None:
    """WAIT (a wait planned: the budget holds this agent's start, or the monitor has not answered
    yet), or None: the agent starts now."""
    folder, task_id = env.get("GENESIS_FLEET_DIR", "").strip(), task_id_of(env)
    if not folder or not task_id:
        return None
    now = time.time() if now is None else now
    try:
        beat = read_json(Path(folder) / HEARTBEAT, MAX_BYTES)
    except (CorruptFile, OSError):
        return None
    answers = beat.get(ANSWERS) if isinstance(beat, dict) else None
    at = finite(beat.get("at")) if isinstance(beat, dict) else None
    if not isinstance(answers, dict) or at is None or now - at > step.cfg.monitor_stale:
        return None   # a monitor that answers no such ask, or looks down: nobody to ask
    ends = step.events(kinds=("phase_end",))
    died = finite(ends[-1].get("epoch")) if ends and agent_died(ends[-1]) else None
    if died is None:
        return None
    answer = answers.get(task_id)
    seen = isinstance(answer, dict) and (finite(answer.get("died")) or 0.0) >= died
    if seen:
        held = finite(answer.get("held"))
        if held is None:
            return None
        until = held if held > now else now + ASK_EVERY
        clock = time.strftime("%H:%M:%S", time.localtime(held))
        reason = f"its agent died; the fleet's restart budget holds the next start until {clock}"
    elif now - died > step.cfg.monitor_stale:
        step.say(f"{phase}: the fleet's monitor did not answer within GENESIS_FLEET_MONITOR_STALE_SECONDS="
                 f"{step.cfg.monitor_stale:g} whether the agent may start again: it starts", "warn")
        return None
    else:
        until, reason = now + ASK_EVERY, "its agent died; the fleet's monitor is asked whether it may start again"
    return plan(step, Pending(step.run_id, "budget", until, reason, phase, iteration))

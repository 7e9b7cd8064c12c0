"""A loop killed or frozen by someone: recorded, reaped and told by whoever saw it.

The bash loop records its own end (`genesis finish`) on every stop it can see, a signal
included; SIGKILL it cannot see, and SIGSTOP stops it where it stands. Its companion
(genesis/watch/companion.py) and a running phase's watcher see it instead, and end the
night here as a stop would: the run's processes reaped (only those proven the run's),
what stays uncommitted remembered, the lock's record released, the end recorded and an
alert sent. Whichever of the two comes first settles it; the other finds it done.

`genesis status` then says STOPPED (killed), or FROZEN while the loop stands stopped
(status/view.py).

Every phase's watcher imports this module, and settles a lost loop rarely: the night's end
(finish.py, with the report it prints and the rendering that takes) is imported by `settle`
when it runs, not by every run-phase.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Iterable

from genesis import exitcodes
from genesis.loop.step import Step
from genesis.procs.proctree import ProcId, descendants, kill_all, marked
from genesis.store.looplock import recorded
from genesis.watch.companion import Watch, watch_loop

__all__ = ["KILLED_CODE", "LOST_REASON", "GIT_GONE_REASON", "loop_of", "ended", "frozen", "thawed", "settle", "keep_company"]

KILLED_CODE = 128 + signal.SIGKILL  # what a shell reports for a SIGKILLed loop
LOST_REASON = "the loop was killed (SIGKILL?) by someone: it ended without recording its end"
# The repository's git dir gone (`rm -rf .git`): the loop stops by itself at its next git step, and
# its own record of that end had nowhere to go. Not a kill: said as the state's loss it is.
GIT_GONE_REASON = ("the loop ended without recording its end while the repository's git directory {git_dir} was "
                   "gone (deleted during the night, with Genesis's state in it): it stopped on that, by itself as "
                   "far as can be told (its own exit code could not be recorded)")


def loop_of(step: Step) -> ProcId | None:
    """The run's loop process (pid and start time) as its lock record names it, or None."""
    holder = recorded(step.layout.loop_record, step.run_id)
    return ProcId(holder.pid, holder.create_time) if holder is not None and holder.pid > 0 else None


def ended(step: Step) -> bool:
    """Whether the run's end is recorded."""
    return bool(step.events(kinds=("loop_end",)))


def frozen(step: Step, loop: ProcId, since: float) -> None:
    step.say(f"the loop (pid {loop.pid}) is frozen: stopped (SIGSTOP?) since {_clock(since)}; nothing runs until "
             f"it is continued (kill -CONT {loop.pid}) or stopped", "error")
    step.event("loop_frozen", pid=loop.pid, since=since)


def thawed(step: Step, loop: ProcId, since: float, lasted: float) -> None:
    step.say(f"the loop (pid {loop.pid}) runs again after {lasted:.0f}s frozen", "warn")
    step.event("loop_thawed", pid=loop.pid, since=since, lasted=round(lasted, 1))


def settle(step: Step, leftovers: Iterable[ProcId], seen_by: str) -> bool:
    """End the night of a loop that is gone without its end recorded: its leftovers (the
    loop's tree as last seen, everything carrying the run's marker) ended, then what a stop
    does. False when it was not ours to settle (already recorded, or being settled)."""
    claim = step.layout.run_dir(step.run_id) / "loop-lost"
    try:
        os.close(os.open(claim, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600))
    except FileExistsError:
        return False
    except OSError as exc:
        step.say(f"cannot claim the lost loop's end ({exc.strerror}); settling it anyway", "warn")
    if ended(step):
        return False
    targets = set(leftovers)
    git_dir = step.layout.state_dir.parent
    gone = not (git_dir / "HEAD").is_file()  # no repository there (a watcher may have made the state folder again)
    reason = GIT_GONE_REASON.format(git_dir=git_dir) if gone else LOST_REASON
    step.say(f"{reason} (seen by {seen_by}); ending what is left of its run", "error")
    from genesis.loop.finish import finish   # the night's end (its report, in rich): only a lost loop's

    report = kill_all(lambda: [i for t in targets for i in descendants(t)] + marked({"GENESIS_RUN_ID": step.run_id}),
                      step.cfg.kill_grace)
    if report.targets:
        step.say(f"ended {report.targets} process(es) of the lost loop's run", "warn")
    finish(step, f"{reason} (seen by {seen_by})", exitcodes.STATE_LOST if gone else KILLED_CODE)
    return True


def keep_company(step: Step, loop_pid: int) -> str:
    """Be the loop's companion to its end (`genesis companion`): in a session of its own, deaf
    to the terminal. How the loop ended: "ended", "lost", or why there was nothing to watch."""
    try:
        os.setsid()  # not in the loop's process group: a Ctrl-C or a hangup meant for it is not for us
    except OSError:
        pass  # already a session leader
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)
    loop = loop_of(step)
    if loop is None or loop.pid != loop_pid:
        return f"pid {loop_pid} is not the loop of run {step.run_id} (its lock record says otherwise)"
    cfg = step.cfg
    watch = Watch(loop, step.run_id, cfg.check_interval, settle=2 * cfg.check_interval + cfg.kill_grace + 30)
    return watch_loop(watch, ended=lambda: ended(step), frozen=lambda since: frozen(step, loop, since),
                      thawed=lambda since, lasted: thawed(step, loop, since, lasted),
                      lost=lambda left: settle(step, left, "its companion"))


def _clock(epoch: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(epoch))

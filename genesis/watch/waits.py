"""The watcher's blocking waits: for a stop signal (with its sender) or for the agent's exit.

Which stop signals are honoured (`honoured`): a step started with SIGHUP ignored (the loop
under nohup) keeps ignoring it, so a closed terminal does not end a night started to outlive
it.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess

__all__ = ["STOP_SIGNALS", "honoured", "deafen", "SignalWait", "ExitWait", "ExitWatch"]

# The user's stop: Ctrl-C, SIGTERM, or the terminal or SSH session closing (SIGHUP).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def honoured() -> tuple[signal.Signals, ...]:
    """The stop signals this process acts on: a SIGHUP ignored when it starts (the loop runs
    under nohup) stays ignored, as the user asked, so the terminal may go and the night go on."""
    # SIGINT cannot tell the same: bash starts every background step with it ignored.
    return tuple(s for s in STOP_SIGNALS if not (s == signal.SIGHUP and signal.getsignal(s) == signal.SIG_IGN))


def _deaf(_signum: int, _frame: object) -> None:
    """A stop signal heard and dropped."""


def deafen() -> None:
    """Drop the stop signals right behind the first (the loop forwards what it got, a closed
    terminal sends more) while the first one's cleanup runs. A Python handler that does
    nothing, not SIG_IGN: CPython prints "Signal N ignored due to race condition" and a
    traceback on the user's terminal when a signal delivered before the change is handled
    after it."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, _deaf)


class SignalWait:
    """Linux: sleep in sigtimedwait on the stop signals and SIGCHLD (the agent's exit).

    sigtimedwait returns the sender's pid, so a stop the agent sent can be told from the
    user's. The signals are blocked in this thread (and in the output thread, started after)
    so that they wait for it; no polling in between.
    """

    SIGNALS = frozenset({*STOP_SIGNALS, signal.SIGCHLD})

    def __init__(self) -> None:
        self.old = signal.pthread_sigmask(signal.SIG_BLOCK, self.SIGNALS)

    def wait(self, timeout: float):
        return signal.sigtimedwait(self.SIGNALS, max(0.0, timeout))

    def drain(self) -> list:
        """The signals pending now (at most a few: standard signals do not queue)."""
        got = []
        for _ in range(len(self.SIGNALS)):
            info = signal.sigtimedwait(self.SIGNALS, 0)
            if info is None:
                break
            got.append(info)
        return got

    def close(self) -> None:
        signal.pthread_sigmask(signal.SIG_SETMASK, self.old)


class ExitWait:
    """Where sigtimedwait does not exist (macOS), sleep on the agent's exit; a stop signal
    interrupts as it always did, through the handler, whoever sent it: the platform does not
    say who did."""

    def __init__(self, proc: subprocess.Popen):
        self.exit = ExitWatch(proc)

    def wait(self, timeout: float) -> None:
        self.exit.wait(timeout)
        return None

    def drain(self) -> list:
        return []

    def close(self) -> None:
        self.exit.close()


class ExitWatch:
    """Sleep until the agent exits or the timeout passes, without polling in between.

    Linux: a pidfd becomes readable at exit; macOS: kqueue reports NOTE_EXIT. Elsewhere
    Popen.wait's own polling is used. Saves the watcher's CPU over a long, quiet run.
    """

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self.fd: int | None = None
        self.kq = None
        try:
            if hasattr(os, "pidfd_open"):
                self.fd = os.pidfd_open(proc.pid)
            elif hasattr(select, "kqueue"):
                self.kq = select.kqueue()
                self.kq.control([select.kevent(proc.pid, select.KQ_FILTER_PROC, select.KQ_EV_ADD,
                                               select.KQ_NOTE_EXIT)], 0, 0)
        except OSError:
            self.fd, self.kq = None, None  # already gone, or not supported: poll instead

    def wait(self, timeout: float) -> int | None:
        """The exit status, or None if it still runs after `timeout` seconds."""
        if self.fd is not None:
            select.select([self.fd], [], [], timeout)
        elif self.kq is not None:
            self.kq.control(None, 1, timeout)
        else:
            try:
                return self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                return None
        return self.proc.poll()

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
        if self.kq is not None:
            self.kq.close()

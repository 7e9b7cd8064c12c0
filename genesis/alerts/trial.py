"""`genesis alert test`: one test alert through every configured channel, now, each channel's
outcome said, so that a wrong URL or a silent phone is found in the evening, not at 3 a.m.

Sent in this process, bounded like the deliverer's sending (each channel's timeout and
retries, channels side by side), whatever each channel's minimum severity: the test is of
the channel. Nothing is recorded in the ledger: the ledger is the nights' record, and the
outcome is printed to the person who asked.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from genesis.alerts import notify
from genesis.alerts.channels import ChannelState, configured, reach
from genesis.alerts.settings import AlertSettings
from genesis.alerts.tickets import Ticket
from genesis.clock import iso
from genesis.when import stamp

__all__ = ["Trial", "trial_ticket", "try_channels", "deadline", "no_channel", "KIND"]

KIND = "alert_test"
MARGIN = 1.0   # seconds for the threads' ends


@dataclass(frozen=True)
class Trial:
    states: tuple[ChannelState, ...]       # every channel the settings name (off ones too)
    delivered: tuple[str, ...]
    failed: Mapping[str, str]              # channel: why (never a URL)

    @property
    def tried(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.states if not s.off)

    @property
    def missed(self) -> tuple[str, ...]:
        """The channels tried that did not take it."""
        return tuple(name for name in self.tried if name not in self.delivered)

    def lines(self) -> list[str]:
        """One line per channel: what it did with the test alert (the ones off last)."""
        said = []
        for state in sorted(self.states, key=lambda s: bool(s.off)):
            if state.off:
                said.append(f"{state.name}: off: {state.off}")
            elif state.name in self.delivered:
                said.append(f"{state.name}: delivered (gets {reach(state.minimum)})")
            else:
                said.append(f"{state.name}: {self.failed.get(state.name, 'failed: no answer')}")
        return said


def no_channel(trial: Trial, again: str) -> str:
    """What to do when no channel is set; `again`: the command to run afterwards."""
    off = "".join(f" (desktop is off: {s.off})" for s in trial.states if s.off)
    return (f"no alert channel is set{off}: set GENESIS_NOTIFY_NTFY=https://ntfy.sh/<a topic of yours>, "
            f"GENESIS_NOTIFY_WEBHOOK=<a webhook URL> or GENESIS_NOTIFY_CMD=<a command> in the environment or "
            f"orchestrator/genesis.conf, then run `{again}` again")


def trial_ticket(project: Path | str, severity: str, now: float) -> Ticket:
    """A ticket that says it is a test, for the project, at severity."""
    return Ticket(ticket_id=uuid.uuid4().hex, created_at=iso(now), run_id="test", iteration=None, phase=None,
                  project=str(project), severity=severity, cause="test alert: this channel works",
                  reasoning="`genesis alert test` sent it to check the alert channels",
                  suggested_action="nothing: this is a test; a real alert says what to do",
                  evidence=f"sent by genesis alert test at {stamp(now)}", steps_since_success=None,
                  stall_minutes=None, kind=KIND, final=False)


def deadline(settings: AlertSettings) -> float:
    """Seconds every try of a channel may take, with the pauses between them."""
    return notify.send_seconds(settings) + MARGIN


def try_channels(settings: AlertSettings, ticket: Ticket, refused: Mapping[str, str] | None = None,
                 env: Mapping[str, str] | None = None, which: Callable[..., str | None] = shutil.which,
                 platform: str = sys.platform) -> Trial:
    """Send ticket through every configured channel that can send; `refused`: channels not
    to run, with why (a command genesis.conf names that the user has not approved)."""
    env = dict(os.environ if env is None else env)
    refused = dict(refused or {})
    states = tuple(configured(settings, env, which, platform))
    channels = [c for c in notify.channels_for(settings, env, which, platform) if c.name not in refused]
    delivered, failed = notify.deliver(ticket, channels, settings, time.monotonic() + deadline(settings)) \
        if channels else ([], {})
    return Trial(states, tuple(delivered), {**refused, **{name: f"failed: {why}" for name, why in failed.items()}})

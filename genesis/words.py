"""How the views say things: durations, phase endings, wait kinds; the agents' reported
figures; and untrusted text (an agent's output, a reason it gave) made safe to show."""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping

from genesis.clock import parse_iso
from genesis.when import clock as clock_of

__all__ = ["LABELS", "WAIT_LABELS", "WINDOW_LABELS", "FORMER", "ending_label", "sanitize", "one_line", "duration",
           "epoch_of", "money", "reported", "details", "plural"]

# How a phase's end reads in every view: the watcher's status (exited, stuck, wedged, overtime,
# api_fatal, interrupted, not_started), the loop's ending (finished, failed, limit, outage, fatal,
# watcher_lost) or "running" while it runs. An agent is stuck when it shows no sign of life (its
# heartbeat is stale), wedged when it keeps calling tools and gets nowhere.
LABELS = {"finished": "finished", "running": "running", "exited": "exited", "failed": "exited with an error",
          "limit": "usage limit", "outage": "API outage", "fatal": "fatal error",
          "api_fatal": "fatal error", "stuck": "stuck", "wedged": "wedged", "overtime": "over time",
          "interrupted": "interrupted", "not_started": "could not start", "watcher_lost": "watcher lost",
          "done": "done (ended after its result)", "refused": "refused by the model's safeguards"}

# The stuck state as older versions recorded it: the watcher said stale, the health judgment stalled.
FORMER = {"stale": "stuck", "stalled": "stuck"}

WAIT_LABELS = {"limit": "usage limit", "outage": "API outage", "cooldown": "breaker cooldown",
               "retry": "retry of a stuck phase", "budget": "the fleet's restart budget"}

# The window that ended a phase, as its phase_end event and incident record it (`window`).
WINDOW_LABELS = {"stale": "the stale window (no heartbeat)", "tool_silent": "the tool-silent window",
                 "tool_busy": "the tool-busy maximum, then the stale window", "runtime": "the runtime cap",
                 "first_event": "the first-event window (no output since its start)",
                 "result_exit": "the result-exit window (its result written, it did not exit)",
                 "wakeup": "its scheduled wake-up, due and past the margin (it never came)"}


# Terminal control sequences: CSI (ESC [ or 0x9b) with its parameters; OSC, DCS, SOS, PM and
# APC strings up to their terminator (BEL, ESC \\ or 0x9c), or the line's end when cut off; any
# other ESC sequence. Removed whole, so that no debris like "[31m" is left.
ESCAPES = re.compile(r"(?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]?"
                     r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
                     r"|\x1b[\x20-\x2f]*[\x30-\x7e]?")
# What else a terminal or a browser acts on: C0 and C1 controls, the line and paragraph
# separators, and the bidi marks, embeddings, overrides and isolates that reorder what is shown.
CONTROLS = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def ending_label(ending: str, exit_code: int | None = None) -> str:
    """A phase's end in words; a failed one names its exit status."""
    text = LABELS.get(ending, ending)
    return f"{text} (exit {exit_code})" if ending == "failed" and exit_code is not None else text


def _cut(text: str, width: int | None) -> str:
    return text if width is None or len(text) <= width else text[:max(0, width - 1)] + "\u2026"


def sanitize(line: str, width: int | None = 300) -> str:
    """One line of untrusted text (agent output, a reason) made safe for a terminal or a page:
    control sequences and characters go, the text stays; a carriage return keeps what a
    terminal would show last; at most width characters (None: any number)."""
    line = ESCAPES.sub("", line)
    line = next((part for part in reversed(line.split("\r")) if part), "")
    return _cut(CONTROLS.sub("", line.expandtabs(8)), width)


def one_line(text: str, width: int | None = 300) -> str:
    """Untrusted text of any number of lines as one safe line: its line breaks and runs of
    white space read as one space; then as sanitize()."""
    text = " ".join(ESCAPES.sub("", str(text)).split())
    return _cut(" ".join(CONTROLS.sub("", text).split()), width)


def duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))  # a clock stepped back never reads as a negative time
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def epoch_of(stamp: str | None) -> float | None:
    """An ISO time Genesis wrote, as epoch seconds; None for anything else."""
    try:
        return parse_iso(stamp or "")
    except (TypeError, ValueError):
        return None


def reported(phases: Iterable[dict[str, Any]], key: str) -> list[float]:
    """A figure the agents reported (cost_usd, num_turns) over phase_end events: real numbers only."""
    return [e[key] for e in phases if isinstance(e.get(key), (int, float)) and not isinstance(e.get(key), bool)]


def money(usd: float) -> str:
    """Dollars to the cent, or to a hundredth of a cent below ten cents (a phase's cost often is)."""
    return f"${usd:.2f}" if usd >= 0.1 or usd == 0 else f"${usd:.4f}"


# How an event's details read in words: times of day, lengths of time; the rest as it is.
CLOCK_KEYS = frozenset({"started", "ended", "until", "since", "resets_at", "seen_at", "at"})
LENGTH_KEYS = frozenset({"duration", "waited", "seconds"})


def _value(key: str, value: Any, depth: int) -> str | None:
    """One detail in words; None when it says nothing (unset, empty, a zero count)."""
    if value is None or value is False or value in ("", [], {}):
        return None
    if isinstance(value, bool):
        return "yes"
    if isinstance(value, (int, float)):
        if value == 0 and not key.endswith("code"):
            return None
        if key in CLOCK_KEYS and 0 < value < 1e11:
            return clock_of(value, seconds=True)  # the zone said: never a bare time
        if key in LENGTH_KEYS:
            return duration(value)
        if key.endswith("_usd"):
            return money(value)
        return f"{value:.2f}".rstrip("0").rstrip(".") if isinstance(value, float) else str(value)
    if isinstance(value, Mapping):
        inner = details(value, None, depth + 1) if depth < 2 else ""
        return f"({inner})" if inner else None
    if isinstance(value, (list, tuple)):
        return str(len(value))
    return one_line(str(value), 120)


def details(detail: Mapping[str, Any], width: int | None = 300, depth: int = 0) -> str:
    """An event's details as words for a status line (`iteration 1, phase Builder, ending
    finished, started 22:06:09`), never as a Python dict: what says nothing is left out,
    lists are counted, text is made safe; at most width characters."""
    parts = []
    for key, value in detail.items():
        said = _value(str(key), value, depth)
        if said is not None:
            parts.append(f"{str(key).replace('_', ' ')} {said}")
    return _cut(", ".join(parts), width)


def plural(count: int, word: str, many: str | None = None) -> str:
    """`1 task`, `3 tasks`, `2 child loops` (many: an irregular plural)."""
    return f"{count} {word if count == 1 else many or word + 's'}"

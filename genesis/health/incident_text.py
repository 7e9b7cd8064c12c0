"""An incident as the text `genesis incidents show` and the morning report print: one section per part of
the capture, and everything the agent wrote made one safe line for a terminal."""

from __future__ import annotations

import json
import math
import re
import time
from typing import Any, Iterable

from genesis.health.capture import CMD_WIDTH, TEXT_WIDTH, Incident, Proc
from genesis.words import WINDOW_LABELS, ending_label, sanitize

__all__ = ["render", "safe_line"]


def render(incident: Incident, ident: str) -> str:
    inc = incident
    out = [f"Genesis incident {ident}",
           f"{safe_line(inc.phase, 60)}, iteration {inc.iteration}, run {safe_line(inc.run_id, 80)}, at {_iso(inc.at)}",
           f"ended: {ending_label(safe_line(inc.kind, 40))}: {safe_line(inc.reason, 1000)}",
           f"window that fired: {WINDOW_LABELS.get(inc.window or '', safe_line(inc.window or 'none', 40))}",
           f"tool in flight: {_tool_in_flight(inc.tool_in_flight, inc.at)}",
           f"project: {safe_line(inc.project, 300)}"]
    for note in inc.notes:
        out.append(f"note: {safe_line(note, 300)}")

    out += ["", f"== processes ({len(inc.processes)}) =="]
    if inc.processes:
        out.append(f"{'PID':>7} {'PPID':>7} S {'CPU s':>8} {'RSS MiB':>8}  {'WCHAN':<22} COMMAND")
        for proc, depth in _tree_order(inc.processes):
            mark = " (found by marker)" if proc.origin == "extra" else ""
            command = safe_line(proc.command, CMD_WIDTH)
            out.append(f"{proc.pid:>7} {proc.ppid:>7} {proc.status:<1} {proc.cpu:>8.2f} {proc.rss / 2**20:>8.1f}  "
                       f"{safe_line(proc.wchan, 22) or '-':<22} {'  ' * depth}{command}{mark}")
    else:
        out.append("(none alive)")

    out += ["", "== listening ports =="]
    out += [f"{p.proto} {p.address}:{p.port}  pid {p.pid}" for p in inc.ports] or ["(none)"]

    out += ["", f"== last tool calls ({len(inc.tool_calls)}, newest last) =="]
    out += [_tool_call(c) for c in inc.tool_calls] or ["(none recorded)"]

    out += ["", "== heartbeat =="]
    if isinstance(inc.heartbeat, dict) and inc.heartbeat:
        epoch = inc.heartbeat.get("epoch")
        age = f" (written {inc.at - epoch:.0f}s before the capture)" if _num(epoch) else ""
        out.append(safe_line(json.dumps(inc.heartbeat, sort_keys=True), 1000) + age)
    else:
        out.append(safe_line(str(inc.heartbeat), 1000) if inc.heartbeat else "(none)")

    of = f" of {safe_line(inc.log, 300)}" if inc.log else ""
    out += ["", f"== transcript tail ({len(inc.transcript)} lines{of}) =="]
    out += [safe_line(line, TEXT_WIDTH) for line in inc.transcript] or ["(empty)"]

    out += ["", "== git status =="]
    if inc.git_error:
        out.append(f"(git status failed: {safe_line(inc.git_error, TEXT_WIDTH)})")
    out += list(inc.git_status) or ([] if inc.git_error else ["(nothing)"])
    return "\n".join(out) + "\n"


def _tree_order(procs: Iterable[Proc]) -> list[tuple[Proc, int]]:
    """Parents before their children, each indented by its depth in the tree."""
    procs = list(procs)
    by_pid = {p.pid: p for p in procs}
    kids: dict[int, list[Proc]] = {}
    for p in procs:
        kids.setdefault(p.ppid, []).append(p)
    ordered: list[tuple[Proc, int]] = []
    done: set[int] = set()
    for top in procs:
        if top.pid in done or (top.ppid in by_pid and top.ppid != top.pid):
            continue
        stack = [(top, 0)]
        while stack:
            proc, depth = stack.pop()
            if proc.pid in done:
                continue
            done.add(proc.pid)
            ordered.append((proc, depth))
            stack.extend((k, depth + 1) for k in reversed(kids.get(proc.pid, [])))
    ordered += [(p, 0) for p in procs if p.pid not in done]  # a parent cycle (pid reuse): still shown
    return ordered


def _tool_in_flight(call: dict | None, at: float) -> str:
    if not call:
        return "none"
    if not isinstance(call, dict):
        return safe_line(str(call), 600)
    tool = call.get("tool") or "?"
    since = call.get("t")
    when = f" since {_iso(since)} ({at - since:.0f}s)" if _num(since) else ""
    what = call.get("cmd") or call.get("command")
    return safe_line(f"{tool}{when}: {what}" if what else f"{tool}{when} {json.dumps(call, sort_keys=True)}", 600)


def _tool_call(call: dict) -> str:
    if not isinstance(call, dict):
        return safe_line(str(call), TEXT_WIDTH)
    t = call.get("t")
    ok = call.get("ok")
    parts = [_iso(t)[11:] if _num(t) else "-", str(call.get("event") or call.get("e") or "-"),
             str(call.get("tool") or "?"), "ok" if ok is True else "FAILED" if ok is False else "-"]
    if _num(call.get("ms")):
        parts.append(f"{call['ms']:.0f}ms")
    if call.get("cmd"):
        parts.append(str(call["cmd"]))
    return safe_line("  ".join(parts), TEXT_WIDTH)


# --- small helpers -------------------------------------------------------------------------

def _iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def _num(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def safe_line(text: str, width: int) -> str:
    """One line, safe for a terminal: what the agent wrote may hold escapes and newlines (spacing within
    a line is kept, unlike words.one_line)."""
    return sanitize(re.sub(r"\s*[\r\n]+\s*", " ", str(text)).strip(), width)

"""13. The hang classes' detection: from the moment a class's window is spent to its end decided,
and to the tree gone.

Each class is played by a stand-in CLI under the real watcher (supervise), its output read by
Claude Code's stream reader, or by Codex's or Gemini CLI's for the classes that name them; the
figures are how long after its window the watcher decided the end (its incident is written
then, before the kill: about a check, on a loaded machine two) and how long after its window
the phase was over (the kill, the sweep and the output's last bytes added). A wake-up that
never comes is played with a margin as long as the other windows, its window spent at its due
time plus the margin. Before these classes each waited out the general window
(HEARTBEAT_STALE, 15 min by default) and was named only "stuck".
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import PY, Row

INIT = json.dumps({"type": "system", "subtype": "init", "session_id": "s-1", "model": "m"})
RESULT = json.dumps({"type": "result", "subtype": "success", "is_error": False, "result": "Done.", "session_id": "s-1"})
TASK = json.dumps({"type": "system", "subtype": "task_started", "task_id": "b1", "description": "serve",
                   "is_backgrounded": True})

STAMP = "open('printed', 'w').write(repr(time.time()))"  # when its result was written (wall clock)
CODEX_START = json.dumps({"type": "thread.started", "thread_id": "t-1"}) + "\n" + json.dumps({"type": "turn.started"})
CODEX_DONE = json.dumps({"type": "turn.completed", "usage": {"input_tokens": 10, "output_tokens": 2}})
GEMINI_INIT = json.dumps({"type": "init", "session_id": "s-1", "model": "m"})
GEMINI_RESULT = json.dumps({"type": "result", "status": "success", "stats": {"total_tokens": 12}})
# A wake-up it scheduled itself, due 2 s after its call, that never comes: its tool call, its
# result (when it is due), the run's result; the window is spent at its due time plus the margin.
WAKE_CALL = json.dumps({"type": "assistant", "parent_tool_use_id": None, "message": {"content": [
    {"type": "tool_use", "id": "w1", "name": "ScheduleWakeup", "input": {"delaySeconds": 60}}]}})
WAKE = ("import json, time; due = time.time() + 2; "
        f"print({INIT!r}); print({WAKE_CALL!r}); "
        "print(json.dumps({'type': 'user', 'message': {'content': [{'type': 'tool_result', 'tool_use_id': 'w1'}]}, "
        "'tool_use_result': {'scheduledFor': due * 1000}})); "
        f"print({RESULT!r}, flush=True); open('printed', 'w').write(repr(due)); time.sleep(600)")

# class: (the stand-in CLI, which window ends it, status, window word)
CLASSES = {
    "first_event": ("import time; time.sleep(600)", "first", "stuck"),
    "result_exit": (f"import time; print({INIT!r}); print({RESULT!r}, flush=True); {STAMP}; time.sleep(600)",
                    "result", "done"),
    "result_exit, idle background": (
        f"import subprocess, time; print({INIT!r}); print({TASK!r}); "
        f"subprocess.Popen(['sleep', '600']); print({RESULT!r}, flush=True); {STAMP}; time.sleep(600)", "both",
        "done"),
    "wakeup": (WAKE, "wakeup", "stuck"),
    # Other CLIs' readers: Codex's `--json`, Gemini CLI's stream-json (both speak first, docs/concepts/silences.md).
    "first_event, codex": ("import time; time.sleep(600)", "first", "stuck"),
    "result_exit, codex": (f"import time; print({CODEX_START!r}); print({CODEX_DONE!r}, flush=True); {STAMP}; "
                           f"time.sleep(600)", "result", "done"),
    "result_exit, gemini": (f"import time; print({GEMINI_INIT!r}); print({GEMINI_RESULT!r}, flush=True); {STAMP}; "
                            f"time.sleep(600)", "result", "done"),
}
READERS = {"codex": ("genesis.agents.codex.stream", "CodexReader"),
           "gemini": ("genesis.agents.gemini.stream", "GeminiStreamReader")}


def reader_of(name: str):
    """The stream reader a class is read by: Claude Code's, or the CLI its name ends with."""
    import importlib

    from genesis.agents.claude.stream import StreamReader
    module, cls = READERS.get(name.rsplit(", ", 1)[-1], ("", ""))
    return getattr(importlib.import_module(module), cls) if module else StreamReader


def worker(name: str, interval: float, window: float, silent: float, tmp: str) -> None:
    """One supervised run in this process; prints how long after its window it ended, as JSON."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from genesis.procs.proctree import marked
    from genesis.watch.supervisor import AgentRun, Limits, supervise

    code, which, _ = CLASSES[name]
    run_id = f"bench-{os.getpid()}"
    env = {**os.environ, "GENESIS_RUN_ID": run_id}
    decided: list[float] = []
    run = AgentRun((PY, "-c", code), Path(tmp), env, Path(tmp) / "log", Path(tmp) / "hb.json", run_id,
                   reader=reader_of(name)(), on_incident=lambda *_a, **_k: decided.append(time.time()))
    limits = Limits(interval, 3600.0, 3600.0, 1.0, tool_silent=silent, first_event_after=window,
                    result_exit_after=window, wakeup_margin=window)
    started = time.time()
    out = supervise(run, limits)
    over = time.time()
    printed = Path(tmp) / "printed"
    if printed.exists():  # the window runs from its result (or the wake-up's due time), after its start-up
        started = float(printed.read_text())
    spent = window if which != "both" else max(window, silent)
    print(json.dumps({"status": out.status, "window": out.window, "decided": decided[0] - started - spent,
                      "after": over - started - spent,
                      "left": len(marked({"GENESIS_RUN_ID": run_id}))}))


def run(configs=((1.0, 5.0, 3.0, 5),)) -> list[Row]:
    rows = []
    for interval, window, silent, runs in configs:
        for name, (_, _, status) in CLASSES.items():
            with tempfile.TemporaryDirectory() as tmp:
                procs = []
                for i in range(runs):  # in parallel: each run mostly waits
                    d = Path(tmp) / str(i)
                    d.mkdir()
                    procs.append(subprocess.Popen([PY, __file__, name, str(interval), str(window), str(silent),
                                                   str(d)], stdout=subprocess.PIPE, text=True))
                results = [json.loads(p.communicate()[0]) for p in procs]
            assert all(r["status"] == status and r["left"] == 0 for r in results), results
            decided, after = tuple(r["decided"] for r in results), tuple(r["after"] for r in results)
            bound = 2 * interval + 0.5  # the next check, and the checks' own work on a loaded machine
            spent = f"{window:g}s window" + (f", {silent:g}s tool-silent" if "background" in name else "")
            rows.append(Row(f"{name}: decided, past its window", "s", decided, target=f"<= {bound:g} s",
                            met=max(decided) <= bound, note=f"{status}; {spent}, a check every {interval:g}s; "
                                                            f"before: the 900 s stale window"))
            rows.append(Row(f"{name}: tree gone, past its window", "s", after))
    return rows


if __name__ == "__main__":
    if len(sys.argv) > 1:
        worker(sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), sys.argv[5])
    else:
        for row in run():
            met = f" ({row.target}, {'met' if row.met else 'NOT met'})" if row.target else ""
            print(f"{row.name}: median {row.median:.2f} {row.unit}, min {min(row.samples):.2f}, max "
                  f"{max(row.samples):.2f}{met}" + (f"; {row.note}" if row.note else ""))

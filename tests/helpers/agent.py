"""A script run as a phase's agent, the way Genesis runs one.

  script(path, text)                   an executable script: the loop's --agent-cmd
  agent_run(folder, text, **kw)        the AgentRun that starts it as the Builder
  supervised(folder, text, **kw)       supervise() it in this process: (outcome, notes, run)
  watcher_spec(folder, text, **kw)     a spec for a watcher process of its own
                                       (`spawn.py supervise SPEC`, as `genesis run-phase` is)

The script is written to folder/agent.sh (run with bash) or, named *.py, run with this
Python. It sees the run's markers and, for its own use: $HOOK (the heartbeat hook), $HB
(its heartbeat file, in a 0700 folder as the loop makes), $SPAWN (tests/helpers/spawn.py)
and $PY (this Python). Keywords of supervised() and watcher_spec() that name a field of
Limits set that limit (the rest default to DEFAULT_LIMITS); the others go to AgentRun
(prompt, prompt_stdin, reader, raw_log, on_check...).

Give each test file a run id of its own: a watcher's end-of-phase sweep ends what carries
its run id, and files run side by side in the suite's workers.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Callable, NamedTuple

from helpers import paths

from genesis.health.heartbeat import hook_script
from genesis.watch.supervisor import AgentRun, Limits, Outcome, supervise

__all__ = ["DEFAULT_LIMITS", "Supervised", "script", "agent_run", "supervised", "watcher_spec"]

DEFAULT_LIMITS = {"check_interval": 0.2, "stale_after": 1.0, "max_runtime": 30.0, "kill_grace": 1.0}
LIMIT_FIELDS = frozenset(f.name for f in dataclasses.fields(Limits))


class Supervised(NamedTuple):
    outcome: Outcome
    notes: list[str]
    run: AgentRun


# A PreToolUse payload as Claude Code gives the hook.
PRE_TOOL_USE = '{"hook_event_name":"PreToolUse","tool_name":"Bash","session_id":"s-1"}'


def launcher_cli(folder: Path) -> Path:
    """folder/cli.py: a CLI that runs the hook (a Bash call starts), leaves a hung tool, and
    keeps its own CPU busy for 60 s: a launcher's work that is not its tool's."""
    cli = folder / "cli.py"
    cli.write_text("import os, subprocess, sys, time\n"
                   f"subprocess.run(['bash', os.environ['HOOK']], input={PRE_TOOL_USE!r}, text=True)\n"
                   "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
                   "end = time.time() + 60\n"
                   "while time.time() < end: pass\n")
    return cli


def script(path: Path, text: str) -> Path:
    """`text` as an executable script at `path` (the loop refuses an agent it cannot execute)."""
    path.write_text(text)
    path.chmod(0o755)
    return path


def agent_run(folder: Path, text: str, *, run_id: str, name: str = "agent.sh", args: tuple[str, ...] = (),
              env: dict[str, str] | None = None, log: Path | None = None, hb_dir: Path | None = None,
              **options) -> AgentRun:
    """The script written to folder/NAME and the run that starts it in `folder` with ARGS; its output
    goes to `log` (folder/agent.log), its heartbeat to <hb_dir or folder/hb>/Builder.json, `env` on
    top of this process's environment."""
    path = script(folder / name, text)
    hb = (hb_dir or folder / "hb") / "Builder.json"
    hb.parent.mkdir(mode=0o700, exist_ok=True)
    # The project marker keeps parallel tests that share a run id out of each other's sweeps.
    full_env = {**os.environ, "GENESIS_RUN_ID": run_id, "GENESIS_PROJECT_DIR": str(folder),
                "GENESIS_HEARTBEAT_FILE": str(hb), "GENESIS_AGENT": "Builder",
                "HOOK": str(hook_script()), "HB": str(hb), "SPAWN": str(paths.SPAWN), "PY": sys.executable,
                **(env or {})}
    argv = (sys.executable if name.endswith(".py") else "bash", str(path), *args)
    return AgentRun(argv, folder, full_env, log or folder / "agent.log", hb, run_id, **options)


def _split(kw: dict) -> tuple[dict, dict]:
    """(Limits' keywords over DEFAULT_LIMITS, the rest)."""
    limits = {**DEFAULT_LIMITS, **{k: v for k, v in kw.items() if k in LIMIT_FIELDS}}
    return limits, {k: v for k, v in kw.items() if k not in LIMIT_FIELDS}


def supervised(folder: Path, text: str, *, run_id: str, clock=None, debug: Callable[[str], None] | None = None,
               **kw) -> Supervised:
    """Run the script under supervise() to its end: its outcome, the watcher's notes, and the run."""
    limits, options = _split(kw)
    run = agent_run(folder, text, run_id=run_id, **options)
    notes: list[str] = []
    extra = {"clock": clock} if clock is not None else {}
    if debug is not None:
        extra["debug"] = debug
    return Supervised(supervise(run, Limits(**limits), note=notes.append, **extra), notes, run)


def watcher_spec(folder: Path, text: str, *, run_id: str, **kw) -> Path:
    """folder/spec.json for `spawn.py supervise`, which writes the outcome and notes to folder/outcome.json."""
    limits, options = _split(kw)
    run = agent_run(folder, text, run_id=run_id, **options)
    spec = folder / "spec.json"
    spec.write_text(json.dumps({"argv": list(run.argv), "cwd": str(run.cwd), "env": dict(run.env),
                                "log": str(run.log), "heartbeat": str(run.heartbeat), "run_id": run_id,
                                "prompt": run.prompt, "limits": limits, "out": str(folder / "outcome.json")}))
    return spec

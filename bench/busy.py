"""9. Busy or stuck: false kills of busy tools, detection of a silent tool and of a doom loop.

Real agent processes fire the real hook (PreToolUse, then the tool, then PostToolUse), as
Claude Code does around a Bash call; the watcher samples the tool's tree at each check.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import HOOK, PY, ROOT, Row, git_project

PRE = '{"hook_event_name":"PreToolUse","tool_name":"Bash","session_id":"s","tool_use_id":"toolu_1"}'
POST = '{"hook_event_name":"PostToolUse","tool_name":"Bash","session_id":"s","tool_use_id":"toolu_1"}'
TOOLS = {
    "cpu": f'"{PY}" -c "import time; end = time.time() + 6\nwhile time.time() < end: pass"',
    "io": (f'"{PY}" -c "import time; end = time.time() + 6\nwith open(\'out.bin\', \'wb\') as f:\n'
           f'    while time.time() < end: f.write(bytes(65536)); f.flush(); time.sleep(0.05)"'),
    "idle": f'"{PY}" -c "import time; time.sleep(600)"',
}
CHECK, STALE, SILENT = 0.2, 2.0, 1.0


def worker(kind: str, tmp: str) -> None:
    """One supervised tool call; prints how it ended and when, as JSON."""
    sys.path.insert(0, str(ROOT))
    from genesis.watch.supervisor import AgentRun, Limits, supervise

    hb = Path(tmp) / "hb.json"
    script = Path(tmp) / "agent.sh"
    script.write_text(f"printf '%s' '{PRE}' | bash \"$HOOK\"\necho \"$EPOCHREALTIME\" >started\n"
                      f"bash -c {json.dumps(TOOLS[kind])}\nprintf '%s' '{POST}' | bash \"$HOOK\"\n")
    env = {**os.environ, "HOOK": str(HOOK), "GENESIS_HEARTBEAT_FILE": str(hb), "GENESIS_RUN_ID": f"bench-{kind}"}
    general = 30.0 if kind == "idle" else STALE  # the silent tool must be caught by its own window
    out = supervise(AgentRun(("bash", str(script)), Path(tmp), env, Path(tmp) / "log", hb, f"bench-{kind}"),
                    Limits(CHECK, general, 120, 1.0, count_output=False, tool_silent=SILENT))
    gone = time.time()
    started = float((Path(tmp) / "started").read_text().strip().replace(",", "."))
    print(json.dumps({"status": out.status, "after": gone - started}))


def one(kind: str) -> dict:
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:  # an alert may still be recorded
        done = subprocess.run([PY, __file__, kind, tmp], capture_output=True, text=True, check=True)
        return json.loads(done.stdout)


DOOM = r"""n=0
while [ $n -lt 300 ]; do
  n=$((n + 1))
  for event in PreToolUse PostToolUseFailure; do
    printf '{"session_id":"s","hook_event_name":"%s","tool_name":"Bash","tool_input":{"command":"pytest -x"},"tool_use_id":"toolu_%s"}' "$event" "$n" | bash "$HOOK"
  done
  sleep 0.1
done
"""


def doom_calls(check: float) -> int:
    """The real loop with an agent repeating one failing command: calls made before it ended."""
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:  # an alert may still be recorded
        project = git_project(Path(tmp) / "project")
        agent = Path(tmp) / "doom.sh"
        agent.write_text(DOOM)
        env = {**os.environ, "HOOK": str(HOOK), "GENESIS_AGENT_CMD": f"bash {agent}", "GENESIS_PHASES": "Builder",
               "PHASE_RETRIES": "0", "HEARTBEAT_CHECK_INTERVAL": str(check), "HEARTBEAT_STALE": "60s",
               "ITERATION_PAUSE_SECONDS": "0", "REAP_PORTS": "", "NO_COLOR": "1"}
        subprocess.run(["bash", str(ROOT / "start-multi-agent-loop.sh"), "--project", str(project),
                        "--max-iterations", "1"], env=env, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        log = project / ".git" / "genesis" / "heartbeats" / "Builder.tools.jsonl"
        return sum(1 for line in log.read_text().splitlines() if '"PostToolUseFailure"' in line)


def run(repeats: int = 3) -> list[Row]:
    rows = []
    for kind, what in (("cpu", "a CPU-busy tool"), ("io", "an I/O-busy tool")):
        kills = [0.0 if one(kind)["status"] == "exited" else 1.0 for _ in range(repeats)]
        rows.append(Row(f"false kills: {what} silent for 3 windows", "kills", tuple(kills), target="0",
                        met=sum(kills) == 0, note=f"window {STALE:g}s, tool-silent {SILENT:g}s, 6 s of work"))
    ratios = []
    for _ in range(repeats):
        result = one("idle")
        assert result["status"] == "stuck", result
        ratios.append(result["after"] / SILENT)
    rows.append(Row("a silent tool: killed after, as a multiple of the tool-silent window", "x", tuple(ratios),
                    target="<= 1 + (check + kill) / window", met=max(ratios) <= 1 + (CHECK + 1.0) / SILENT + 0.5,
                    note=f"tool-silent {SILENT:g}s, check {CHECK:g}s, general window 30s"))
    calls = [float(doom_calls(1.0)) for _ in range(max(1, repeats - 1))]
    rows.append(Row("a doom loop (one command failing, 5 calls/s, check 1s): calls made", "calls", tuple(calls),
                    target="<= 6 + one check's calls", met=max(calls) <= 6 + 6, note="wedged at 6 same failures"))
    return rows


if __name__ == "__main__":
    worker(sys.argv[1], sys.argv[2])

"""Hook cost per tool call: the heartbeat hook against the floor of starting any hook.

Usage: python bench/hook_cost.py [RUNS]

Feeds the hook a real PostToolUse stdin (as Claude Code sends it) RUNS times, interleaved
with `bash -c true` (the floor), and prints median, min and max of each and their ratio.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HOOK = ROOT / "hooks" / "genesis-heartbeat.sh"
PAYLOAD = json.dumps({
    "session_id": "97f9c0de-1d2b-4a51-9c1e-0a1b2c3d4e5f",
    "transcript_path": "/home/u/.claude/projects/-home-u-proj/97f9c0de-1d2b-4a51-9c1e-0a1b2c3d4e5f.jsonl",
    "cwd": "/home/u/proj", "permission_mode": "bypassPermissions", "hook_event_name": "PostToolUse",
    "tool_name": "Bash", "tool_input": {"command": "pytest -q tests/test_api.py", "description": "Run tests"},
    "tool_response": {"stdout": "....\n4 passed in 0.31s\n", "stderr": "", "interrupted": False,
                      "isImage": False},
    "tool_use_id": "toolu_01AbCdEfGhIjKlMnOpQrStUv", "duration_ms": 812,
}).encode()


def timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, input=PAYLOAD, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   check=True)
    return (time.perf_counter() - start) * 1000


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "GENESIS_HEARTBEAT_FILE": os.path.join(tmp, "hb.json"), "GENESIS_AGENT": "Builder"}
        cases = {"floor: bash -c true": ["bash", "-c", "true"], "genesis-heartbeat.sh": [str(HOOK)]}
        samples: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(runs):  # interleaved, so machine noise hits both alike
            for name, argv in cases.items():
                samples[name].append(timed(argv, env))
    floor = statistics.median(samples["floor: bash -c true"])
    print(f"hook cost per tool call, {runs} runs each (ms)")
    print(f"{'case':<24} {'median':>8} {'min':>8} {'max':>8} {'x floor':>8}")
    for name, values in samples.items():
        med = statistics.median(values)
        print(f"{name:<24} {med:8.2f} {min(values):8.2f} {max(values):8.2f} {med / floor:8.2f}")


if __name__ == "__main__":
    main()

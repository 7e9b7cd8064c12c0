"""1. Hook cost per tool call: the heartbeat hook, the floor, and the same work in Python."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time

from common import HOOK, PY, ROOT, Row

PAYLOAD = json.dumps({
    "session_id": "97f9c0de-1d2b-4a51-9c1e-0a1b2c3d4e5f",
    "transcript_path": "/home/u/.claude/projects/-home-u-proj/97f9c0de-1d2b-4a51-9c1e-0a1b2c3d4e5f.jsonl",
    "cwd": "/home/u/proj", "permission_mode": "bypassPermissions", "hook_event_name": "PostToolUse",
    "tool_name": "Bash", "tool_input": {"command": "pytest -q tests/test_api.py", "description": "Run tests"},
    "tool_response": {"stdout": "....\n4 passed in 0.31s\n", "stderr": "", "interrupted": False,
                      "isImage": False},
    "tool_use_id": "toolu_01AbCdEfGhIjKlMnOpQrStUv", "duration_ms": 812,
}).encode()


def _timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, input=PAYLOAD, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   check=True)
    return (time.perf_counter() - start) * 1000


def run(runs: int = 300) -> list[Row]:
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "GENESIS_HEARTBEAT_FILE": os.path.join(tmp, "hb.json"), "GENESIS_AGENT": "Builder"}
        cases = {
            "hook: floor, bash -c true": ["bash", "-c", "true"],
            "hook: bash genesis-heartbeat.sh (as installed)": ["bash", str(HOOK)],
            "hook: genesis-heartbeat.sh (via its #! line)": [str(HOOK)],
            "hook: the same work in Python": [PY, str(ROOT / "bench" / "python_hook.py")],
        }
        samples: dict[str, list[float]] = {name: [] for name in cases}
        for i in range(runs):  # interleaved, so machine noise hits every case alike
            for name, argv in cases.items():
                if "Python" in name and i % 10:
                    continue  # Python is slow and steady: a tenth of the runs is plenty
                samples[name].append(_timed(argv, env))
    floor = "hook: floor, bash -c true"
    rows = []
    for name, values in samples.items():
        row = Row(name, "ms", tuple(values))
        if name != floor:
            ratio = row.median / Row(floor, "ms", tuple(samples[floor])).median
            target_applies = "as installed" in name
            row = Row(name, "ms", tuple(values), target="<= 2x floor" if target_applies else "",
                      met=(ratio <= 2.0) if target_applies else None, baseline=floor, ratio=ratio)
        rows.append(row)
    return rows

#!/usr/bin/env python3
"""The heartbeat hook's work written in Python: the comparison for hook_cost (not used by Genesis)."""

import json
import os
import sys
import time

try:
    payload = json.loads(sys.stdin.read(4096) or "{}") if not sys.stdin.isatty() else {}
except ValueError:
    payload = {}
target = os.environ["GENESIS_HEARTBEAT_FILE"]
beat = {"agent": os.environ.get("GENESIS_AGENT", "unknown"),
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "epoch": time.time(),
        "tool": payload.get("tool_name", ""), "event": payload.get("hook_event_name", ""),
        "session_id": payload.get("session_id", ""), "pid": int(os.environ.get("CLAUDE_PID", os.getppid())),
        "run_id": os.environ.get("GENESIS_RUN_ID", "")}
tmp = f"{target}.{os.getpid()}.tmp"
with open(tmp, "w") as fh:
    fh.write(json.dumps(beat) + "\n")
os.replace(tmp, target)

"""Where things are in the checkout, for a test at any depth of tests/."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
FIXTURES = TESTS / "fixtures"
SPAWN = TESTS / "helpers" / "spawn.py"
HOOK = ROOT / "genesis" / "data" / "genesis-heartbeat.sh"
LOOP = ROOT / "start-multi-agent-loop.sh"
TOOLS = ROOT / ".tools"

"""The tool log reader: lines the real hook writes, in-flight calls, pairing, rotation."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from genesis.health.heartbeat import hook_script
from genesis.health.toollog import (FAILURE, POST, PRE, ToolCall, commands, in_flight, input_hash, pairs, read_tail,
                                    rotate, tool_log_path)


def hook(hb: Path, payload: dict) -> None:
    env = {**os.environ, "GENESIS_HEARTBEAT_FILE": str(hb)}
    subprocess.run(["bash", str(hook_script())], input=json.dumps(payload).encode(), env=env, check=True,
                   timeout=30)


def event(name: str, tool: str, cmd: str, ident: str = "", **extra) -> dict:
    key = {"Bash": "command", "Grep": "pattern"}.get(tool, "file_path")
    payload = {"session_id": "s", "hook_event_name": name, "tool_name": tool, "tool_input": {key: cmd}}
    if name != PRE:
        payload["tool_response"] = extra.pop("response", {"stdout": ""})
    if ident:
        payload["tool_use_id"] = ident
    payload.update(extra)
    return payload


@pytest.fixture
def hb(tmp_path: Path) -> Path:
    (tmp_path / "hb").mkdir(mode=0o700)
    return tmp_path / "hb" / "Builder.json"


def test_the_hooks_lines_read_back_with_command_hash_ok_and_duration(hb: Path) -> None:
    cmd = 'pytest -x "tests/a b.py" \\ é'
    hook(hb, event(PRE, "Bash", cmd, "toolu_1"))
    hook(hb, event(FAILURE, "Bash", cmd, "toolu_1", error="Exit code 1", is_interrupt=False, duration_ms=812))
    hook(hb, event(PRE, "Write", "/p/notes.md", "toolu_2"))
    calls = read_tail(tool_log_path(hb))
    assert [(c.event, c.tool, c.id, c.cmd, c.ok, c.ms) for c in calls] == [
        (PRE, "Bash", "toolu_1", cmd, None, None),
        (FAILURE, "Bash", "toolu_1", cmd, False, 812),
        (PRE, "Write", "toolu_2", "/p/notes.md", None, None)]
    assert calls[0].hash == calls[1].hash == input_hash("Bash", cmd) != input_hash("Bash", "pytest")
    assert in_flight(calls) == calls[2]
    assert pairs(calls) == [calls[1]]


def test_a_large_response_cuts_the_id_off_and_the_post_event_still_pairs_by_input(hb: Path) -> None:
    hook(hb, event(PRE, "Bash", "make test", "toolu_7"))
    hook(hb, event(POST, "Bash", "make test", "toolu_7", response={"stdout": "x" * 5000}, duration_ms=3))
    calls = read_tail(tool_log_path(hb))
    assert calls[1].id == "" and calls[1].ms is None and calls[1].ok is True  # past the hook's 4096 bytes
    assert in_flight(calls) is None
    done = pairs(calls)
    assert [(c.id, c.cmd, c.ok) for c in done] == [("toolu_7", "make test", True)]
    assert commands(done) == ["Bash 'make test' ok"]


def call(event: str, ident: str = "", cmd: str = "c", t: float = 0.0, tool: str = "Bash") -> ToolCall:
    ok = None if event == PRE else event == POST
    return ToolCall(t, event, tool, ident, input_hash(tool, cmd), ok, None, cmd)


def test_in_flight_by_id_and_without_ids_only_when_the_last_event_is_a_start() -> None:
    a, b = call(PRE, "a", t=1), call(PRE, "b", "d", t=2)
    assert in_flight([a, b, call(POST, "b", "d", t=3)]) == a          # parallel calls: a still runs
    assert in_flight([a, call(POST, "a", t=2)]) is None
    x = call(PRE, cmd="x", t=1)
    assert in_flight([x]) == x
    assert in_flight([x, call(PRE, cmd="y", t=2), call(POST, cmd="y", t=3)]) is None  # moved on: x's end was lost
    assert in_flight([]) is None
    # a post event whose start was rotated away is a completed call of its own
    orphan = call(FAILURE, "z", t=5)
    assert pairs([orphan]) == [orphan]


def test_read_tail_skips_bad_lines_bounds_its_read_and_refuses_symlinks(tmp_path: Path) -> None:
    log = tmp_path / "B.tools.jsonl"
    good = [json.dumps({"t": i, "e": POST, "tool": "Bash", "ok": True, "cmd": f"echo {i}"}) for i in range(300)]
    junk = ["{broken", "[]", '{"t": "x", "e": "PostToolUse", "tool": "Bash"}', '{"t": NaN, "e": "P", "tool": "B"}',
            "\udcff".encode("utf-8", "surrogateescape").decode("utf-8", "replace")]
    log.write_text("\n".join(good[:150] + junk + good[150:]) + "\n", encoding="utf-8")
    calls = read_tail(log)
    assert len(calls) == 200 and calls[-1].cmd == "echo 299" and calls[0].cmd == "echo 100"
    small = read_tail(log, most=1000, max_bytes=1000)
    assert 0 < len(small) < 30 and small[-1].cmd == "echo 299"
    assert all(c.cmd.startswith("echo ") for c in small)  # the torn first line was dropped
    link = tmp_path / "link.tools.jsonl"
    link.symlink_to(log)
    assert read_tail(link) == [] and read_tail(tmp_path / "missing") == []
    fifo = tmp_path / "fifo.tools.jsonl"
    os.mkfifo(fifo)
    assert read_tail(fifo) == []  # refused at once, not blocked on


def test_rotate_keeps_the_newest_half_in_whole_lines_atomically(tmp_path: Path) -> None:
    log = tmp_path / "B.tools.jsonl"
    lines = [json.dumps({"t": i, "e": PRE, "tool": "Bash", "cmd": "x" * 40}) for i in range(2000)]
    log.write_text("\n".join(lines) + "\n")
    size = log.stat().st_size
    inode = log.stat().st_ino
    assert rotate(log, cap_bytes=size) is False
    assert rotate(log, cap_bytes=20_000) is True
    kept = log.read_text().splitlines()
    assert 0 < len(log.read_bytes()) <= 10_000 and kept[-1] == lines[-1]
    assert all(json.loads(line) for line in kept)
    assert log.stat().st_ino != inode  # replaced by rename, never truncated in place
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # no temp file left
    target = tmp_path / "elsewhere"
    target.write_text("y" * 50_000)
    link = tmp_path / "L.tools.jsonl"
    link.symlink_to(target)
    assert rotate(link, cap_bytes=1000) is False and target.stat().st_size == 50_000 and link.is_symlink()


def test_tool_log_path_sits_beside_the_heartbeat() -> None:
    assert tool_log_path(Path("/g/heartbeats/Builder.json")) == Path("/g/heartbeats/Builder.tools.jsonl")
    assert tool_log_path(Path("/g/hb")) == Path("/g/hb.tools.jsonl")

"""State files on real file systems: a full disk is reported, never half-written, never a crash.

The full disk is a real 64 KiB tmpfs mounted in a private mount namespace (unshare), so
nothing outside the test sees it; where that is not permitted the tests say so and skip.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import paths

from genesis.ledger.store import Ledger, LedgerError
from genesis.store.atomicio import CorruptFile, DiskFull, TooLarge, check_room, free_bytes, read_bytes

PY = sys.executable

# Runs first in the namespace: `mnt` is the small tmpfs; fill() leaves it without a free page.
PRELUDE = """
import json, os, sys
from pathlib import Path
mnt = Path(sys.argv[1])
out = {}
def fill():
    with open(mnt / "filler", "wb", buffering=0) as fh:
        while True:
            try:
                fh.write(b"\\0" * 4096)
            except OSError as exc:
                assert exc.errno == 28, exc
                return
def listing():
    return sorted(os.listdir(mnt))
"""


def _namespace() -> list[str]:
    """The unshare prefix that gives a private mount namespace here, or skip saying why."""
    if not shutil.which("unshare"):
        pytest.skip("unshare (util-linux) is not installed: no private mount namespace for a small tmpfs")
    tries = [["unshare", "--user", "--map-root-user", "--mount"]]
    if os.geteuid() == 0:
        tries.append(["unshare", "--mount"])
    why = ""
    for prefix in tries:
        done = subprocess.run([*prefix, "true"], capture_output=True, text=True, timeout=30)
        if done.returncode == 0:
            return prefix
        why = done.stderr.strip()
    pytest.skip(f"no private mount namespace here (unshare refused: {why})")


def on_small_disk(tmp_path, body: str, size: str = "64k") -> dict:
    """Run PRELUDE + body in a private mount namespace with a small tmpfs; its `out` as a dict."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    script = f'mount -t tmpfs -o size={size},mode=700 tmpfs "$1" || exit 77; shift; exec "$@"'
    code = PRELUDE + body + "\nprint(json.dumps(out))\n"
    done = subprocess.run([*_namespace(), "sh", "-c", script, "_", str(mnt), PY, "-c", code, str(mnt)],
                          capture_output=True, text=True, timeout=120)
    if done.returncode == 77:
        pytest.skip(f"cannot mount a tmpfs in a private mount namespace here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.fault(32)
def test_a_full_disk_is_disk_full_with_the_old_file_intact_and_no_temp_file(tmp_path):
    out = on_small_disk(tmp_path, """
from genesis.store.atomicio import DiskFull, write_json, write_text
write_json(mnt / "state.json", {"iteration": 1})
fill()
for name, write in (("text", lambda: write_text(mnt / "state.json", "x" * 200_000)),
                    ("json", lambda: write_json(mnt / "state.json", {"big": "y" * 200_000}))):
    try:
        write()
        out[name] = "written"
    except DiskFull as exc:
        out[name] = {"message": str(exc), "errno": exc.errno, "free": exc.free, "os": isinstance(exc, OSError)}
out["state"] = (mnt / "state.json").read_text()
out["listing"] = listing()
""")
    for name in ("text", "json"):
        full = out[name]
        assert full != "written"
        assert full["errno"] == errno.ENOSPC and full["os"]
        assert f"no room to write {tmp_path / 'small' / 'state.json'}" in full["message"]
        assert f"({full['free']} bytes free there)" in full["message"] and full["free"] < 4096
        assert "free some space" in full["message"]
    assert json.loads(out["state"]) == {"iteration": 1}
    assert out["listing"] == ["filler", "state.json"]


@pytest.mark.fault(32)
def test_check_room_refuses_before_writing_and_free_bytes_measures_the_disk(tmp_path):
    out = on_small_disk(tmp_path, """
from genesis.store.atomicio import DiskFull, check_room, free_bytes
out["free"] = free_bytes(mnt / "not" / "yet" / "there")
check_room(mnt / "x.json", need=1024)  # room for 1 KiB: no error
try:
    check_room(mnt / "x.json")  # the default asks for 1 MiB
    out["refused"] = None
except DiskFull as exc:
    out["refused"] = str(exc)
out["listing"] = listing()
""")
    assert 32 << 10 < out["free"] <= 64 << 10
    assert out["refused"] == (f"no room to write {tmp_path / 'small' / 'x.json'} ({out['free']} bytes free "
                              f"there, {1 << 20} needed); free some space on that disk (the file was left as it was)")
    assert out["listing"] == []


@pytest.mark.fault(32)
def test_the_breaker_on_a_full_disk_raises_disk_full_and_keeps_its_state(tmp_path):
    out = on_small_disk(tmp_path, """
from genesis.store.atomicio import DiskFull
from genesis.loop.breaker import BreakerStore, record
store = BreakerStore(mnt / ".circuit_breaker.json", lock_path=mnt / "breaker.lock")
store.update(lambda s: record(s, 1, False, 1.8e9, 3, 5))
fill()
try:
    store.update(lambda s: record(s, 2, False, 1.8e9, 3, 5, fingerprint={"head": "a", "digest": "b" * 100_000}))
    out["error"] = None
except DiskFull as exc:
    out["error"] = str(exc)
out["state"] = json.loads((mnt / ".circuit_breaker.json").read_text())
out["listing"] = listing()
""")
    assert out["error"].startswith(f"no room to write {tmp_path / 'small' / '.circuit_breaker.json'}")
    assert out["state"]["no_progress_count"] == 1 and out["state"]["last_iteration"] == 1
    assert out["listing"] == [".circuit_breaker.json", "breaker.lock", "filler"]


@pytest.mark.fault(32)
def test_an_event_on_a_full_disk_raises_disk_full_keeps_nothing_of_it_and_the_ledger_goes_on(tmp_path):
    out = on_small_disk(tmp_path, """
from genesis.store.atomicio import DiskFull
from genesis.ledger import Ledger
led = Ledger.open(mnt / "ledger.sqlite3")
led.record("run-1", "loop_start")
fill()
try:
    for n in range(50):  # the WAL has a few pages left over: write until the disk is truly full
        led.record("run-1", "phase_end", n=n, detail="d" * 20_000)
    out["error"] = None
except DiskFull as exc:
    out["error"] = str(exc)
out["kinds"] = [e["event"] for e in led.events()]
os.unlink(mnt / "filler")
led.record("run-1", "loop_end", exit_code=6)
led.close()
with Ledger.open(mnt / "ledger.sqlite3", readonly=True) as again:
    out["after"] = [e["event"] for e in again.events()]
""", size="1m")
    assert out["error"].startswith(f"no room to write {tmp_path / 'small' / 'ledger.sqlite3'}")
    kept = out["kinds"]
    assert kept[0] == "loop_start" and set(kept[1:]) <= {"phase_end"} and len(kept) < 51
    assert out["after"] == kept + ["loop_end"]  # nothing half-written, and the ledger works again


def test_free_bytes_and_check_room_on_an_ordinary_disk(tmp_path, monkeypatch):
    asked = []
    real = os.statvfs
    monkeypatch.setattr(os, "statvfs", lambda p: asked.append(p) or real(p))
    # other tests write to the same disk meanwhile, so the figure is compared by the
    # folder it was read from (the nearest that exists), not by its value
    assert free_bytes(tmp_path / "a" / "b" / "c.json") > 0
    assert asked == [tmp_path]
    check_room(tmp_path / "a" / "b" / "c.json", need=1)
    with pytest.raises(DiskFull, match="needed"):
        check_room(tmp_path / "c.json", need=free_bytes(tmp_path) + (1 << 40))


def test_disk_full_is_an_oserror_with_enospc(tmp_path):
    exc = DiskFull(tmp_path / "f", 10, 20)
    assert isinstance(exc, OSError) and exc.errno == errno.ENOSPC
    assert str(exc) == (f"no room to write {tmp_path / 'f'} (10 bytes free there, 20 needed); "
                        f"free some space on that disk (the file was left as it was)")


def test_reads_are_capped_and_a_fifo_is_refused_at_once(tmp_path):
    big = tmp_path / "big"
    big.write_bytes(b"x" * 5000)
    with pytest.raises(TooLarge):
        read_bytes(big, 4096)
    assert read_bytes(big, 5000) == b"x" * 5000
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(CorruptFile, match="not a regular file"):
        read_bytes(fifo, 4096)


@pytest.mark.fault(48)
def test_a_fifo_or_a_symlink_at_the_ledgers_path_is_refused_at_once(tmp_path):
    fifo = tmp_path / "ledger.sqlite3"
    os.mkfifo(fifo)
    with pytest.raises(LedgerError, match="not a regular file; remove it"):
        Ledger.open(fifo)  # SQLite would open it and wait forever for a header
    with pytest.raises(LedgerError, match="not a regular file"):
        Ledger.open(fifo, readonly=True)
    elsewhere = tmp_path / "elsewhere.sqlite3"
    link = tmp_path / "link" / "ledger.sqlite3"
    link.parent.mkdir()
    link.symlink_to(elsewhere)
    with pytest.raises(LedgerError, match="is a symlink"):
        Ledger.open(link)
    assert not elsewhere.exists()


@pytest.mark.whole
@pytest.mark.fault(32)
@pytest.mark.fault(73)
def test_the_loop_stops_cleanly_with_disk_full_when_an_agent_fills_the_disk(tmp_path):
    """The project and Genesis's state on a 4 MiB disk; in iteration 1 the Builder fills it.
    The events the full disk keeps out of the ledger are said in words, never as a Python dict."""
    loop = paths.LOOP
    out = on_small_disk(tmp_path, f"""
import subprocess
project = mnt / "project"
project.mkdir()
git = ["git", "-c", "user.name=T", "-c", "user.email=t@example.invalid"]
subprocess.run(["git", "init", "-q", str(project)], check=True)
(project / "README.md").write_text("hello\\n")
subprocess.run(git + ["add", "-A"], cwd=project, check=True)
subprocess.run(git + ["commit", "-qm", "init"], cwd=project, check=True)
agent = mnt / "agent.sh"
agent.write_text("#!/bin/sh\\nhead -c 8000000 /dev/zero >filler 2>/dev/null; echo filled\\n")
agent.chmod(0o755)
env = {{**os.environ, "GENESIS_BIN": {str(Path(PY).parent / "genesis")!r}, "NO_COLOR": "1",
       "ITERATION_PAUSE_SECONDS": "0", "HEARTBEAT_CHECK_INTERVAL": "0.2", "HEARTBEAT_STALE": "5s",
       "REAP_PORTS": ""}}
done = subprocess.run(["bash", {str(loop)!r}, "--project", str(project), "--agent-cmd", str(agent),
                       "--max-iterations", "3"], env=env, capture_output=True, text=True, timeout=120)
out["code"] = done.returncode
out["output"] = done.stdout + done.stderr
""", size="4m")
    assert out["code"] == 6, out["output"]
    assert "disk full" in out["output"] and "no room to write" in out["output"]
    assert "--- iteration 2 ---" not in out["output"]
    assert "Traceback" not in out["output"] and ": stuck:" not in out["output"]
    assert re.search(r"not recorded in the ledger: phase end \(iteration 1, phase Builder, pid \d+, "
                     r"(box pid \d+, )?status exited, returncode \d+, duration \d+s, .*, started \d\d:\d\d:\d\d \S+"
                     r"(, log \S+, tail \d+)?\): no room to write \S+/ledger.sqlite3", out["output"]), out["output"]
    assert "{'" not in out["output"] and "': " not in out["output"], out["output"]

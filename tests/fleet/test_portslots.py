"""Port slots across the fleets of one machine: a slot another process holds is never given out,
and one a process lets go (or whose process ended) is free again."""

from __future__ import annotations

import subprocess
import sys

from genesis.fleet.portslots import SlotBook

HOLD = """
import sys, time
sys.path.insert(0, {root!r})
from genesis.fleet.portslots import SlotBook
book = SlotBook({folder!r})
assert book.claim(0) and book.claim(1)
print("held", flush=True)
time.sleep(60)
"""


def test_another_fleets_slots_are_skipped_and_free_again_once_its_monitor_is_gone(tmp_path):
    from pathlib import Path

    import genesis

    root = str(Path(genesis.__file__).resolve().parents[1])
    other = subprocess.Popen([sys.executable, "-c", HOLD.format(root=root, folder=str(tmp_path))],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline().strip() == "held"
        mine = SlotBook(tmp_path)
        assert mine.first_free(set()) == 2          # 0 and 1 are the other monitor's
        assert mine.first_free({2}) == 3            # 2 is this monitor's running child's
        assert not mine.claim(0)
        mine.release(2)
        assert mine.first_free({3}) == 2
    finally:
        other.kill()
        other.wait()
    assert SlotBook(tmp_path).claim(0)  # the kernel let its locks go with it

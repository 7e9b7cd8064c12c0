"""Port slots across every fleet of this user on the machine: two fleets started apart never give
their children the same ports.

A slot (resources.port_range) is claimed by holding a lock on `<shared state>/ports/slot-N.lock`
for as long as the child that has it runs; another monitor's claim is a lock it cannot take.
The kernel lets a lock go with its process, so a monitor that dies frees its slots (its
children keep their ports; the next monitor adopts them). One book per process: the monitors of a
fleet file share it, and their own children's slots are told apart by the monitor (Monitor._slot).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

__all__ = ["SlotBook", "book_for", "FOLDER"]

FOLDER = "ports"
MOST = 4096        # slots looked at, at most (far more children than a machine runs)


class SlotBook:
    """The slots this process holds, and a look at those other processes hold."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.held: dict[int, int] = {}   # slot -> the descriptor whose lock claims it

    def claim(self, slot: int) -> bool:
        """Hold the slot (True: ours now, or already); False when another process holds it. A
        folder that cannot be used claims nothing and refuses nothing: ports as before."""
        if slot in self.held:
            return True
        try:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(self.folder / f"slot-{slot}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC |
                         getattr(os, "O_NOFOLLOW", 0), 0o600)
        except OSError:
            return True
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        except OSError:
            os.close(fd)
            return True
        self.held[slot] = fd
        return True

    def release(self, slot: int | None) -> None:
        fd = self.held.pop(slot, None) if slot is not None else None
        if fd is not None:
            os.close(fd)

    def first_free(self, used: set[int]) -> int:
        """The lowest slot neither in `used` (this process's children) nor held by another
        process, claimed."""
        for slot in range(MOST):
            if slot not in used and self.claim(slot):
                return slot
        return next(n for n in range(len(used) + 1) if n not in used)


_BOOKS: dict[Path, SlotBook] = {}


def book_for(shared: Path) -> SlotBook:
    """This process's book of the slots under the shared state folder."""
    folder = Path(shared) / FOLDER
    if folder not in _BOOKS:
        _BOOKS[folder] = SlotBook(folder)
    return _BOOKS[folder]

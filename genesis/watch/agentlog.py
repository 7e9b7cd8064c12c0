"""An agent's log: its output, written by the watcher through an open descriptor, capped,
and put back if it is deleted mid-phase; and its tail, made safe for a terminal."""

from __future__ import annotations

import errno
import fcntl
import os
import select
import signal
import stat
import threading
import time
from pathlib import Path

from genesis.words import sanitize

__all__ = ["AgentLog", "OutputPump", "Transcriber", "MIN_LOG_BYTES", "MAX_LINE", "grow_pipe", "tail", "read_end"]

MIN_LOG_BYTES = 64 << 10   # the smallest log cap: room for a head, a tail and the line between
MARK_ROOM = 200  # bytes kept free for the line that says what was dropped
MAX_LINE = 1 << 20  # an output line longer than this is not read into the transcript (bounded memory)


class AgentLog:
    """The agent's output on its way to its log file, written by the watcher alone.

    At most `cap` bytes per phase: past the cap the first half is kept, then a line saying
    how many bytes were dropped there, then a rolling tail of the newest bytes (between a
    quarter and a half of the cap; it is compacted in halves, so each byte is copied at most
    twice). Written through an open descriptor: a log file or folder deleted mid-phase (`git
    clean -fdx`, `rm -rf orchestrator`) is recreated with everything written so far, read
    back from the descriptor of the deleted file. Thread-safe: the output thread writes while
    the watcher checks.
    """

    def __init__(self, path: Path, cap: int):
        self.path, self.cap = Path(path), cap
        self.lock = threading.Lock()
        self.received = 0              # bytes of agent output read: a sign of life
        self.dropped = 0               # bytes of it cut out past the cap
        self.lost = 0                  # bytes that could not be written (a full disk)
        self._error = ""               # the first write error, said once
        self._error_said = False
        self._heal_failed = False
        self.fd = self._open()
        self.base = self.size = os.fstat(self.fd).st_size  # what the file held before (kept as it was)
        self.head_end = self.base + cap // 2
        self.tail_start: int | None = None                  # set once something was dropped

    def _open(self) -> int:
        """The log, appended to; a symlink, FIFO or other non-file planted there is replaced."""
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
        try:
            fd = os.open(self.path, flags, 0o644)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
                raise
            return self._fresh(None)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            return self._fresh(None)
        os.set_blocking(fd, True)
        return fd

    def _fresh(self, old: int | None) -> int:
        """A new file at the path with the first `size` bytes of `old`, renamed into place."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.{time.monotonic_ns()}.tmp")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0), 0o644)
        try:
            offset = 0
            while old is not None and offset < self.size:
                chunk = os.pread(old, min(1 << 20, self.size - offset), offset)
                if not chunk:
                    break
                _pwrite_all(fd, chunk, offset)
                offset += len(chunk)
            os.replace(tmp, self.path)
        except BaseException:
            os.close(fd)
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        return fd

    def say(self, text: str) -> None:
        """A line of Genesis's own in the log."""
        self.write(f"=== genesis: {text}\n".encode("utf-8", "replace"), own=True)

    def write(self, data: bytes, own: bool = False) -> None:
        with self.lock:
            if not own:
                self.received += len(data)
            if self.size + len(data) <= self.base + self.cap:
                self._append(data)
                return
            if self.tail_start is None and self.size < self.head_end:
                head = data[:self.head_end - self.size]
                self._append(head)
                data = data[len(head):]
            self._compact(data)

    def _append(self, data: bytes) -> None:
        self.size += self._put(self.size, data)

    def _put(self, offset: int, data: bytes) -> int:
        try:
            return _pwrite_all(self.fd, data, offset)
        except OSError as exc:
            self.lost += len(data)
            self._error = self._error or (f"cannot write the agent's log {self.path} ({exc.strerror}); its output "
                                          f"is dropped meanwhile")
            return 0

    def _compact(self, data: bytes) -> None:
        """Past the cap: keep the head, the marker and the newest half of the tail's room."""
        region = self.tail_start if self.tail_start is not None else self.head_end
        room = self.base + self.cap - self.head_end - MARK_ROOM
        keep = room // 2
        total = self.size - region + len(data)
        if len(data) >= keep:
            kept = bytes(data[len(data) - keep:])
        else:
            want = keep - len(data)
            try:
                older = os.pread(self.fd, want, self.size - want)
            except OSError:
                older = b""
            kept = older + bytes(data)
        self.dropped += total - len(kept)
        marker = (f"\n=== genesis: {self.dropped} bytes of output dropped here (log cap "
                  f"{self.cap / (1 << 20):g} MiB) ===\n").encode()
        self.size = self.head_end
        self._append(marker)
        self.tail_start = self.size
        self._append(kept)
        try:
            os.ftruncate(self.fd, self.size)
        except OSError:
            pass

    def heal(self) -> str | None:
        """Put the log back if it was deleted or replaced; what to tell the user, if anything."""
        with self.lock:
            try:
                mine = os.fstat(self.fd)
                try:
                    there = os.lstat(self.path)
                    if (there.st_dev, there.st_ino) == (mine.st_dev, mine.st_ino):
                        return None
                except FileNotFoundError:
                    pass
                fd = self._fresh(self.fd)
            except OSError as exc:
                if self._heal_failed:
                    return None
                self._heal_failed = True
                return (f"the agent's log {self.path} was deleted or replaced and cannot be put back "
                        f"({exc.strerror or exc}); retrying at each check")
            os.close(self.fd)
            self.fd, self._heal_failed = fd, False
            return (f"the agent's log {self.path} was deleted or replaced mid-phase; put back with the "
                    f"{self.size - self.base} bytes written so far")

    def problems(self) -> list[str]:
        """What went wrong since the last call: the log put back, a write error (once)."""
        found = [msg for msg in (self.heal(),) if msg]
        with self.lock:
            if self._error and not self._error_said:
                found.append(self._error)
                self._error_said = True
        return found

    def close(self) -> list[str]:
        found = self.problems()
        with self.lock:
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1
        return found


def _pwrite_all(fd: int, data: bytes, offset: int) -> int:
    view = memoryview(data)
    done = 0
    while done < len(view):
        done += os.pwrite(fd, view[done:], offset + done)
    return done


def grow_pipe(fd: int) -> None:
    """Linux: a 1 MiB pipe (the unprivileged maximum) takes bursts with fewer wake-ups."""
    try:
        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ"), 1 << 20)
    except (ImportError, AttributeError, OSError):
        pass


class Transcriber:
    """Where the agent's output goes: split into lines for its reader, which renders a
    readable transcript and learns how the run ends.

    With a raw log (structured output), the raw bytes go there and the reader's lines to the
    transcript; without one the output is its own transcript, byte for byte, and the reader
    only reads along. Memory is bounded: a line longer than MAX_LINE is skipped (noted in the
    transcript). A reader that fails is noted once and then left out; the output still flows.
    """

    def __init__(self, transcript: AgentLog, raw: AgentLog | None, reader) -> None:
        self.transcript, self.raw, self.reader = transcript, raw, reader
        self.received = 0              # bytes of agent output: a sign of life
        self._buf = bytearray()
        self._skipped = 0              # bytes of an over-long line being skipped (0: none)

    @property
    def cap(self) -> int:
        return (self.raw or self.transcript).cap

    @property
    def logs(self) -> tuple[AgentLog, ...]:
        return (self.transcript,) if self.raw is None else (self.transcript, self.raw)

    def write(self, data: bytes) -> None:
        self.received += len(data)
        (self.raw or self.transcript).write(data)
        if self.reader is None:
            return
        start = 0
        while True:
            end = data.find(b"\n", start)
            if end < 0:
                self._keep(data[start:])
                return
            self._keep(data[start:end])
            self._line()
            start = end + 1

    def _keep(self, part: bytes) -> None:
        if self._skipped:
            self._skipped += len(part)
        elif len(self._buf) + len(part) > MAX_LINE:
            self._skipped = len(self._buf) + len(part)
            self._buf.clear()
        else:
            self._buf += part

    def _line(self) -> None:
        if self._skipped:
            self._emit([f"(an output line of {self._skipped} bytes was not read)"])
            self._skipped = 0
            return
        text = self._buf.decode("utf-8", "replace")
        self._buf.clear()
        try:
            lines = self.reader.feed(text)
        except Exception as exc:  # a reader's bug must not stop the output flowing to the logs
            self._emit([f"=== genesis: the agent's output could not be read further ({exc!r})"])
            self.reader = None
            return
        if self.raw is not None:
            self._emit(lines)

    def _emit(self, lines: list[str]) -> None:
        if lines:
            self.transcript.write(("\n".join(lines) + "\n").encode("utf-8", "replace"), own=True)

    def flush(self) -> None:
        """The last line, if the output did not end with a newline."""
        if self.reader is not None and (self._buf or self._skipped):
            self._line()


class OutputPump:
    """Reads the agent's stdout and stderr from a pipe into its log, in a thread of its own:
    the agent never blocks on a full pipe while the watcher sleeps, checks or kills."""

    CHUNK = 1 << 20

    def __init__(self, fd: int, log: "AgentLog | Transcriber", blocked: set[int]):
        self.fd, self.log = fd, log
        self._wake_r, self._wake_w = os.pipe()
        self._stop = threading.Event()
        os.set_blocking(fd, False)
        self.thread = threading.Thread(target=self._run, name="genesis-agent-output", daemon=True)
        # The thread starts with the signals blocked, so they always reach the main thread:
        # its wait is what a signal must interrupt (or, on Linux, what takes them).
        old = signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
        try:
            self.thread.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)

    def _run(self) -> None:
        poller = select.poll()
        poller.register(self.fd, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        while not self._stop.is_set():
            ready = dict(poller.poll())
            if self.fd in ready and not self._drain():
                return  # the end of the output: every writer is gone
        self._drain(most=2 * self.log.cap)  # what is left in the pipe, without waiting for more

    def _drain(self, most: int | None = None) -> bool:
        """Read what is there now; False at the end of the output."""
        got = 0
        while most is not None or not self._stop.is_set():
            if most is not None and got >= most:
                return True
            try:
                data = os.read(self.fd, self.CHUNK)
            except BlockingIOError:
                return True
            except OSError:
                return False
            if not data:
                return False
            got += len(data)
            self.log.write(data)
        return True

    def finish(self, wait: float) -> None:
        """Read to the end of the output for at most `wait` seconds, then stop (bounded)."""
        if self.fd < 0:
            return
        self.thread.join(wait)
        if self.thread.is_alive():
            self._stop.set()
            os.write(self._wake_w, b"x")
            self.thread.join(5.0)
        if self.thread.is_alive():
            return  # stuck writing (a hung filesystem): leave its descriptors to it
        for fd in (self.fd, self._wake_r, self._wake_w):
            os.close(fd)
        self.fd = -1


# --- the agent's output -----------------------------------------------------------------

def tail(path: Path, lines: int = 12, max_bytes: int = 16384, width: int = 300) -> list[str]:
    """The last lines of a log, sanitised for the console when an agent is killed."""
    data, cut = read_end(Path(path), max_bytes)
    text = data.decode("utf-8", errors="replace").split("\n")
    if cut:
        text = text[1:]  # begins mid-line, maybe mid-character or mid-sequence
    if text and text[-1] == "":
        text.pop()
    return [sanitize(line, width) for line in text[-lines:]]


def read_end(path: Path, most: int) -> tuple[bytes, bool]:
    """The last `most` bytes of the file and whether it holds more; never through a symlink or
    into a FIFO planted at the path (an agent's log lives where the agent can write)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:  # gone, a symlink, a FIFO without a writer, unreadable: no evidence, never an error
        return b"", False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return b"", False
        start = max(0, st.st_size - most)
        chunks, offset = [], start
        while offset < st.st_size:
            chunk = os.pread(fd, st.st_size - offset, offset)
            if not chunk:
                break
            chunks.append(chunk)
            offset += len(chunk)
        return b"".join(chunks), start > 0
    except OSError:
        return b"", False
    finally:
        os.close(fd)

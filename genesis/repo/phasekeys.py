"""A key on each phase's commit: `Genesis-Phase: <key>/<iteration>-<phase>`, a git trailer.

The fleet on Temporal runs each attempt of a task with GENESIS_COMMIT_KEY set to its own
`<task workflow id>#<attempt>`, the same for each of Temporal's tries of that attempt. A
try's loop starts at iteration 1 and, before each phase, reads the keys on its branch
(`keys_on`, see loop/keyedtries.py): a phase whose key is there, on another loop's commit,
was committed by an earlier try, and is skipped. So no phase is committed by two tries, and a
retry, which starts from the branch as pushed, loses nothing that was pushed. A phase
committed only in a clone that died before pushing it, or that left nothing of Genesis's to
commit, carries no key on the branch and runs again. One loop's own rerun of a phase (after a
stall or a wait) commits under the same key again: a key names a phase of an iteration.
Without a key the commits are as they always were.

The key is checked (`check_key`) when the settings are read, so a bad one is refused at the
loop's start; reading the keys back is bounded in the commits it reads and in time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from genesis.repo.gitcmd import GitFailed, run_git

__all__ = ["TRAILER", "MAX_KEY", "MAX_COMMITS", "PhaseKey", "check_key", "trailer_value", "parse", "keys_on"]

TRAILER = "Genesis-Phase"
MAX_KEY = 200          # characters; a workflow id and an attempt number fit many times over
MAX_COMMITS = 500      # commits read back by keys_on unless told otherwise
GIT_TIMEOUT = 30
_KEY_RE = re.compile(r"[\x21-\x7e]+")  # printable ASCII, no spaces: one token in a trailer line
_VALUE_RE = re.compile(r"(?P<key>[\x21-\x7e]+)/(?P<iteration>[0-9]{1,9})-(?P<phase>[A-Za-z][A-Za-z0-9_]*)")


@dataclass(frozen=True)
class PhaseKey:
    key: str           # GENESIS_COMMIT_KEY as the loop had it
    iteration: int
    phase: str
    sha: str = ""      # the commit that carries it

    @property
    def value(self) -> str:
        return trailer_value(self.key, self.iteration, self.phase)


def check_key(key: str) -> str:
    """Why this commit key cannot be used ("" when it can): printable ASCII without spaces,
    at most MAX_KEY characters."""
    if len(key) > MAX_KEY:
        return f"is {len(key)} characters long; at most {MAX_KEY}"
    if key and not _KEY_RE.fullmatch(key):
        return "holds a space or a character that is not printable ASCII (it is one word of a commit's trailer)"
    return ""


def trailer_value(key: str, iteration: int, phase: str) -> str:
    """The trailer's value for one phase of one iteration."""
    return f"{key}/{iteration}-{phase}"


def parse(value: str, sha: str = "") -> PhaseKey | None:
    """A trailer's value read back (None: not one Genesis wrote)."""
    found = _VALUE_RE.fullmatch(value.strip())
    if found is None or len(found.group("key")) > MAX_KEY:
        return None
    return PhaseKey(found.group("key"), int(found.group("iteration")), found.group("phase"), sha)


def keys_on(project: Path, ref: str, limit: int = MAX_COMMITS, prefix: str = "",
            timeout: float = GIT_TIMEOUT) -> tuple[PhaseKey, ...]:
    """The phase keys on the newest `limit` commits reachable from `ref`, newest first; only
    those whose key starts with `prefix` when given (a task's workflow id, say). A ref that
    does not exist has none. GitFailed when git cannot read the repository."""
    if limit <= 0:
        return ()
    known = run_git(project, ["rev-parse", "--verify", "-q", f"{ref}^{{commit}}"], timeout=timeout)
    if known.returncode != 0:
        return ()
    fmt = f"%H%x00%(trailers:key={TRAILER},valueonly,separator=%x01)%x00"
    done = run_git(project, ["log", f"--max-count={limit}", f"--format={fmt}", known.text.strip(), "--"],
                   timeout=timeout)
    if done.returncode != 0:
        raise GitFailed(f"git log {ref} failed: {(done.stderr or done.text)[-300:]}")
    fields = done.stdout.split(b"\0")
    found: list[PhaseKey] = []
    for sha, values in zip(fields[0::2], fields[1::2]):
        commit = sha.strip().decode("ascii", "replace")
        for value in values.decode("utf-8", "replace").split("\x01"):
            key = parse(value, commit)
            if key is not None and key.key.startswith(prefix):
                found.append(key)
    return tuple(found)

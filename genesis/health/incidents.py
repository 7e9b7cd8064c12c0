"""The incidents folder (`<git dir>/genesis/incidents/`): each abnormal end kept as `<id>.json` beside its
readable `<id>.txt`, only the newest MAX_INCIDENTS of them, for `genesis incidents` to list and show."""

from __future__ import annotations

import errno
import math
import os
import re
import stat
from pathlib import Path

from genesis.health.capture import Incident
from genesis.health.incident_text import render, safe_line
from genesis.redact import redact, redact_all
from genesis.store.atomicio import CorruptFile, read_bytes, read_json, write_json, write_text
from genesis.store.layout import UnsafeDir, private_dir

__all__ = ["UnknownIncident", "write", "list_incidents", "read_incident", "MAX_INCIDENTS", "ID_RE"]

MAX_INCIDENTS = 200        # kept in the folder; the oldest go first
MAX_FILE = 1 << 20         # an incident file larger than this is not read
ID_RE = re.compile(r"^\d{8}T\d{6}Z-[A-Za-z0-9_-]{1,40}-i\d{1,9}(?:-\d{1,4})?$")


class UnknownIncident(LookupError):
    """No incident has this id (or it is not an id at all)."""


def write(incident: Incident, directory: Path, keep: int = MAX_INCIDENTS) -> Path:
    """Record the incident as `<id>.json` and `<id>.txt` in directory (private, 0700; a
    symlink or someone else's folder there is refused with UnsafeDir); return the JSON's
    path. The id is claimed with O_EXCL, so two incidents in one second never collide.
    Only the newest `keep` incidents are kept."""
    directory = private_dir(Path(directory))
    incident = redact_all(incident)  # its transcript and tool calls are the agent's words
    ident = _claim(directory, incident.base_id)
    write_text(directory / f"{ident}.txt", render(incident, ident), mode=0o600)
    target = directory / f"{ident}.json"
    write_json(target, {"id": ident, **incident.to_json()})
    _prune(directory, max(1, keep))
    return target


def _claim(directory: Path, base: str) -> str:
    for n in range(1, 10000):
        ident = base if n == 1 else f"{base}-{n}"
        if os.path.lexists(directory / f"{ident}.json"):
            continue
        try:
            fd = os.open(directory / f"{ident}.txt", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except FileExistsError:
            continue
        os.close(fd)
        return ident
    raise FileExistsError(errno.EEXIST, f"no free incident id for {base} in {directory}")


def _stems(directory: Path) -> list[str]:
    stems = set()
    for name in os.listdir(directory):
        stem, dot, suffix = name.rpartition(".")
        if dot and suffix in ("json", "txt") and ID_RE.match(stem):
            stems.add(stem)
    # The id starts with its UTC time, so names sort oldest first; -2 after its base.
    return sorted(stems, key=_order)


def _order(ident: str) -> tuple[str, int]:
    base, _, n = ident.rpartition("-")
    return (base, int(n)) if n.isdigit() else (ident, 1)


def _prune(directory: Path, keep: int) -> None:
    stems = _stems(directory)
    for stem in stems[:max(0, len(stems) - keep)]:
        for suffix in (".json", ".txt"):
            try:
                os.unlink(directory / f"{stem}{suffix}")
            except FileNotFoundError:
                pass


def _checked(directory: Path) -> bool:
    """Whether the folder exists; UnsafeDir when something else than a plain folder is there."""
    try:
        st = os.lstat(directory)
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise UnsafeDir(f"{directory} is not a plain directory (a symlink?); remove it")
    return True


def list_incidents(directory: Path) -> list[dict]:
    """One summary per incident (id, at, phase, iteration, kind, reason), the newest last."""
    directory = Path(directory)
    if not _checked(directory):
        return []
    rows = []
    for stem in _stems(directory):
        try:
            data = read_json(directory / f"{stem}.json", MAX_FILE)
        except (CorruptFile, OSError) as exc:
            data = {"reason": f"(unreadable: {exc})"}
        if data is None:
            continue  # being written, or its JSON was lost: the text may still be shown
        if not isinstance(data, dict):
            data = {"reason": "(unreadable: not a JSON object)"}
        at = data.get("at")
        rows.append({"id": stem, "at": at if isinstance(at, (int, float)) and math.isfinite(at) else None,
                     "phase": str(data.get("phase", "?")), "iteration": data.get("iteration"),
                     "kind": str(data.get("kind", "?")), "reason": safe_line(data.get("reason", ""), 300)})
    rows.sort(key=lambda r: (r["at"] if r["at"] is not None else -math.inf, _order(r["id"])))
    return rows


def read_incident(directory: Path, ident: str) -> str:
    """The readable text of one incident; UnknownIncident for an unknown or malformed id."""
    if not ID_RE.match(ident or ""):
        raise UnknownIncident(f"{ident!r} is not an incident id")
    directory = Path(directory)
    if not _checked(directory):
        raise UnknownIncident(f"no incident {ident}: none has been recorded")
    try:
        data = read_bytes(directory / f"{ident}.txt", MAX_FILE)
    except FileNotFoundError:
        raise UnknownIncident(f"no incident {ident}") from None
    return redact(data.decode("utf-8", "replace"))

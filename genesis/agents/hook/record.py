"""What install added to each settings file (env keys, top-level keys it created), so that uninstall takes
away only that and leaves what the user had."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from genesis.store.atomicio import CorruptFile, read_json, write_json
from genesis.store.layout import private_dir

__all__ = ["Installed", "install_record", "remember", "forget"]


@dataclass(frozen=True)
class Installed:
    """What install added to one file: env keys, and the top-level keys it created (None: no record says)."""
    env: tuple[str, ...] = ()
    created: tuple[str, ...] | None = None


def _ledger(state_dir: Path) -> Path:
    return state_dir / "hook-installs.json"


def _read_ledger(state_dir: Path) -> dict:
    try:
        data = read_json(_ledger(state_dir))
    except CorruptFile:
        return {}
    return data if isinstance(data, dict) else {}


def install_record(state_dir: Path, path: Path) -> Installed:
    """What install added to this file, as the ledger says (a bad record is none)."""
    record = _read_ledger(state_dir).get(str(path.resolve()))
    if not isinstance(record, dict):
        return Installed()
    return Installed(_strings(record, "env") or (), _strings(record, "created"))


def _strings(record: dict, key: str) -> tuple[str, ...] | None:
    value = record.get(key)
    return tuple(x for x in value if isinstance(x, str)) if isinstance(value, list) else None


def remember(state_dir: Path, path: Path, env: list[str], created: list[str]) -> None:
    """Add to the record of what install added to this file."""
    ledger = _read_ledger(state_dir)
    known = install_record(state_dir, path)
    ledger[str(path.resolve())] = {"env": sorted(set(known.env) | set(env)),
                                   "created": sorted(set(known.created or ()) | set(created))}
    write_json(_ledger(private_dir(state_dir)), ledger)


def forget(state_dir: Path, path: Path) -> None:
    """Drop the record of this file (uninstall took away what install added)."""
    ledger = _read_ledger(state_dir)
    if str(path.resolve()) in ledger:
        del ledger[str(path.resolve())]
        write_json(_ledger(private_dir(state_dir)), ledger)

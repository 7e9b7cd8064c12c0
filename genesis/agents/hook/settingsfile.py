"""Reading and editing a CLI's JSON settings file the careful way every hook installer shares: a file that
is not valid JSON, or not of the shape we merge into, is refused and left untouched, with what to do."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from genesis.agents.hook.jsonedit import new_text
from genesis.agents.hook.replace import UNTOUCHED, SettingsError, keep_backup, read_text, replace_file, target_of

# SettingsError is named here too: it is what read_settings, open_for_edit and save raise.
__all__ = ["SettingsError", "Change", "read_settings", "open_for_edit", "save"]


@dataclass(frozen=True)
class Change:
    path: Path
    added_events: tuple[str, ...]            # (uninstall: removed)
    added_env: tuple[str, ...]
    backup: Path | None
    target: Path | None = None  # the file really written, when path is a symlink to it


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _parse(path: Path, text: str) -> dict:
    if not text.strip():
        raise SettingsError(f"{path} is empty; write {{}} into it or delete it ({UNTOUCHED})")
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise SettingsError(f"{path} is not valid JSON ({exc}); fix it by hand ({UNTOUCHED})") from None
    if not isinstance(data, dict):
        raise SettingsError(f"{path} is not a JSON object; fix it by hand ({UNTOUCHED})")
    return data


def read_settings(path: Path) -> dict | None:
    """The parsed settings file (through a symlink), None when absent; SettingsError when unusable."""
    got = read_text(path)
    return None if got is None else _parse(path, got[0])


def _check_shape(path: Path, data: dict, objects: tuple[str, ...]) -> None:
    """The parts we edit must have the shape we can merge into."""
    for key in objects:
        if key in data and not isinstance(data[key], dict):
            raise SettingsError(f"{path}: \"{key}\" is not an object; fix it by hand ({UNTOUCHED})")
    for event, groups in data.get("hooks", {}).items():
        if not isinstance(groups, list) or not all(isinstance(g, dict) for g in groups):
            raise SettingsError(f"{path}: hooks.{event} is not a list of objects; fix it by hand ({UNTOUCHED})")


def open_for_edit(path: Path, objects: tuple[str, ...] = ("hooks", "env"),
                  hint: str = "replace the link with a file") -> tuple[Path, str | None, os.stat_result | None, dict]:
    """(the file to write, its text, its status, its data); text and status None when absent.
    `objects` are the top-level keys that must be JSON objects when present; `hint` says what
    to do about a symlink Genesis will not edit through."""
    target = target_of(path, hint)
    got = read_text(target, follow=False)
    if got is None:
        return target, None, None, {}
    data = _parse(path, got[0])
    _check_shape(path, data, objects)
    return target, got[0], got[1], data


def save(path: Path, target: Path, old_text: str | None, st: os.stat_result | None, data: dict, new: dict,
         now: float) -> Path | None:
    """Write `new` over `data` (as read by open_for_edit); the backup of the old text, if any."""
    text = new_text(old_text, data, new)
    target.parent.mkdir(parents=True, exist_ok=True)
    backup = None if old_text is None or st is None else keep_backup(path, old_text.encode("utf-8"), st, now)
    replace_file(target, text, st)
    return backup

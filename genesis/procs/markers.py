"""The markers every process of a loop's agents carries in its environment: its proof of ownership."""

from __future__ import annotations

from pathlib import Path

__all__ = ["markers_for"]


def markers_for(project: Path, run_id: str | None = None) -> dict[str, str]:
    """The environment markers every agent of a loop over this project carries."""
    found = {"GENESIS_PROJECT_DIR": str(Path(project).resolve())}
    if run_id:
        found["GENESIS_RUN_ID"] = run_id
    return found

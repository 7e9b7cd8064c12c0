"""The action links an alert carries: the actions that apply to what it is about (a fleet's task,
by its state now; the running loop or fleet), each signed for exactly that loop and task, at the
dashboard's address as the phone reaches it (GENESIS_NOTIFY_ACTIONS_URL). None for the loop's
end, a resolution, or when no address is set; a key that cannot be read costs the links, never
the alert."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Mapping

from genesis.actions.control import control_dir, signing_key
from genesis.actions.links import sign
from genesis.actions.offered import LABELS, for_fleet, for_loop, for_task
from genesis.alerts.tickets import Ticket
from genesis.config import default_layout
from genesis.fleet.ledger import FleetLedger
from genesis.store.atomicio import CorruptFile, read_json
from genesis.store.layout import UnsafeDir
from genesis.store.looplock import FLEET_RUN, current_holder

__all__ = ["links_for", "ntfy_actions", "MOST"]

MOST = 3          # ntfy shows at most three action buttons


def _offered(project: Path, task: str) -> list[dict[str, Any]]:
    layout = default_layout(project)
    if task:
        with FleetLedger.open(layout.state_dir / "fleet" / "ledger.sqlite3", readonly=True) as ledger:
            row = ledger.task(task)
        return for_task(row.state, None) if row is not None else []
    holder = current_holder(layout.loop_lock, layout.loop_record)
    if holder is None:
        return []
    if holder.run_id.startswith(FLEET_RUN):
        return [a for a in for_fleet(True) if a["action"] != "resume"]
    try:
        wait = read_json(layout.wait_file)
    except (CorruptFile, OSError):
        wait = None
    waiting = isinstance(wait, dict) and wait.get("run_id") == holder.run_id
    return for_loop("waiting" if waiting else "running", wait.get("kind") if waiting else None)


def links_for(ticket: Ticket, base_url: str | None, env: Mapping[str, str] | None = None,
              now: float | None = None) -> list[dict[str, str]]:
    """[{action, label, url}], at most MOST; those that ask something first (a note) are left to the dashboard."""
    if not base_url or ticket.final or ticket.resolves:
        return []
    now = time.time() if now is None else now
    try:
        offered = [a for a in _offered(Path(ticket.project), ticket.task) if not a["ask"]]
        key = signing_key(control_dir(env)) if offered else b""
    except (UnsafeDir, OSError, RuntimeError, ValueError):
        return []
    base = base_url.rstrip("/")
    return [{"action": a["action"], "label": LABELS[a["action"]],
             "url": f"{base}/act/{sign(key, a['action'], ticket.project, ticket.run_id, ticket.task, now)}"}
            for a in offered[:MOST]]


def ntfy_actions(links: list[dict[str, str]]) -> str:
    """ntfy's `Actions` header (its simple format): one `http` button each, a POST to the link."""
    return "; ".join(f"http, {link['label']}, {link['url']}, method=POST, clear=true" for link in links)

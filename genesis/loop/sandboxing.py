"""The box each phase's agent runs in, chosen from GENESIS_SANDBOX and what this machine can
run; said once at the run's start (preflight) with what it protects, and recorded."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

import genesis
from genesis import exitcodes
from genesis.agents import Adapter, adapter_of
from genesis.config import CONFIG_FILE
from genesis.loop.step import Step, StepFailed
from genesis.sandbox.box import ALLOW_NET, Box, Unavailable, choose
from genesis.sandbox.detect import probe
from genesis.sandbox.nethosts import default_allowlist
from genesis.sandbox.places import places_for
from genesis.store.accounts import AccountStore, StoreUnusable, root_of

__all__ = ["box_for", "announce", "compare_with_start"]


def box_for(step: Step, argv: tuple[str, ...], env: Mapping[str, str], adapter: Adapter | None = None) -> Box:
    """The box of one agent launch; StepFailed(SANDBOX_UNAVAILABLE) for a named box that cannot run.
    `adapter`: the CLI argv runs (the loop's own by default), whose folders its private HOME keeps."""
    cfg, lay = step.cfg, step.layout
    adapter = adapter or adapter_of(cfg)
    places = places_for(cfg.project, lay.state_dir, lay.heartbeat_dir, lay.log_dir, cfg.project / CONFIG_FILE,
                        Path(genesis.__file__).resolve().parent, argv, env, shared=_account_store(step),
                        agent_paths=adapter.box_paths(env), allow=cfg.box_allow)
    allowed = (default_allowlist(adapter.name, adapter.network_hosts(env), cfg.project, cfg.network_allow)
               if cfg.network == ALLOW_NET else None)
    try:
        return choose(cfg.sandbox, probe(), places, cfg.network, allowed)
    except Unavailable as exc:
        raise StepFailed(exitcodes.SANDBOX_UNAVAILABLE, str(exc)) from None


def _account_store(step: Step) -> Path | None:
    """The machine-wide account store's folder, made now so that the box can keep it read-only
    (HOME is writable in the box); None when it is not ours (then it is not used:
    store/accounts.py). Only `accounts/`: the folder around it holds records the agent's own
    `genesis` commands keep (the hook's install record), as they did before."""
    try:
        return AccountStore(root_of(step.cfg.shared_state_dir, os.environ)).ensure()
    except StoreUnusable:
        return None


def announce(step: Step, box: Box) -> None:
    """At the run's start: the box named with what it protects, on the console and in the ledger."""
    step.say(box.line(), "info" if box.kind not in ("none", "off") and not box.weak else "warn")
    step.event("sandbox", **box.record())


def compare_with_start(step: Step, box: Box) -> None:
    """Say it when a phase's box is not the one the run started with (`auto` found the better
    box broken mid-night and took the next one down): never a silent downgrade."""
    started = [e for e in step.events(("sandbox",)) if e.get("box")]
    if started and started[0]["box"] != box.kind:
        step.say(f"this phase's agent runs in a different box than at the start ({started[0]['box']} then): "
                 f"{box.line()}", "warn")
        step.event("sandbox_changed", was=started[0]["box"], **box.record())

"""The reap step: this loop's leftovers ended, ports held by anything else only reported.

The ports watched are REAP_PORTS and, in a fleet's child, its own range (GENESIS_PORT_BASE,
GENESIS_PORT_COUNT): a listener there is reaped only when proven this loop's (its markers),
and reported, never touched, when not."""

from __future__ import annotations

import os

from genesis.loop.step import Step
from genesis.procs.reaper import ReapPlan, execute, plan_reap, port_range

__all__ = ["reap"]


def reap(step: Step, when: str, dry_run: bool = False) -> ReapPlan:
    """Kill this loop's leftovers; report ports held by anything else."""
    cfg = step.cfg
    ports = tuple(dict.fromkeys(cfg.reap_ports + port_range(os.environ)))  # a fleet's child: its range too
    found = plan_reap(cfg.project, step.run_id, cfg.reap_scope, cfg.reap_patterns, ports)
    for port in found.foreign_ports:
        owner = f"pid {port.pid} ({port.cmdline[:80]})" if port.pid else port.cmdline
        step.say(f"port {port.port} is held by {owner}, which is not this loop's: left alone", "warn")
    if dry_run:
        return found
    if found.foreign_ports:
        step.event("foreign_port", when=when, ports=[{"port": p.port, "pid": p.pid, "cmdline": p.cmdline[:200]}
                                                     for p in found.foreign_ports])
    if found.leftovers:
        report = execute(found, cfg.kill_grace)
        listing = "; ".join(f"pid {lo.ident.pid} {lo.cmdline[:60]!r} ({lo.why})" for lo in found.leftovers[:8])
        more = f" and {len(found.leftovers) - 8} more" if len(found.leftovers) > 8 else ""
        step.say(f"reaped {len(found.leftovers)} leftover process(es) {when}: {listing}{more}", "warn")
        if report.survivors:
            step.say(f"could not end pids {', '.join(map(str, report.survivors))}", "error")
        step.event("reap", when=when, pids=[lo.ident.pid for lo in found.leftovers],
                   why=[lo.why for lo in found.leftovers], survivors=list(report.survivors))
    return found

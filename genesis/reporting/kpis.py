"""The health KPIs, computed from one run's ledger rows.

- MTTD, mean time to detect: from the stuck agent's last sign of life (its last heartbeat)
  to the watcher calling it stuck (the incident).
- MTTR, mean time to recover: from that incident to the end of the run's next phase that
  finished.
- False-positive rate: stall warnings (the health judgment called a phase stuck or
  wedged) after which the phase became healthy again by itself, over all such warnings.
- Retries per phase: retries of stuck phases over phases run.
- Escalation rate: tickets that reached the operator (a channel took them, or they were
  folded into the loop end's message and a channel took that) over tickets raised (the
  loop's end, always told, and the follow-ups saying a stall resolved are not counted). A
  ticket triage passed on that no channel took reached nobody; with no channel set there is
  no rate, only how many would have been told.
"""

from __future__ import annotations

from typing import Any, Sequence

from genesis.reporting.model import AlertRow, IncidentRow, Kpis, PhaseRow

__all__ = ["compute"]

# The states the watcher ends a phase in (incidents), and the health judgment warns of.
STUCK = ("stuck", "wedged")


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def compute(phases: Sequence[PhaseRow], incidents: Sequence[IncidentRow], silent_for: dict[str, float],
            health: Sequence[dict[str, Any]], retries: int, alerts: Sequence[AlertRow]) -> Kpis:
    """phases and incidents of the run; silent_for: incident id -> seconds since its agent's last
    heartbeat when it was called; health: the run's `health` and `phase_start`
    events in order; alerts: the run's tickets as their deliverers recorded them."""
    detections = [i for i in incidents if i.kind in STUCK]
    mttd = _mean([silent_for[i.id] for i in detections if i.id in silent_for])
    recovered = []
    for inc in detections:
        later = [p.ended for p in phases if p.ending == "finished" and p.ended is not None and p.ended > inc.at]
        if later:
            recovered.append(min(later) - inc.at)
    warnings = false = 0
    state: dict[tuple[Any, Any], bool] = {}  # (iteration, phase) -> a warning is open
    for e in health:
        key = (e.get("iteration"), e.get("phase"))
        cls = e.get("classification")
        if e.get("event") == "phase_start":  # a new run of the phase (a retry): no warning is open
            state[key] = False
        elif cls in STUCK and not state.get(key):
            warnings += 1
            state[key] = True
        elif cls == "healthy" and state.get(key):
            false += 1
            state[key] = False
    raised = [a for a in alerts if not a.final and a.kind != "resolved"]
    end_told = any(a.final and a.delivered for a in alerts)
    reached = sum(1 for a in raised if a.delivered or (a.folded and end_told))
    # No channel set: tickets to tell (the loop's end included) and not one of the run's tickets
    # that a channel took, tried or passed over for its minimum severity.
    meant = [a for a in alerts if a.verdict == "intervene" or a.folded]
    no_channel = bool(meant) and not any(a.delivered or a.failed or a.skipped for a in alerts)
    return Kpis(
        mttd_seconds=mttd, mttr_seconds=_mean(recovered),
        false_positive_rate=(false / warnings) if warnings else None,
        retries_per_phase=(retries / len(phases)) if phases else None,
        escalation_rate=(reached / len(raised)) if raised and not no_channel else None,
        detections=len(detections), recoveries=len(recovered), warnings=warnings, tickets=len(raised),
        reached=reached, intervened=sum(1 for a in raised if a.verdict == "intervene" or a.folded),
        no_channel=no_channel)

"""Which of the loop's events raise an alert ticket: a phase ended as done raises none."""

from __future__ import annotations

from genesis.loop import raising

RUN = "run-r"


def test_an_incident_of_a_phase_ended_as_done_raises_no_ticket_and_one_over_time_does(step, monkeypatch):
    drafted = []
    monkeypatch.setattr(raising, "ticket_for", lambda event, project: drafted.append(event["kind"]))
    for kind in ("done", "overtime"):
        raising.raise_ticket(step, "incident", {"iteration": 1, "phase": "Builder", "id": f"i-{kind}", "kind": kind,
                                                "reason": "x", "window": "result_exit"})
    assert drafted == ["overtime"]

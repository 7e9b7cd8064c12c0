"""The workflow code replays every history the scenario tests recorded (tests/temporal/histories/,
recorded by tests/temporal/record_histories.sh): a change that would wedge the fleets running
across an upgrade (a command added, removed or moved without `workflow.patched()`) fails here.
Before the first release the histories are recorded again after such a change; from it on,
they are kept and the change follows the patch cycle (docs/maintainers/temporal.md)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

pytest.importorskip("temporalio", reason="temporalio is not installed: pip install -e '.[test]'")

from temporalio.client import WorkflowHistory  # noqa: E402
from temporalio.worker import Replayer  # noqa: E402

from genesis.temporal.workflows import WORKFLOWS  # noqa: E402

HISTORIES = sorted(Path(__file__).with_name("histories").glob("*.json"))


def test_there_are_histories_of_every_kind_of_workflow():
    kinds = {json.loads(path.read_text())["events"][0]["workflowExecutionStartedEventAttributes"]["workflowType"]
             ["name"] for path in HISTORIES}
    assert {"FleetWorkflow", "TaskWorkflow"} <= kinds, kinds


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
def test_a_recorded_history_replays(path):
    history = WorkflowHistory.from_json(path.stem, path.read_text())
    result = asyncio.run(Replayer(workflows=WORKFLOWS).replay_workflow(history, raise_on_replay_failure=False))
    assert result.replay_failure is None, f"{path.name}: {result.replay_failure}"

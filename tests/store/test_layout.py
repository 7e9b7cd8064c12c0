"""Where Genesis keeps its files: each attempt of a phase has logs of its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from genesis.store.layout import Layout


@pytest.mark.fault(86)
def test_each_attempt_of_a_phase_has_its_own_transcript_and_raw_stream(tmp_path):
    lay = Layout(tmp_path, tmp_path / "orchestrator" / "logs", tmp_path / "stop", tmp_path / ".git" / "genesis")
    run = lay.run_dir("20261121T041200Z-812")
    assert lay.agent_log("20261121T041200Z-812", 1, "Builder") == run / "iter-0001-Builder.log"
    assert lay.agent_log("20261121T041200Z-812", 1, "Builder", ".jsonl") == run / "iter-0001-Builder.jsonl"
    assert lay.agent_log("20261121T041200Z-812", 1, "Builder", attempt=2) == run / "iter-0001-Builder.attempt-2.log"
    assert lay.agent_log("20261121T041200Z-812", 12, "Criticizer", ".jsonl", attempt=3) == (
        run / "iter-0012-Criticizer.attempt-3.jsonl")
    names = [lay.agent_log("r", 1, "Builder", attempt=n).name for n in (1, 2, 3)]
    assert len(set(names)) == 3 and all(Path(n).suffix == ".log" for n in names)

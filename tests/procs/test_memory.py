"""The agent first in line for the OOM killer; its memory cap."""

from __future__ import annotations

import subprocess

import pytest

from genesis.procs.memory import cap, parse_size, raise_oom_score


def test_a_child_raises_only_its_own_score():
    done = subprocess.run(["cat", "/proc/self/oom_score_adj"], capture_output=True, text=True,
                          preexec_fn=raise_oom_score, timeout=10)
    assert done.stdout.strip() == "1000"
    assert open("/proc/self/oom_score_adj").read().strip() != "1000"


@pytest.mark.parametrize("text, size", [("", None), ("8G", 8 << 30), ("512M", 512 << 20), ("1GiB", 1 << 30),
                                        (str(1 << 30), 1 << 30)])
def test_sizes(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["lots", "1M", "-5G", "8 GB of it"])
def test_bad_sizes_are_refused(text):
    with pytest.raises(ValueError):
        parse_size(text)


def test_the_cap_is_written_to_memory_max_or_says_why_not(tmp_path):
    assert cap(tmp_path, 1 << 30) == ""
    assert (tmp_path / "memory.max").read_text() == str(1 << 30)
    assert "cannot cap the agent's memory" in cap(tmp_path / "gone", 1 << 30)

"""A machine a night could run on: git that knows who commits, and fake CLIs on PATH."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import pytest


@pytest.fixture
def bin_dir(tmp_path, hermetic, monkeypatch) -> Path:
    """HOME with a git identity of its own, and a folder first on PATH for fake CLIs."""
    (hermetic / ".gitconfig").write_text("[user]\n\tname = Night Owl\n\temail = owl@example.invalid\n")
    folder = tmp_path / "bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return folder


@pytest.fixture
def fake_cli(bin_dir) -> Callable[[str, str], Path]:
    """Make an executable shell script `name` on PATH running `body`: a real program to find and run."""

    def make(name: str, body: str) -> Path:
        script = bin_dir / name
        script.write_text(f"#!/bin/sh\n{body}\n")
        script.chmod(0o755)
        return script

    return make

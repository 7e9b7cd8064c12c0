"""What this machine can run: bubblewrap only when a trial box runs."""

from __future__ import annotations

import os

from genesis.sandbox import detect


def test_no_bwrap_on_path_says_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    found = detect.probe("linux")
    assert found.bwrap is None and "apt-get install bubblewrap" in found.bwrap_why and "dnf" in found.bwrap_why


def test_a_bwrap_whose_trial_fails_does_not_count(monkeypatch, tmp_path):
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to creating new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    found = detect.probe("linux")
    assert found.bwrap is None
    assert found.bwrap_why == "a trial box failed: bwrap: No permissions to creating new namespace"


def test_seatbelt_only_on_macos(monkeypatch, tmp_path):
    fake = tmp_path / "sandbox-exec"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path) + os.pathsep + os.environ["PATH"])
    assert detect.probe("darwin").seatbelt == str(fake)
    assert detect.probe("darwin").bwrap is None and detect.probe("linux").seatbelt is None

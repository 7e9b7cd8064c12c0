"""What this machine can run: bubblewrap only when a trial box runs."""

from __future__ import annotations

import os

import pytest

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



def test_as_root_a_bwrap_that_cannot_make_a_user_namespace_counts_but_says_why(monkeypatch, tmp_path):
    fake = tmp_path / "bwrap"
    fake.write_text('#!/bin/sh\ncase " $* " in *" --unshare-user "*) echo "bwrap: setting up uid map: '
                    'Permission denied" >&2; exit 1;; esac\nexit 0\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    found = detect.probe("linux", root=True)
    assert found.bwrap == str(fake) and found.root
    assert found.root_why == "a trial box failed: bwrap: setting up uid map: Permission denied"
    assert detect.probe("linux", root=False).root_why == ""


def test_as_root_here_the_trial_box_drops_every_capability():
    found = detect.probe(root=True)
    if found.bwrap is None:
        pytest.skip(f"no bubblewrap here: {found.bwrap_why}")
    assert found.root and found.root_why == ""  # measured: bubblewrap 0.8 makes its user namespace as root

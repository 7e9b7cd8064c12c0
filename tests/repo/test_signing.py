"""repo/signing.py: signing that would wait on a prompt is found once, bounded."""

from __future__ import annotations

from helpers.agent import script
from helpers.git import git

from genesis.repo.signing import Signing, load, probe, save, signing_file, unsigned_for


def test_no_signing_configured(project):
    assert probe(project) == Signing(False)


def test_a_signing_program_that_waits_is_found_within_the_bound(project, tmp_path):
    git(project, "config", "commit.gpgsign", "true")
    git(project, "config", "gpg.program", str(script(tmp_path / "gpg.sh", "#!/usr/bin/env bash\nexec sleep 60\n")))
    found = probe(project, timeout=1.0)
    assert found.configured and "waited over 1s" in found.unsigned


def test_a_signing_program_that_fails_is_named(project, tmp_path):
    git(project, "config", "commit.gpgsign", "true")
    git(project, "config", "gpg.program", str(script(tmp_path / "gpg.sh", "#!/usr/bin/env bash\necho nope >&2\n"
                                                                             "exit 2\n")))
    found = probe(project)
    assert found.configured and "failed" in found.unsigned


def test_a_signing_program_that_works_signs(project, tmp_path):
    # A stand-in signer that answers at once, as a key agent would.
    signer = script(tmp_path / "gpg.sh", "#!/usr/bin/env bash\ncat >/dev/null\n"
                                         "echo '[GNUPG:] SIG_CREATED ' >&2\n"
                                         "printf -- '-----BEGIN PGP SIGNATURE-----\\n\\nx\\n-----END PGP SIGNATURE-----\\n'\n")
    git(project, "config", "commit.gpgsign", "true")
    git(project, "config", "gpg.program", str(signer))
    assert probe(project) == Signing(True, "")


def test_signing_turned_on_after_the_start_is_never_tried(project, tmp_path):
    save(signing_file(tmp_path), "run-1", Signing(False))
    assert unsigned_for(project, tmp_path, "run-1") == ""
    git(project, "config", "commit.gpgsign", "true")
    assert "was not when the run started" in unsigned_for(project, tmp_path, "run-1")
    save(signing_file(tmp_path), "run-1", Signing(True, "it waits"))
    assert unsigned_for(project, tmp_path, "run-1") == "it waits"
    assert load(signing_file(tmp_path), "run-2") is None

"""What every auto-commit leaves out, through commit() and real git: files named like a secret,
files detect-secrets flags, files over the size cap (never even hashed), each with its reason;
left in the work tree, and left out again by every later commit."""

from __future__ import annotations

import base64
import os
import secrets
from pathlib import Path

import pytest
from helpers.git import git

from genesis.repo.autocommit import DEFAULT_RULES, _Git, commit
from genesis.repo.commitfilter import MB, Rules, _from_work_tree, _staged, by_content

pytestmark = pytest.mark.fault(82)

AWS_SECRET = base64.b64encode(secrets.token_bytes(30)).decode()
CONFIG = f'aws_secret_access_key = "{AWS_SECRET}"\n'


def committed(project: Path) -> set[str]:
    return set(git(project, "log", "--format=", "--name-only", "HEAD").split())


def untracked(project: Path) -> set[str]:
    return {line[3:] for line in git(project, "status", "--porcelain", "--untracked-files=all").splitlines()
            if line.startswith("??")}


def reasons(result) -> dict[str, str]:
    return {item.path: item.reason for item in result.left_out}


def test_secrets_by_name_and_content_and_a_huge_file_are_left_out_and_the_rest_committed(project):
    (project / "work.py").write_text("print('the work')\n")
    (project / ".env").write_text(f"ANTHROPIC_API_KEY=sk-ant-api03-{secrets.token_urlsafe(40)}\n")
    (project / ".env.example").write_text("ANTHROPIC_API_KEY=\n")
    (project / "keys").mkdir()
    (project / "keys" / "id_rsa").write_text("not even a key: the name is enough\n")
    (project / "keys" / "id_rsa.pub").write_text("ssh-rsa AAAA me@host\n")
    (project / "config.py").write_text(CONFIG)
    with open(project / "big.bin", "wb") as big:
        big.truncate(1 << 30)  # sparse: costs no disk

    result = commit(project, "phase", [], push=False)

    assert result.committed and not result.error
    assert committed(project) == {"README.md", "work.py", ".env.example", "keys/id_rsa.pub"}
    why = reasons(result)
    assert set(why) == {".env", "keys/id_rsa", "config.py", "big.bin"}
    assert why[".env"] == "looks like a secret by its name: an environment file (.env)"
    assert why["keys/id_rsa"] == "looks like a secret by its name: an SSH private key (id_rsa)"
    assert why["config.py"].startswith("detect-secrets found ") and AWS_SECRET not in why["config.py"]
    assert why["big.bin"] == "1024 MB, over the 10 MB cap of one committed file (GENESIS_COMMIT_MAX_FILE_MB)"
    # Left in the work tree, untouched; the 1 GB file was never hashed into the repository.
    assert untracked(project) == {".env", "keys/id_rsa", "config.py", "big.bin"}
    assert (project / "big.bin").stat().st_size == 1 << 30
    size = dict(line.split(": ") for line in git(project, "count-objects", "-v").splitlines())
    assert int(size["size"]) + int(size["size-pack"]) < 1024  # KiB

    # The next auto-commit leaves them out again, with the same reasons.
    (project / "work.py").write_text("print('more work')\n")
    again = commit(project, "phase 2", [], push=False)
    assert again.committed and reasons(again) == why
    assert committed(project) == {"README.md", "work.py", ".env.example", "keys/id_rsa.pub"}


def test_a_secret_the_agent_staged_itself_is_unstaged_and_left_out(project):
    (project / ".env").write_text("TOKEN=abc\n")
    (project / "work.txt").write_text("work\n")
    git(project, "add", ".env", "work.txt")
    result = commit(project, "phase", [], push=False)
    assert result.committed and set(reasons(result)) == {".env"}
    assert committed(project) == {"README.md", "work.txt"}
    assert git(project, "diff", "--cached", "--name-only").strip() == ""


def test_in_a_tracked_file_only_a_new_secret_counts(project):
    (project / "settings.py").write_text(CONFIG + "DEBUG = False\n")
    git(project, "add", "settings.py")
    git(project, "commit", "-qm", "the user's settings, secret and all, on purpose")
    (project / "settings.py").write_text(CONFIG + "DEBUG = True\n")
    kept = commit(project, "phase", [], push=False)
    assert kept.committed and kept.left_out == ()
    fresh = base64.b64encode(secrets.token_bytes(30)).decode()
    (project / "settings.py").write_text(CONFIG + f'backup_secret_key = "{fresh}"\n')
    left = commit(project, "phase 2", [], push=False)
    assert not left.committed and set(reasons(left)) == {"settings.py"}
    assert fresh not in git(project, "log", "-p")


def test_a_tracked_file_grown_over_the_cap_is_left_out_and_the_cap_is_a_setting(project):
    (project / "data.bin").write_bytes(b"small\n")
    git(project, "add", "data.bin")
    git(project, "commit", "-qm", "small data")
    (project / "data.bin").write_bytes(os.urandom(2 * MB))
    capped = commit(project, "phase", [], push=False, tracked_only=True, rules=Rules(1 * MB))
    assert not capped.committed
    assert reasons(capped) == {"data.bin": "2.0 MB, over the 1.0 MB cap of one committed file "
                                           "(GENESIS_COMMIT_MAX_FILE_MB)"}
    assert commit(project, "phase", [], push=False, rules=Rules(0)).committed  # 0: no cap
    assert DEFAULT_RULES.max_bytes == 10 * MB


def test_committing_only_some_paths_leaves_out_the_secrets_among_them(project):
    (project / ".env").write_text("A=1\n")
    (project / "creds.py").write_text(CONFIG)
    (project / "work.txt").write_text("work\n")
    result = commit(project, "the user's changes", [], push=False, only=[".env", "creds.py", "work.txt"])
    assert result.committed and set(reasons(result)) == {".env", "creds.py"}
    assert committed(project) == {"README.md", "work.txt"}
    assert git(project, "diff", "--cached", "--name-only").strip() == ""  # nothing left staged


@pytest.mark.fault(207)
def test_only_a_file_detect_secrets_must_scan_is_left_out_for_time_and_said(project):
    (project / "work.txt").write_text("work\n")  # nothing any plugin could fire on: never left out for time
    (project / "login.py").write_text("def check(password):\n    return bool(password)\n")  # a keyword: scanned
    result = commit(project, "phase", [], push=False, rules=Rules(10 * MB, budget=0))
    assert result.committed and committed(project) == {"README.md", "work.txt"}
    assert reasons(result) == {"login.py": "not checked for secrets within 0 s"}


def test_what_is_scanned_is_the_staged_blob_whatever_the_work_tree_holds_now(project):
    (project / "config.py").write_text(CONFIG)
    (project / "clean.py").write_text("NAME = 'clean'\n")
    git(project, "add", "config.py", "clean.py")
    (project / "config.py").write_text("NAME = 'no secret here now'\n")  # changed after it was staged
    (project / "clean.py").write_text(CONFIG)
    git_ = _Git(project, {}, False, 60)
    why = {item.path: item.reason for item in by_content(git_, DEFAULT_RULES, top=project)}
    assert set(why) == {"config.py"} and why["config.py"].startswith("detect-secrets found ")


def test_a_staged_file_is_read_from_the_work_tree_only_when_it_hashes_to_the_staged_blob(project):
    for name in ("same.py", "changed.py", "linked.py", "fifo.py"):
        (project / name).write_text(f"NAME = {name!r}\n")
    (project / "big.py").write_text("x" * 100)   # over the limit asked: git is asked, even for the same bytes
    git(project, "add", ".")
    (project / "changed.py").write_text("NAME = 'another'\n")
    (project / "target.txt").write_text("NAME = 'linked.py'\n")
    (project / "linked.py").unlink()
    (project / "linked.py").symlink_to("target.txt")  # never followed, even to the same bytes
    (project / "fifo.py").unlink()
    os.mkfifo(project / "fifo.py")  # never waited on
    staged = {s.path: s for s in _staged(_Git(project, {}, False, 60))}
    read = {path: _from_work_tree(os.fspath(project), item, 50) for path, item in staged.items()}
    assert read == {"same.py": b"NAME = 'same.py'\n", "changed.py": None, "linked.py": None, "fifo.py": None,
                    "big.py": None}

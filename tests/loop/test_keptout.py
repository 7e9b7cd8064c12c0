"""What Genesis's commits at the start leave out, told, and the agent's own secret-looking
commits named: the real preflight step and a real step against real git."""

from __future__ import annotations

import base64
import secrets

import pytest
from helpers.git import git

from genesis.loop.keptout import agent_committed
from genesis.loop.step import Step
from genesis.repo.ownership import remember, user_files
from genesis.repo.phasework import before

RUN = "run-keptout"
pytestmark = pytest.mark.fault(82)


def left_out_events(step: Step) -> list[dict]:
    return [e for e in step.events() if e["event"] == "commit_left_out"]


def test_the_work_an_earlier_run_left_is_committed_without_its_secrets(project, start, said):
    step = start()
    (project / "agent.py").write_text("x = 1\n")
    (project / ".env").write_text("API_TOKEN=abc\n")
    lay = step.layout
    assert remember(project, lay.leftovers_file, "run-1", "at its end", user_files(lay.user_files), 1.0) is None
    said.clear()
    step = start()
    assert git(project, "show", "--format=", "--name-only", "HEAD").split() == ["agent.py"]
    assert ("warn", "the work Genesis run run-1 left uncommitted: 1 file(s) left out of the commit, and of every "
                    "later auto-commit (they stay in the work tree, uncommitted): .env (looks like a secret by its "
                    "name: an environment file (.env))") in said
    [event] = left_out_events(step)
    assert event["files"] == [{"path": ".env", "reason": "looks like a secret by its name: an environment file "
                                                         "(.env)"}]


def test_allow_dirty_leaves_a_new_secret_of_the_users_out_and_still_starts(project, start, said):
    (project / "settings.py").write_text("DEBUG = False\n")
    git(project, "add", "settings.py")
    git(project, "commit", "-qm", "settings")
    secret = base64.b64encode(secrets.token_bytes(30)).decode()
    (project / "settings.py").write_text(f'DEBUG = False\naws_secret_access_key = "{secret}"\n')
    step = start(allow_dirty=True)
    assert secret not in git(project, "log", "-p")
    assert git(project, "status", "--porcelain").strip() == "M settings.py"
    [event] = left_out_events(step)
    assert event["where"] == "--allow-dirty" and event["files"][0]["path"] == "settings.py"
    assert event["files"][0]["reason"].startswith("detect-secrets found ")


def test_a_secret_looking_file_in_the_agents_own_commits_is_named_and_recorded(project, start, said):
    step = start()
    at_start = before(project)
    assert agent_committed(step, 1, "Builder", at_start) is False
    (project / "deploy").mkdir()
    (project / "deploy" / "id_ed25519").write_text("a key\n")
    (project / "deploy" / "id_ed25519.pub").write_text("ssh-ed25519 AAAA\n")
    git(project, "add", "deploy")
    git(project, "commit", "-qm", "the agent's deploy key")
    sha = git(project, "rev-parse", "--short", "HEAD").strip()
    assert agent_committed(step, 1, "Builder", at_start) is True
    [event] = [e for e in step.events() if e["event"] == "agent_committed_secret"]
    assert event["files"] == [{"path": "deploy/id_ed25519", "commit": sha,
                               "reason": "looks like a secret by its name: an SSH private key (id_ed25519)"}]
    assert any(kind == "error" and f"deploy/id_ed25519 in {sha}" in msg for kind, msg in said)

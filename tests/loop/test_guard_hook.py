"""The heartbeat hook kept working between phases, replayed on a real project: what the user's
`genesis hook uninstall` tells a running loop, and what the real `guard_hook` then does before
the next phase (stop, go on without it, or put back what an agent took). A stand-in holds the
loop's lock; the commands run in this process."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers.agent import script
from helpers.procs import lock_held

from genesis import exitcodes
from genesis.agents.claude.settings import installed_events
from genesis.cli import cli
from genesis.config import resolve
from genesis.loop.guard import HookRemoved, guard_hook
from genesis.loop.step import Step
from genesis.procs.markers import markers_for

RUN = "run-guard"


def hook(project: Path, *args: str) -> str:
    done = CliRunner().invoke(cli, ["--project", str(project), "hook", *args, "--scope", "local"],
                              catch_exceptions=False)
    assert done.exit_code == 0, done.output
    return done.output


@pytest.fixture
def started(project: Path, tmp_path: Path, said, preflighted):
    """started(**env): a run whose start found the hook working in the local settings (the real
    preflight, with a small agent script): its step."""
    agent = script(tmp_path / "agent.sh", "#!/bin/sh\nexit 0\n")
    hook(project, "install")

    def start(**env: str) -> Step:
        step = preflighted(resolve(project, env={"GENESIS_AGENT_CMD": str(agent), "GENESIS_PHASES": "Builder Planner",
                                                 **env}))
        assert any(msg.startswith("heartbeat hook: working (local settings") for _, msg in said)
        return step

    return start


def settings(project: Path) -> Path:
    return project / ".claude" / "settings.local.json"


def uninstalled_by_the_user(step: Step) -> str:
    """The user's `hook uninstall`, from another terminal, while the loop runs: what it printed."""
    with lock_held(step.layout, RUN):
        return hook(step.cfg.project, "uninstall")


@pytest.mark.fault(67)
def test_the_users_uninstall_stops_a_loop_whose_agent_needs_the_hook_before_its_next_phase(project, started, said):
    step = started(GENESIS_AGENT_CLI="claude")
    told = uninstalled_by_the_user(step)
    assert f"the loop running on {project} (pid " in told
    assert "it will not put it back, and stops cleanly before its next phase (exit 2)" in told
    with pytest.raises(HookRemoved) as stopped:
        guard_hook(step, "Planner", 1)
    assert stopped.value.code == exitcodes.USAGE
    assert "by your `hook uninstall`, while the loop ran: the loop does not undo your removal" in str(stopped.value)
    assert "so it stops before Planner (exit 2)" in str(stopped.value)
    assert installed_events(settings(project)) == []  # not put back
    (stop,) = step.events(kinds=("stop_reason",))
    assert stop["code"] == exitcodes.USAGE and "removed by the user's `hook uninstall`" in stop["reason"]
    # The user puts it back, as the loop said, and restarts: the next run keeps it working.
    hook(project, "install")
    assert not step.layout.hook_removal.exists()
    said.clear()
    again = started(GENESIS_AGENT_CLI="claude")
    guard_hook(again, "Builder", 1)
    assert not [msg for _, msg in said if "removed" in msg or "repaired" in msg]


@pytest.mark.fault(67)
def test_a_loop_whose_agent_can_do_without_the_hook_goes_on_without_it_told_once(project, started, said):
    step = started()  # the agent script as a plain command: its output and processes are its signs of life
    told = uninstalled_by_the_user(step)
    assert "it will not put it back, and goes on without it" in told
    guard_hook(step, "Planner", 1)
    guard_hook(step, "Builder", 2)
    gone = [msg for _, msg in said if "by your `hook uninstall`" in msg]
    assert len(gone) == 1 and "the loop does not put it back, and goes on without it" in gone[0]
    assert not [msg for _, msg in said if "repaired" in msg]
    assert installed_events(settings(project)) == []


@pytest.mark.fault(68)
def test_what_an_agent_removes_is_put_back_before_the_next_phase_even_through_hook_uninstall(
        project, started, said, monkeypatch):
    step = started(GENESIS_AGENT_CLI="claude")
    # The agent's own `hook uninstall`: it carries the run's markers, so it is not the user's word.
    for key, value in markers_for(project, RUN).items():
        monkeypatch.setenv(key, value)
    told = uninstalled_by_the_user(step)
    assert "started this command (an agent's): it puts the hook back before its next phase" in told
    assert not step.layout.hook_removal.exists()
    guard_hook(step, "Planner", 1)
    settings(project).unlink()  # and then its `rm`
    guard_hook(step, "Builder", 2)
    repaired = [msg for _, msg in said if msg.startswith("repaired: the heartbeat hook stopped working")]
    assert len(repaired) == 2 and all(msg.endswith(f"reinstalled it in {settings(project)}") for msg in repaired)
    assert installed_events(settings(project))

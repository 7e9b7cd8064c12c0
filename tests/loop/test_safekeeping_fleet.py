"""A fleet's child answers for its own branch among the fleet's: the monitor's merge queue
replays and prunes the other tasks' branches while the child runs, and that is not history
the child rewrote. Its own branch and the user's branches are watched as ever."""

from __future__ import annotations

from helpers.git import commit_file, git

from genesis.loop import safekeeping

RUN = "20260101T000000Z-safekeeping-fleet"


def test_other_fleet_branches_moving_is_not_the_childs_history_but_its_own_and_the_users_are(project, step):
    commit_file(project, "base.txt")
    git(project, "branch", "user-branch")
    git(project, "branch", "genesis/task/other-aaaaaa")
    git(project, "branch", "genesis/plan/fleet-1")
    git(project, "checkout", "-q", "-b", "genesis/task/mine-bbbbbb")
    commit_file(project, "mine.txt")
    safekeeping.keep_at_start(step)
    safekeeping.keep_at_phase(step, 1, "Builder")
    # The merge queue replays another task's branch (a rewrite) and prunes the Planner's.
    git(project, "checkout", "-q", "--detach")
    git(project, "branch", "-f", "genesis/task/other-aaaaaa", "HEAD~1")
    git(project, "branch", "-D", "genesis/plan/fleet-1")
    git(project, "checkout", "-q", "genesis/task/mine-bbbbbb")
    assert safekeeping.history_of(step, 1, "Builder") == []

    git(project, "branch", "-f", "user-branch", "HEAD~2")  # the user's branch rewritten: still told
    safekeeping.keep_at_phase(step, 1, "Criticizer")
    assert [(c.kind, c.branch) for c in safekeeping.history_of(step, 1, "Criticizer")] == \
        [("rewritten", "user-branch")]
    safekeeping.keep_at_phase(step, 2, "Builder")
    git(project, "reset", "-q", "--hard", "HEAD~1")  # its own branch rewritten: told
    assert ("rewritten", "genesis/task/mine-bbbbbb") in [(c.kind, c.branch) for c in
                                                          safekeeping.history_of(step, 2, "Builder")]

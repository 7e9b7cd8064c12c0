"""Whose heartbeat it is: the CLI's own hook call counts as a sign of life, a loop the agent
runs below a tool to call the hook does not (the judge; tests/watch/test_forged_beats.py
runs it in a real watcher)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field

from genesis.health.beatorigin import Origins
from genesis.health.heartbeat import Heartbeat, hook_script, read_heartbeat
from genesis.procs.proctree import ProcId

RUN_ID = "run-beatorigin"
T = 1_000_000.0


# --- the judge, on a made-up process tree -----------------------------------------------------

@dataclass
class Tree:
    """pid: (start time, parent pid); `gone` have exited."""
    procs: dict[int, tuple[float, int]]
    gone: set[int] = field(default_factory=set)
    root: int = 10

    def ident(self, pid: int) -> ProcId:
        return ProcId(pid, self.procs[pid][0])

    def resolve(self, pid: int) -> ProcId | None:
        if pid not in self.procs or pid in self.gone:
            return None
        p = pid
        while p in self.procs:
            if p == self.root:
                return self.ident(pid)
            p = self.procs[p][1]
        return None  # outside the agent's tree

    def alive(self, ident: ProcId) -> bool:
        return ident.pid in self.procs and ident.pid not in self.gone

    def above(self, upper: ProcId, lower: ProcId) -> bool:
        p = self.procs.get(lower.pid, (0, 0))[1]
        while p in self.procs:
            if p == upper.pid:
                return True
            p = self.procs[p][1]
        return False


def beat(at: float, *ppids: int) -> Heartbeat:
    return Heartbeat(at, "", "Builder", "Bash", "PreToolUse", "s", ppids[0] if ppids else None, RUN_ID, ppids)


# 1: the watcher (outside); 10: the launcher (the agent's root); 11: the CLI; 12: a tool's shell;
# 13: a loop the tool started; 14: the hook's own shell (the CLI's, short-lived)
TREE = {1: (T - 100, 0), 10: (T - 60, 1), 11: (T - 59, 10), 12: (T - 30, 11), 13: (T - 29, 12), 14: (T + 5, 11)}


def test_the_clis_own_beats_count_directly_or_through_a_shell_it_started_for_the_hook():
    tree = Tree(dict(TREE), gone={14})
    judge = Origins(tree.ident(10))
    assert judge.judge(beat(T, 11, 10, 1), tree).counts
    assert judge.judge(beat(T + 5, 14, 11, 10), tree).counts  # its shell is gone by the check
    tree.gone.clear()
    assert judge.judge(beat(T + 5.1, 14, 11, 10), tree).counts  # caught still exiting: looked past
    assert judge.cli == tree.ident(11)


def test_a_loop_below_a_tool_does_not_count_however_deep_its_short_lived_shells():
    tree = Tree(dict(TREE))
    judge = Origins(tree.ident(10))
    assert judge.judge(beat(T, 11, 10, 1), tree).counts
    forged = judge.judge(beat(T + 1, 13, 12, 11, 10), tree)
    assert not forged.counts and forged.runner == tree.ident(13)
    assert forged.why == ("the hook was run by pid 13, a process below the CLI's tools (a loop calling the hook), "
                          "not by the CLI (pid 11)")
    tree.procs.update({20: (T + 1.5, 13), 21: (T + 1.6, 20)})  # sh -c 'sh -c hook', gone by the check
    tree.gone |= {20, 21}
    assert not judge.judge(beat(T + 2, 21, 20, 13, 12, 11), tree).counts


def test_an_orphaned_loop_outside_the_agents_tree_does_not_count():
    tree = Tree({**TREE, 13: (T - 29, 1)})  # the tool's shell exited: the loop was re-parented
    judge = Origins(tree.ident(10))
    assert judge.judge(beat(T, 11, 10), tree).counts
    assert not judge.judge(beat(T + 1, 13, 1), tree).counts


def test_the_highest_runner_is_the_cli_whatever_came_first():
    tree = Tree(dict(TREE))
    judge = Origins(tree.ident(10))
    assert judge.judge(beat(T + 6, 14, 11), tree).counts  # the first beat caught its shell alive
    assert judge.judge(beat(T + 7, 11, 10), tree).counts and judge.cli == tree.ident(11)
    assert not judge.judge(beat(T + 8, 13, 12, 11), tree).counts


def test_beats_that_say_nothing_of_their_runner_count_as_before():
    tree = Tree(dict(TREE))
    judge = Origins(tree.ident(10))
    assert judge.judge(beat(T, 11), tree).counts
    assert judge.judge(Heartbeat(T + 1, "", "B", "Bash", "", "", 13, RUN_ID), tree).counts


def test_the_hook_records_its_ancestors_up_to_the_cli(tmp_path):
    hb = tmp_path / "hb" / "Builder.json"
    hb.parent.mkdir(mode=0o700)
    cli = subprocess.Popen(["bash", "-c", f'CLAUDE_PID=$$ sh -c "bash {hook_script()} Bash; true"; true'],
                           env={"GENESIS_HEARTBEAT_FILE": str(hb), "PATH": "/usr/bin:/bin"},
                           stdin=subprocess.DEVNULL)
    assert cli.wait(30) == 0
    got, _ = read_heartbeat(hb)
    assert got.pid == cli.pid and len(got.ppids) == 2 and got.ppids[-1] == cli.pid  # the hook's sh, the CLI

"""The box in a linked worktree (a fleet's child): the agent's own `git commit` works, the other
work trees, their git dirs and the common dir's Genesis state (the main loop's and the fleet's)
stay read-only. Real git, the real bubblewrap box."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from helpers.git import git, new_repo

import genesis
from genesis.sandbox.box import BUBBLEWRAP, LANDLOCK, Box, choose
from genesis.sandbox.detect import Machine, probe
from genesis.sandbox.places import Places, places_for, worktree_layers
from genesis.sandbox.seatbelt import profile

PACKAGE = Path(genesis.__file__).resolve().parent
MACHINE = probe()


@pytest.fixture
def fleet(tmp_path: Path) -> dict[str, Path]:
    """A repository with two linked worktrees in the default root, one elsewhere, and the fleet's state."""
    main = new_repo(tmp_path / "repo")
    common = main / ".git"
    trees = {"main": main, "common": common, "fleet": common / "genesis" / "fleet"}
    trees["fleet"].mkdir(parents=True)
    (trees["fleet"] / "ledger.sqlite3").write_text("the fleet's\n")
    for name, where in (("t1", common / "genesis-worktrees" / "t1"), ("t2", common / "genesis-worktrees" / "t2"),
                        ("t3", tmp_path / "trees" / "t3")):
        git(main, "worktree", "add", "-q", "-b", f"genesis/task/{name}", str(where))
        trees[name] = where
    return trees


def places_of(project: Path, home: Path) -> Places:
    git_dir = Path(git(project, "rev-parse", "--absolute-git-dir").strip())
    state = git_dir / "genesis"
    (state / "heartbeats").mkdir(parents=True, exist_ok=True)
    home.mkdir(exist_ok=True)
    return places_for(project, state, state / "heartbeats", project / "orchestrator" / "logs",
                      project / "genesis.conf", PACKAGE, ("bash",),
                      {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home)})


def test_a_childs_layers_keep_the_others_read_only_and_its_own_git_writable(fleet, tmp_path):
    places = places_of(fleet["t1"], tmp_path / "home")
    common = str(fleet["common"])
    assert set(places.layers) == {
        (str(fleet["main"]), False), (common, True),
        (f"{common}/genesis", False), (f"{common}/genesis-worktrees", False),
        (f"{common}/genesis-worktrees/t1", True), (f"{common}/genesis-worktrees/t2", False),
        (f"{common}/worktrees/t2", False), (f"{common}/worktrees/t3", False), (str(fleet["t3"]), False),
    }
    paths = [p for p, _ in places.layers]  # mount order: a folder before anything inside it
    assert all(paths.index(outer) < paths.index(inner) for outer in paths for inner in paths
               if inner.startswith(outer + "/"))
    assert places.git_writable == (f"{common}/objects", f"{common}/refs", f"{common}/logs", f"{common}/worktrees/t1")
    assert f"{common}/worktrees/t1/genesis" in places.protected  # the child's own state, as for any loop
    # A plain repository has none of this.
    assert worktree_layers(str(new_repo(tmp_path / "plain")), str(tmp_path / "plain" / ".git"), ()) == ((), (), ())


def test_the_main_work_trees_agent_cannot_write_the_childrens_worktrees(fleet, tmp_path):
    places = places_of(fleet["main"], tmp_path / "home")
    common = str(fleet["common"])
    assert (str(fleet["main"]), True) in places.layers
    assert {p for p, writable in places.layers if not writable} == {
        f"{common}/genesis-worktrees", f"{common}/genesis-worktrees/t1", f"{common}/genesis-worktrees/t2",
        str(fleet["t3"]), f"{common}/worktrees/t1", f"{common}/worktrees/t2", f"{common}/worktrees/t3"}


def test_a_read_only_layer_never_covers_home(fleet, tmp_path):
    home = fleet["t3"] / "home"  # a HOME inside a sibling worktree: that sibling is left writable
    places = places_of(fleet["t1"], home)
    assert str(fleet["t3"]) not in [p for p, _ in places.layers]


def test_seatbelt_and_landlock_say_the_same_as_far_as_they_can(fleet, tmp_path):
    places = places_of(fleet["t1"], tmp_path / "home")
    text = profile(places)
    common = str(fleet["common"])
    assert text.index(f'(allow file-write* (subpath "{common}"))') \
        < text.index(f'(deny file-write* (subpath "{common}/genesis"))') \
        < text.index(f'(allow file-write* (subpath "{common}/genesis-worktrees/t1"))')
    box = choose(LANDLOCK, Machine(None, "none", 3, None), places)
    assert {f"{common}/objects", f"{common}/refs", f"{common}/worktrees/t1"} <= set(box.rules.writable)
    assert common not in box.rules.writable and f"{common}/genesis" not in box.rules.writable


AGENT = """set -u
echo built > greeting.txt
git add greeting.txt && git -c user.name=A -c user.email=a@example.invalid commit -qm greeting && echo COMMITTED
head -1 "$1"  # seen (read-only), not hidden
for target in "$@"; do
  if (echo x > "$target") 2>/dev/null; then echo "WROTE $target"; else echo "DENIED $target"; fi
done
"""


def test_an_agent_in_a_linked_worktree_commits_and_cannot_write_the_fleets_state_or_a_sibling(fleet, tmp_path):
    assert MACHINE.bwrap is not None, f"bubblewrap must run here: {MACHINE.bwrap_why}"
    child, common = fleet["t1"], fleet["common"]
    places = places_of(child, tmp_path / "home")
    box = Box(BUBBLEWRAP, places, program=MACHINE.bwrap)
    targets = [common / "genesis" / "fleet" / "ledger.sqlite3", common / "genesis" / "loop.lock",
               fleet["t2"] / "README.md", fleet["t3"] / "README.md", common / "worktrees" / "t2" / "HEAD",
               common / "genesis-worktrees" / "t9", fleet["main"] / "README.md",
               common / "worktrees" / "t1" / "genesis" / "breaker.json", child / "notes.txt"]
    done = subprocess.run(box.wrap(("bash", "-c", AGENT, "agent", *map(str, targets))), cwd=child,
                          env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path / "home")},
                          capture_output=True, text=True, timeout=60)
    lines = done.stdout.splitlines()
    assert lines[0] == "COMMITTED", done.stdout + done.stderr
    assert lines[1] == "the fleet's"
    assert lines[2:] == [f"DENIED {t}" for t in targets[:-1]] + [f"WROTE {child / 'notes.txt'}"]
    assert git(child, "log", "-1", "--format=%s").strip() == "greeting"
    assert git(fleet["main"], "log", "-1", "--format=%s", "genesis/task/t1").strip() == "greeting"
    assert (common / "genesis" / "fleet" / "ledger.sqlite3").read_text() == "the fleet's\n"
    assert git(fleet["t2"], "status", "--porcelain") == ""

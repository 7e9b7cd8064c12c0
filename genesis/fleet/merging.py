"""The merge queue's step: a verified task's branch comes home to the project branch.

In the task's worktree, the branch's commits are replayed onto the project branch's tip with
their TASKS.md changes dropped (the child's agent ticks its own task there; the project
branch's TASKS.md is the fleet's, so those edits never conflict and never tick the wrong
task), the result is checked, and a commit ticks the task `[x]`. Checked: nothing either side
added since their merge base is dropped (keeps.py; a merge that drops a line is not landed,
outcome "dropped", the lost hunks named), the project's test command passes (bounded), and
the merged tree's checks pass in the agent's box (the task's `check:` line and
GENESIS_CHECK_CMD, mergecheck.py; recorded as the merge's evidence): only a green merge
moves anything, a red one is undone (outcome "tests_failed", the failure's tail given). The
branch is moved to that result, then the project branch:
- checked out in a work tree with no uncommitted change to a tracked file: fast-forwarded there;
- checked out with such changes (the user's, mid-edit), being rebased, or with an untracked or
  ignored file where the merge brings one (git would overwrite an ignored one): not moved,
  outcome "held", nothing of the user's touched (the monitor tries again later);
- checked out nowhere: moved by compare-and-swap (`git update-ref new old`).
At the first conflicting commit, the rest of the branch is applied as one change and its
conflicts go to `resolve` once (the monitor runs the Merger agent there); still
conflicted, everything is undone (the worktree back on its branch, the branch at its old
commits): outcome "conflict". Nothing is ever deleted here.

With GENESIS_FLEET_MERGE=branch the project branch is not moved: the rebased branch is kept for
review (and pushed with AUTO_PUSH), outcome "ready". A task that failed permanently is marked
`- [!] text (failed: reason)` on the project branch (`mark_failed`), moved in as merges are.
The Merger's prompt is data/prompts/merger.md.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from genesis.fleet import keeps, mergecheck
from genesis.fleet.decide import Alert
from genesis.fleet.lines import say
from genesis.fleet.taskref import TaskRef
from genesis.fleet.worktrees import Git, listed, rev
from genesis.loop.taskcheck import TAIL_BYTES, TAIL_LINES
from genesis.procs.group import kill_group
from genesis.repo import branchguard
from genesis.repo.autocommit import user_changes
from genesis.repo.gitcmd import GitFailed
from genesis.repo.signing import probe
from genesis.repo.tasks import DONE, FAILED, MAX_TASKS_BYTES, OPEN, REVIEW, TASKS_FILE, failed_line, marked, parse
from genesis.watch.evidence import tail_of

__all__ = ["MergeResult", "merge_home", "mark_failed", "tasks_edit", "MERGED", "CONFLICT", "TESTS_FAILED", "HELD",
           "READY", "DROPPED"]

MERGED, CONFLICT, TESTS_FAILED, HELD, READY = "merged", "conflict", "tests_failed", "held", "ready"
DROPPED = "dropped"      # the result lost lines a side added: not landed
ROUNDS = 3               # the project branch moved under a merge: replay onto its new tip, this many times
TAIL = 2000              # characters of a failed test's output kept in the result
MARKERS = (b"<<<<<<< ", b">>>>>>> ")
Resolver = Callable[[Path, list[str]], bool]


@dataclass(frozen=True)
class MergeResult:
    outcome: str                   # merged | conflict | tests_failed | dropped | held | ready
    sha: str                       # the branch's tip after the step (the project branch's new tip when merged)
    detail: str                    # what happened, for the ledger and the alert
    commits: tuple[str, ...] = ()  # the commits replayed onto the project branch, oldest first
    checks: tuple[dict, ...] = ()  # the merged tree's checks as run (mergecheck.evidence): the merge's evidence
    tail: tuple[str, ...] = ()     # a red merge: the failed check's output's last lines, redacted
    lost: tuple[str, ...] = ()     # a dropped merge: each lost hunk in words


class _Undone(Exception):
    """The replay cannot go on: everything is undone, and this is the result to give."""

    def __init__(self, result: MergeResult):
        super().__init__(result.detail)
        self.result = result


def _git(cwd: Path, project: Path, hooks: bool) -> Git:
    """git for Genesis's commits in cwd: signed as the repository asks when that works
    unattended, else unsigned and saying why (repo/signing.py)."""
    signing = probe(project)
    return Git(cwd, hooks, signing.unsigned, signing.configured and not signing.unsigned)


REPLAYED = "genesis: replayed onto the project branch"   # the reflog's word for a branch our merge moved


def merge_home(project: Path, worktree: Path, branch: str, target: str, task: TaskRef, cfg, *,
               resolve: Resolver | None, keep_tasks: bool = False,
               owners: Mapping[str, str] | None = None) -> MergeResult:
    """Bring branch home to target (see the module's docstring); GENESIS_FLEET_MERGE=branch
    instead rebases it onto target's tip and keeps it (outcome "ready"; pushed when AUTO_PUSH is on).

    keep_tasks: the branch's TASKS.md changes are its point (the Planner's branch): instead of
    a tick, they come home merged with the project branch's TASKS.md (see _planned); task is
    then only named in messages. owners: the task each commit that came home before belongs to
    (a lost line is named with its task)."""
    project, worktree = Path(project), Path(worktree)
    if not worktree.is_dir():
        return MergeResult(CONFLICT, "", f"the task's worktree {worktree} is gone; its branch {branch} is kept")
    git = _git(worktree, project, cfg.git_hooks)
    try:
        return _merge(project, git, branch, target, task, cfg, resolve, keep_tasks, owners or {})
    except (GitFailed, OSError) as exc:  # GitTimeout too: our own step failed, not the user's work
        try:
            _restore(git, branch)
            sha = rev(git, f"refs/heads/{branch}")
        except (GitFailed, OSError):
            sha = ""
        return MergeResult(CONFLICT, sha, f"the merge of {branch} stopped: {exc}; the branch is kept, merge it "
                                          f"by hand")


def _merge(project: Path, git: Git, branch: str, target: str, task: TaskRef, cfg,
           resolve: Resolver | None, keep_tasks: bool, owners: Mapping[str, str]) -> MergeResult:
    worktree = git.cwd
    _recover(git, branch)
    old = rev(git, f"refs/heads/{branch}")
    if not old:
        return MergeResult(CONFLICT, "", f"branch {branch} does not exist; nothing to merge")
    dirty = user_changes(worktree).changed
    if dirty:
        return MergeResult(CONFLICT, old, f"the worktree {worktree} has uncommitted changes to tracked files "
                                          f"({_listing(dirty)}); commit or discard them there, then merge again")
    result = MergeResult(HELD, old, f"{target} kept moving while the merge was replayed; tried {ROUNDS} times")
    for _ in range(ROUNDS):
        tip = rev(git, f"refs/heads/{target}")
        if not tip:
            return MergeResult(CONFLICT, old, f"the project branch {target} does not exist")
        base = git.out("merge-base", tip, old) if keep_tasks else ""
        try:
            head, commits = _replay(git, tip, old, resolve)
            _kept(git, tip, old, head, branch, task, owners)
            if cfg.fleet_merge == "queue" and cfg.merge_test_cmd:
                _test(git, cfg.merge_test_cmd, cfg.merge_test_timeout, old, branch)
            runs = _checked(git, cfg, tip, task, old, branch, target) if cfg.fleet_merge == "queue" and \
                not keep_tasks else ()
        except _Undone as undone:
            _restore(git, branch)
            return undone.result
        head = _planned(git, base, tip, old, head) if keep_tasks else _tick(git, tip, head, task)
        if not _descends(git, head, tip):  # never move anything to a commit that drops the project's
            raise GitFailed(f"the replay of {branch} ended on {head[:10]}, which does not hold {target}'s tip")
        git.out("update-ref", "-m", REPLAYED, f"refs/heads/{branch}", head, old)
        git.out("checkout", "-q", branch)  # the same commit: nothing in the work tree changes
        old = head
        if cfg.fleet_merge == "branch":
            return MergeResult(READY, head, _pushed(git, branch, target) if cfg.auto_push else
                               f"{branch} rebased onto {target} ({tip[:10]}), kept for review", commits)
        moved = None if head == tip else _advance(project, target, tip, head, cfg.git_hooks)
        if moved is None:
            return MergeResult(MERGED, head, f"{len(commits)} commit(s) of {branch} and the task's tick are on "
                                             f"{target}{_green(runs)}", commits, runs)
        if moved:
            result = MergeResult(HELD, head, moved, commits, runs)
            break
    return result


def _recover(git: Git, branch: str) -> None:
    """Back on branch, with nothing of an interrupted merge left (a monitor killed mid-replay
    leaves the worktree detached with half-applied commits; the branch itself never moved)."""
    if git("symbolic-ref", "-q", "HEAD").text.strip() != f"refs/heads/{branch}":
        _restore(git, branch)


def _restore(git: Git, branch: str) -> None:
    """Undo the replay: the tracked files as the branch has them, HEAD on the branch again."""
    git("reset", "-q", "--hard")       # also ends a cherry-pick the Merger may have started
    git.out("checkout", "-q", "-f", branch)


def _replay(git: Git, tip: str, old: str, resolve: Resolver | None) -> tuple[str, tuple[str, ...]]:
    """Cherry-pick the branch's own commits onto tip, each without its TASKS.md change;
    (the new head, the new commits). At the first conflict, the rest of the branch is
    applied as one change, so that the Merger's one try covers all of it."""
    commits = git.out("rev-list", "--reverse", "--no-merges", f"{tip}..{old}").split()
    git.out("checkout", "-q", "--detach", tip)
    made: list[str] = []
    for n, commit in enumerate(commits):
        conflicted = _pick(git, commit, old)
        if conflicted:
            if resolve is None:
                raise _Undone(MergeResult(CONFLICT, old, f"{commit[:10]} conflicts with the project branch in "
                                                         f"{_listing(conflicted)}; the branch is kept as it was"))
            made += _merger(git, commits[n:], old, resolve)
            break
        if _staged(git):
            git.out("commit", "-q", "-C", commit, identity=True)
            made.append(rev(git, "HEAD"))
    git("cherry-pick", "--quit")
    return rev(git, "HEAD"), tuple(made)


def _pick(git: Git, commit: str, old: str) -> list[str]:
    """Apply commit's change (its TASKS.md change dropped) to the index and work tree; the
    files left conflicted."""
    picked = git("cherry-pick", "--no-commit", commit, identity=True)
    if picked.returncode != 0 and not _unmerged(git):  # not a conflict: e.g. an untracked file in the way
        raise _Undone(MergeResult(CONFLICT, old, f"cannot replay {commit[:10]} of the branch: "
                                                 f"{(picked.stderr or picked.text).strip()[-300:]}"))
    _keep_tasks(git)
    return _unmerged(git)


def _merger(git: Git, rest: list[str], old: str, resolve: Resolver) -> list[str]:
    """The rest of the branch (from its first conflicting commit) as one change, its conflicts
    given to resolve once; the commits made. _Undone when they are not all resolved."""
    before = rev(git, "HEAD")
    git.out("reset", "-q", "--hard")  # the conflicted pick goes: the whole rest comes as one
    first = rest[0]
    whole = git.out("commit-tree", f"{old}^{{tree}}", "-p", f"{first}^", "-m", "the rest of the branch",
                    identity=True)
    conflicted = _pick(git, whole, old)
    if conflicted:
        resolved = resolve(git.cwd, conflicted)
        _keep_tasks(git)
        left = _unmerged(git) or _with_markers(git.cwd, conflicted)
        if not resolved or left:
            said = f"left {_listing(left)} unresolved" if left else "gave up"
            raise _Undone(MergeResult(CONFLICT, old, f"{first[:10]} conflicts with the project branch in "
                                                     f"{_listing(conflicted)}; the Merger {said}; the branch is "
                                                     f"kept as it was"))
        now = rev(git, "HEAD")
        if now != before:  # the Merger committed it itself: on top of the replay, or it went astray
            if not _descends(git, now, before):
                raise _Undone(MergeResult(CONFLICT, old, f"the Merger left the replay ({now[:10]} is not on top "
                                                         f"of it); the branch is kept as it was"))
            return git.out("rev-list", "--reverse", f"{before}..{now}").split()
    if not _staged(git):
        return []
    if len(rest) == 1:
        git.out("commit", "-q", "-C", first, identity=True)
    else:
        subjects = git.out("log", "--no-walk=unsorted", "--format=- %s", *rest)
        author = git.out("log", "-1", "--format=%an <%ae>", first)
        message = (f"{len(rest)} commits of the branch, replayed as one onto the project branch (a conflict "
                   f"resolved)\n\n{subjects}\n")
        git.out("commit", "-q", f"--author={author}", "-F", "-", stdin=message.encode("utf-8"), identity=True)
    return [rev(git, "HEAD")]


def _descends(git: Git, commit: str, ancestor: str) -> bool:
    return git("merge-base", "--is-ancestor", ancestor, commit).returncode == 0


def _keep_tasks(git: Git) -> None:
    """TASKS.md as HEAD has it, in the index and the work tree (its change in the commit is dropped)."""
    if git("cat-file", "-e", f"HEAD:{TASKS_FILE}").returncode == 0:
        git.out("checkout", "-q", "HEAD", "--", TASKS_FILE)
    else:
        git("rm", "-q", "-f", "--cached", "--ignore-unmatch", "--", TASKS_FILE)
        try:
            os.unlink(git.cwd / TASKS_FILE)
        except FileNotFoundError:
            pass


def _unmerged(git: Git) -> list[str]:
    done = git("ls-files", "--unmerged", "-z")
    return list(dict.fromkeys(os.fsdecode(e.split(b"\t", 1)[1]) for e in done.stdout.split(b"\0") if b"\t" in e))


def _staged(git: Git) -> bool:
    return git("diff", "--cached", "--quiet").returncode != 0


def _with_markers(worktree: Path, paths: list[str]) -> list[str]:
    """The files still holding conflict markers (resolved in the index, not in the text)."""
    left = []
    for path in paths:
        try:
            with open(worktree / path, "rb") as f:
                data = f.read(MAX_TASKS_BYTES)
        except (FileNotFoundError, IsADirectoryError):
            continue
        if any(line.startswith(MARKERS) for line in data.splitlines()):
            left.append(path)
    return left


def _test(git: Git, command: str, timeout: float, old: str, branch: str) -> None:
    """Run the project's test command in the worktree by bash, in a session of its own, bounded;
    _Undone when it fails or runs over (then killed with everything it started)."""
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(["bash", "-c", command], cwd=git.cwd, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            status = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            status = None
        except BaseException:
            kill_group(proc)
            raise
        size = out.seek(0, os.SEEK_END)
        out.seek(max(0, size - TAIL))
        tail = tail_of(out.read().decode("utf-8", "replace"), TAIL_LINES, TAIL_BYTES)
    if status == 0:
        return
    why = f"ran over {timeout:g}s and was killed" if status is None else f"exited {status}"
    shown = "\n".join(tail)
    raise _Undone(MergeResult(TESTS_FAILED, old, f"the test command `{command}` {why} on {branch} replayed onto the "
                                                 f"project branch; the branch is kept as it was. Its output ends:\n"
                                                 f"{shown}", tail=tuple(tail)))


def _kept(git: Git, tip: str, old: str, head: str, branch: str, task: TaskRef, owners: Mapping[str, str]) -> None:
    """_Undone (DROPPED) when the replay's result lost a line either side added since their
    merge base: the hunks named, with the task or the project branch's commit that added them."""
    base = git.out("merge-base", tip, old)
    who = f"the task {task.text!r}" if task.text else f"the branch {branch}"
    lost = keeps.dropped(git, base, (("the project branch", tip), (who, old)), head,
                         blame=lambda at, path, line: _blamed(git, at, path, line, owners) if at == tip else "")
    if lost:
        raise _Undone(MergeResult(DROPPED, old, f"the merge of {branch} would drop what was added since the two "
                                                f"branches parted: {keeps.said(lost)}; it is not landed, and the "
                                                f"branch is kept as it was", lost=tuple(h.said() for h in lost)))


def _blamed(git: Git, at: str, path: str, line: int, owners: Mapping[str, str]) -> str:
    """The project branch's commit that added a line, in words, with its task when a merge
    brought it ("" when git cannot tell)."""
    done = git("blame", "--porcelain", "-L", f"{line},{line}", at, "--", path)
    if done.returncode != 0 or not done.text:
        return ""
    lines = done.text.splitlines()
    sha = lines[0].split(" ")[0]
    if owners.get(sha):
        return f"the task {owners[sha]!r} (its commit {sha[:10]} on the project branch)"
    summary = next((x[len("summary "):] for x in lines if x.startswith("summary ")), "")
    return f"the project branch's commit {sha[:10]} ({summary[:80]})"


def _checked(git: Git, cfg, tip: str, task: TaskRef, old: str, branch: str, target: str) -> tuple[dict, ...]:
    """The merged tree's checks (the task's `check:` line as the project branch lists it, and
    GENESIS_CHECK_CMD), run in the box; their evidence, or _Undone (TESTS_FAILED) when one failed."""
    tasks = _blob(git, f"{tip}:{TASKS_FILE}")
    command = mergecheck.check_of(tasks.decode("utf-8", "replace") if tasks is not None else None, task.text)
    runs = mergecheck.run_checks(git.cwd, cfg, command)
    if mergecheck.green(runs):
        return tuple(mergecheck.evidence(runs))
    why, tail = mergecheck.failure(runs)
    shown = "\n".join(tail) or "(no output)"
    raise _Undone(MergeResult(TESTS_FAILED, old, f"{why}, on {branch} replayed onto {target}; it is not landed, "
                                                 f"and the branch is kept as it was. Its output ends:\n{shown}",
                              checks=tuple(mergecheck.evidence(runs)), tail=tail))


def _green(runs: tuple[dict, ...]) -> str:
    return f", its checks passed ({len(runs)})" if runs else ""


def tasks_edit(text: str, task: TaskRef, state: str, reason: str = "") -> str | None:
    """TASKS.md's text with task set to state (DONE, or FAILED with reason); None when there is
    nothing to change (the task is not listed open or awaiting review: done already, failed, gone)."""
    lines = text.splitlines(keepends=True)
    found = [t for t in parse(text).items if t.text == task.text and t.state in (OPEN, REVIEW)]
    if not found:
        return None
    item = next((t for t in found if t.line == task.line), found[0])
    old = lines[item.line - 1]
    new = failed_line(old, reason) if state == FAILED else marked(old, state)
    if new is None or new == old:
        return None
    lines[item.line - 1] = new
    return "".join(lines)


def _tick(git: Git, tip: str, head: str, task: TaskRef) -> str:
    """head with one more commit giving TASKS.md as the project branch has it, the task ticked
    `[x]` (checked out, detached); head when it has that already."""
    text = _blob(git, f"{tip}:{TASKS_FILE}")
    if text is None:
        return head
    edited = tasks_edit(text.decode("utf-8", "replace"), task, DONE)
    return _checked_out(git, head, _with_tasks(git, head, text if edited is None else edited.encode("utf-8"),
                                               f"Genesis: task done: {task.text}"))


def _planned(git: Git, base: str, tip: str, old: str, head: str) -> str:
    """head with one more commit giving TASKS.md as the branch changed it, merged with the project
    branch's (three-way, from base); where the two collide (a tick next to a new task, say), the
    project branch's list stays as it is and the branch's new tasks are added at its end."""
    texts = [_blob(git, f"{ref}:{TASKS_FILE}") for ref in (base, tip, old)]
    if texts[2] is None or texts[1] is None:
        return head
    merged = _merge3(git, texts[0] or b"", texts[1], texts[2])
    return _checked_out(git, head, _with_tasks(git, head, merged, "Genesis: the Planner's tasks"))


def _checked_out(git: Git, head: str, sha: str) -> str:
    if sha != head:
        git.out("checkout", "-q", "--detach", sha)
    return sha


def _blob(git: Git, spec: str) -> bytes | None:
    shown = git("cat-file", "blob", spec)
    return shown.stdout if shown.returncode == 0 and len(shown.stdout) <= MAX_TASKS_BYTES else None


def _merge3(git: Git, base: bytes, ours: bytes, theirs: bytes) -> bytes:
    with tempfile.TemporaryDirectory() as scratch:
        names = []
        for name, data in (("ours", ours), ("base", base), ("theirs", theirs)):
            path = os.path.join(scratch, name)
            with open(path, "wb") as f:
                f.write(data)
            names.append(path)
        done = git("merge-file", "-p", "--quiet", *names)
    if done.returncode == 0:
        return done.stdout
    before = parse(base.decode("utf-8", "replace")).items
    have = {t.text for t in (*before, *parse(ours.decode("utf-8", "replace")).items)}
    lines = theirs.decode("utf-8", "replace").splitlines()
    added = [lines[t.line - 1] for t in parse(theirs.decode("utf-8", "replace")).items if t.text not in have]
    text = ours.decode("utf-8", "replace")
    if added:
        text += ("" if not text or text.endswith("\n") else "\n") + "".join(f"{line}\n" for line in added)
    return text.encode("utf-8")


def _with_tasks(git: Git, parent: str, data: bytes, message: str) -> str:
    """A commit on parent whose TASKS.md holds data, made without a work tree (plumbing, a
    private index), as Genesis; parent when its TASKS.md holds that already."""
    blob = git.out("hash-object", "-w", "--stdin", stdin=data)
    entry = git.out("ls-tree", parent, "--", TASKS_FILE)  # "<mode> blob <sha>\tTASKS.md", or nothing
    if entry and entry.split("\t", 1)[0].endswith(blob):
        return parent
    mode = entry.split(" ", 1)[0] if entry else "100644"
    with tempfile.TemporaryDirectory() as scratch:
        index = {"GIT_INDEX_FILE": os.path.join(scratch, "index")}
        git.out("read-tree", parent, env=index)
        git.out("update-index", "--add", "--cacheinfo", f"{mode},{blob},{TASKS_FILE}", env=index)
        tree = git.out("write-tree", env=index)
    trailer = ["-m", f"Genesis-Unsigned: {git.unsigned}"] if git.unsigned else []
    # commit-tree reads no commit.gpgsign: told to sign (-S) when the repository signs and that works
    return git.out("commit-tree", *(["-S"] if git.sign else []), tree, "-p", parent, "-m", message, *trailer,
                   identity=True)


def _advance(project: Path, target: str, old: str, new: str, hooks: bool) -> str | None:
    """Move target from old to new the safe way: None when moved; why not (held) otherwise;
    "" when target moved meanwhile (replay again)."""
    trees = listed(project)
    for info in trees:
        state = "" if info.prunable else _rebasing(info.path, target)
        if state:
            return state
    holders = [w for w in trees if w.branch == target and not w.prunable]
    if not holders:  # compare-and-swap: moved only if it is still where the replay started
        done = Git(Path(project))("update-ref", "-m", "genesis: fleet merge", f"refs/heads/{target}", new, old)
        return _known(project, target, new) if done.returncode == 0 else ""
    where = holders[0].path
    user = Git(where, hooks)
    changes = user_changes(where)
    if changes.changed or changes.unmerged:
        return (f"{where} has {target} checked out with uncommitted changes to tracked files "
                f"({_listing(list(changes.changed))}); {target} is left at {old[:10]} and nothing there is touched. "
                f"The work waits on the task's branch; it comes home at the next try once they are committed, "
                f"stashed or undone")
    if rev(user, "HEAD") != old:
        return ""
    kept = _in_the_way(user, old, new)
    if kept:
        return (f"{where} has {target} checked out with files git does not track where the merge brings files "
                f"of its own ({_listing(kept)}: ignored or untracked, which a fast-forward would overwrite); "
                f"{target} is left at {old[:10]} and nothing there is touched. The work waits on the task's "
                f"branch; it comes home at the next try once they are moved away (or committed)")
    done = user("merge", "-q", "--ff-only", "--no-edit", new)
    if done.returncode == 0:
        return _known(project, target, new)
    if rev(user, "HEAD") != old:
        return ""
    return (f"fast-forwarding {target} in {where} failed, so it stays at {old[:10]}: "
            f"{(done.stderr or done.text).strip()[-300:]}")


def guard_branch(project: Path, target: str, record: Callable[..., object],
                 alert: Callable[[Alert], object]) -> branchguard.Moved | None:
    """The project branch moved behind the merge queue's back (a child's `git update-ref`) put
    back (repo/branchguard.py) and said: a `branch_moved` event by record, the console, and a
    high alert; every driver of the fleet (the local monitor, the Temporal home) the same way.
    Not while a merge of ours is moving it (the caller's to know). A check git cannot make is
    said as a warning."""
    try:
        moved = branchguard.guard(project, target)
    except (GitFailed, OSError) as exc:
        say(f"cannot check {target} against the tip the fleet gave it: {exc}", "warn")
        return None
    if moved is not None:
        record("branch_moved", branch=moved.branch, known=moved.known, found=moved.found, kept=moved.kept,
               put_back=moved.put_back)
        say(moved.words(), "error")
        alert(Alert("cascade", "high", f"a child moved {moved.branch} behind the merge queue", moved.words(),
                    f"see what it was moved to with `git log {moved.kept}`; no merge builds on it"))
    return moved


def keep_start(project: Path, target: str) -> None:
    """The project branch's tip at the fleet's start kept as its known tip (repo/branchguard.py):
    a child moving it from there is put back; one git cannot keep is said as a warning."""
    try:
        branchguard.remember(project, target)
    except (GitFailed, OSError) as exc:
        say(f"cannot keep the tip of {target} the fleet starts from: {exc}; a child moving it would "
            f"not be put back", "warn")


def _known(project: Path, target: str, new: str) -> None:
    """new is the project branch's known tip: a move by anyone else is put back (repo/branchguard.py)."""
    try:
        branchguard.remember(project, target, new)
    except (GitFailed, OSError):
        pass  # the next check takes the tip as it finds it
    return None


def _in_the_way(user: Git, old: str, new: str) -> list[str]:
    """The files in user's work tree, untracked or ignored there, that moving it from old to new
    would overwrite: git refuses to for an untracked file but counts an ignored one (the user's
    own `.env`, say) as expendable. A path new adds, or a folder on its way, that is on disk as
    something old does not track."""
    diff = user("diff", "--name-status", "--no-renames", "-z", old, new)
    if diff.returncode != 0:
        raise GitFailed(f"`git diff {old[:10]} {new[:10]}` failed in {user.cwd}: {diff.stderr[-300:]}")
    fields = [os.fsdecode(f) for f in diff.stdout.split(b"\0")]
    changes = list(zip(fields[0::2], fields[1::2]))
    gone = {path for status, path in changes if status == "D"}  # files of old that new replaces, by a folder say
    found: dict[str, None] = {}
    for status, path in changes:
        if status != "A":
            continue
        parts = path.split("/")
        for n in range(1, len(parts) + 1):
            here = "/".join(parts[:n])
            full = os.path.join(user.cwd, here)
            last = n == len(parts)
            # A folder on the way that is a file or a symlink (never followed), or the path itself
            if os.path.islink(full) or (os.path.lexists(full) and (last or not os.path.isdir(full))):
                if here not in gone:
                    found[here] = None
                break
            if not os.path.lexists(full):
                break
    if not found:
        return []
    # Confirmed by git: what it does not track there (a folder in the way: only when it holds such files).
    others = user("ls-files", "-z", "--others", "--", *found, env={"GIT_LITERAL_PATHSPECS": "1"})
    if others.returncode != 0:
        raise GitFailed(f"`git ls-files --others` failed in {user.cwd}: {others.stderr[-300:]}")
    hit: set[str] = set()
    for entry in others.stdout.split(b"\0"):
        parts = os.fsdecode(entry).split("/") if entry else []
        hit.update(p for p in ("/".join(parts[:n]) for n in range(1, len(parts) + 1)) if p in found)
    return [p for p in found if p in hit]


def _rebasing(work_tree: Path, target: str) -> str:
    """Why target must not move under this work tree: a rebase of it in progress there."""
    try:
        gitdir = Git(work_tree).out("rev-parse", "--absolute-git-dir")
    except (GitFailed, OSError):
        return ""
    for name in ("rebase-merge", "rebase-apply"):
        try:
            with open(os.path.join(gitdir, name, "head-name"), "rb") as f:
                head = f.read(4096).decode("utf-8", "replace").strip()
        except OSError:
            continue
        if head == f"refs/heads/{target}":
            return f"{target} is being rebased in {work_tree}; it is not moved under the rebase"
    return ""


def _pushed(git: Git, branch: str, target: str) -> str:
    """Push the rebased branch, under its own name, to the remote the project branch pushes to
    (as a plain `git push` there would choose it); what happened. A rebased branch replaces
    the one pushed before, unless someone else pushed to it meanwhile (--force-with-lease)."""
    def setting(key: str) -> str:
        return git("config", "--get", key).text.strip()

    remote = setting(f"branch.{target}.pushRemote") or setting("remote.pushDefault") or \
        setting(f"branch.{target}.remote")
    if not remote or remote == ".":
        return (f"{branch} rebased onto {target} and kept for review; not pushed: {target} has no remote to push to "
                f"(set one once with `git push -u origin {target}`)")
    done = git("push", "-q", "--no-follow-tags", f"--force-with-lease=refs/heads/{branch}", remote,
               f"refs/heads/{branch}:refs/heads/{branch}")
    if done.returncode != 0:
        why = (done.stderr or done.text).strip()[-300:]
        return f"{branch} rebased onto {target} and kept for review; git push failed: {why}"
    return f"{branch} rebased onto {target}, kept for review and pushed to {remote}"


def mark_failed(project: Path, target: str, task: TaskRef, reason: str, *, hooks: bool = False) -> str:
    """Mark the task failed on the project branch: `- [!] text (failed: reason)`, in a commit by
    Genesis moved in as merges are. The project branch's tip then ("" when held: the user's
    checkout of it has uncommitted changes; try again later). Nothing to mark (already marked,
    or gone from the list): the tip as it is. GitFailed when git cannot do it at all."""
    git = _git(Path(project), Path(project), hooks)
    for _ in range(ROUNDS):
        tip = rev(git, f"refs/heads/{target}")
        if not tip:
            raise GitFailed(f"the project branch {target} does not exist in {project}; the task is not marked")
        text = _blob(git, f"{tip}:{TASKS_FILE}")
        edited = None if text is None else tasks_edit(text.decode("utf-8", "replace"), task, FAILED, reason)
        if edited is None:
            return tip
        sha = _with_tasks(git, tip, edited.encode("utf-8"), f"Genesis: task failed: {task.text}\n\n{reason}")
        moved = _advance(Path(project), target, tip, sha, hooks)
        if moved is None:
            return sha
        if moved:
            return ""
    return ""


def _listing(paths: list[str] | tuple[str, ...], most: int = 5) -> str:
    return ", ".join(paths[:most]) + (f" and {len(paths) - most} more" if len(paths) > most else "")

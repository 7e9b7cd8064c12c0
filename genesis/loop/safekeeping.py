"""The user's data kept from git: safety refs at the run's and each phase's start, the
untracked and ignored files copied aside at the start, and after each phase what it did to
history, named in the ledger (which raises the alert) and on the console, and the loop
stopped unless GENESIS_ALLOW_HISTORY_REWRITE says otherwise.

A fleet's child answers for its own task branch alone among the fleet's: the merge queue moving
the other tasks' branches meanwhile is not this child's history (_fleet_scoped).
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from genesis import exitcodes
from genesis.hints import hint
from genesis.loop.step import Step, StepFailed
from genesis.repo import refstore, safety, untracked
from genesis.repo.gitcmd import GitFailed, run_git
from genesis.repo.history import Change, changes, describe, pushed
from genesis.repo.ownership import user_files
from genesis.repo.safety import Tips
from genesis.store.atomicio import CorruptFile, DiskFull, read_json, write_json
from genesis.store.layout import Layout
from genesis.store.looplock import current_holder

__all__ = ["keep_at_start", "keep_at_phase", "history_of", "kept_after", "stop_for", "orphaning"]

MAX_WORKTREES = 512  # worktrees of the repository whose loop locks are asked before pruning, at most


def keep_at_start(step: Step) -> None:
    """Safety refs of every branch and HEAD, the user's untracked and ignored files copied aside,
    older runs' refs and copies pruned. Refs that cannot be written refuse the start: without
    them a rewrite could not be undone."""
    cfg, lay, say = step.cfg, step.layout, step.say
    try:
        tips = safety.read_tips(cfg.project)
        refs = safety.keep_run(cfg.project, step.run_id, tips)
        write_json(lay.safety_record, {"run_id": step.run_id, "tips": tips.to_json()})
    except DiskFull:
        raise
    except (GitFailed, OSError) as exc:
        raise StepFailed(exitcodes.USAGE, f"cannot write the safety refs that keep every branch as the run "
                         f"starts ({exc}); check that `git update-ref` works there") from None
    stored = _copied(step, safety.run_prefix(step.run_id), tips, everything=True)
    try:  # housekeeping: a loop of another worktree pruning at the same moment holds the refs' locks
        live = _live_runs(cfg.project)
        pruned = safety.prune(cfg.project, step.run_id, live=live) if live is not None else []
    except (GitFailed, OSError) as exc:
        say(f"older runs' safety refs were not pruned this time ({exc}); the next start tries again", "warn")
        pruned = []
    if pruned:
        step.event("safety_pruned", runs=pruned)
    try:
        found = list(user_files(lay.user_files)) + untracked.ignored_files(cfg.project, lay.ignored())
        lay.untracked_copies.mkdir(mode=0o700, parents=True, exist_ok=True)
        copy = untracked.copy_aside(cfg.project, found, lay.untracked_copies / step.run_id, cfg.untracked_copy_max)
        untracked.prune(lay.untracked_copies, step.run_id)
    except DiskFull:
        raise
    except (GitFailed, OSError) as exc:
        say(f"could not copy your untracked files aside ({exc}); `git clean` by an agent could not be undone "
            f"by `{hint(cfg.project, 'restore', '--untracked')}`", "warn")
        step.event("safety_kept", prefix=safety.run_prefix(step.run_id), refs=len(refs), copied=0,
                   error=str(exc)[:300])
        return
    note = f"; {len(copy.skipped)} not copied (see `{hint(cfg.project, 'restore')}`)" if copy.skipped else ""
    say(f"your data: {len(refs)} safety ref(s) under {safety.run_prefix(step.run_id)}{stored}, "
        f"{len(copy.copied)} untracked or ignored file(s) copied aside ({copy.size >> 10} KiB, "
        f"cap {cfg.untracked_copy_max / (1 << 20):g} MB){note}",
        "info")
    step.event("safety_kept", prefix=safety.run_prefix(step.run_id), refs=len(refs), copied=len(copy.copied),
               size=copy.size, skipped=[{"path": p, "why": w} for p, w in copy.skipped[:50]])


def _copied(step: Step, prefix: str, tips: Tips, everything: bool) -> str:
    """The refs under prefix copied into Genesis's store (repo/refstore.py), where a reset, a
    deletion of the refs and a gc in one phase cannot reach their commits; said when it cannot."""
    try:
        safety.copy(step.cfg.project, prefix, tips, everything)
    except (GitFailed, OSError) as exc:
        step.say(f"the safety refs under {prefix} are not copied to Genesis's own store ({exc}); the refs in the "
                 f"repository still keep their commits, unless the agent deletes them", "warn")
        step.event("safety_store_failed", prefix=prefix, error=str(exc)[:300])
        return ""
    return " (and in Genesis's own store)"


def _live_runs(project: Path) -> frozenset[str] | None:
    """The runs going now in any worktree of the project's repository (the refs are the whole
    repository's, the loops its worktrees'): each one's loop lock asked. None when one is held
    by a run that cannot be named (then nothing is pruned)."""
    done = run_git(project, ["rev-parse", "--git-common-dir"], timeout=safety.GIT_BOUND)
    if done.returncode != 0 or not done.text.strip():
        raise GitFailed(f"git rev-parse --git-common-dir failed in {project}: {done.stderr or 'no answer'}")
    common = project / done.text.strip()  # relative to the project, or absolute
    states = [common / "genesis"]
    try:
        with os.scandir(common / "worktrees") as entries:
            states += [Path(e.path) / "genesis" for n, e in enumerate(entries) if n < MAX_WORKTREES]
    except OSError:
        pass
    live = set()
    for state in states:
        lay = Layout(project, project, project, state)  # only its state's lock and record are read
        holder = current_holder(lay.loop_lock, lay.loop_record)
        if holder is not None:
            if not holder.run_id:
                return None
            live.add(holder.run_id)
    return frozenset(live)


def keep_at_phase(step: Step, iteration: int, phase: str) -> Tips | None:
    """HEAD and its branch as the phase starts, kept by refs and returned (the phase's step holds
    them: the agent cannot move what they are judged by); a failure is said, the phase goes on."""
    try:
        tips = safety.read_tips(step.cfg.project)
        safety.keep_phase(step.cfg.project, step.run_id, iteration, phase, tips)
    except (GitFailed, OSError) as exc:
        step.say(f"{phase}: could not write its safety refs ({exc}); the run's still keep every branch", "warn")
        return None
    own = {tips.branch: tips.branches[tips.branch]} if tips.branch in tips.branches else {}
    _copied(step, safety.phase_prefix(step.run_id, iteration, phase), tips, everything=False)
    return Tips(tips.head, tips.branch, own, tips.remotes)


def _started(step: Step) -> Tips:
    """The tips the run started with, as recorded in private state (else as its refs say)."""
    try:
        record = read_json(step.layout.safety_record)
    except (CorruptFile, OSError):
        record = None
    if isinstance(record, dict) and record.get("run_id") == step.run_id:
        tips = Tips.from_json(record.get("tips"))
        if tips is not None:
            return tips
    return safety.kept(step.cfg.project, safety.run_prefix(step.run_id))


def _repaired(step: Step, phase: str, prefix: str, tips: Tips) -> tuple[Tips, list[Change]]:
    """The safety refs under prefix put back where the agent deleted or moved them; the tips
    whose commits git has pruned since are taken out, each a change of its own."""
    fixed, gone = safety.repair(step.cfg.project, prefix, tips)
    if fixed:
        step.say(f"{phase}: safety refs deleted or moved by the agent were put back: {', '.join(fixed[:5])}", "warn")
        step.event("safety_refs_repaired", phase=phase, refs=fixed[:50])
    lost = []
    branches, head = dict(tips.branches), tips.head
    for ref in gone:
        name = ref[len(prefix) + 1:]
        if name == "HEAD":
            branch, sha, head = "", tips.head, None
        else:
            branch = name[len("heads/"):]
            sha = branches.pop(branch, None)
        lost.append(Change("lost", branch, ((sha or "?")[:7],), 1, ref))
    return Tips(head, tips.branch if tips.branch in branches else None, branches), lost


def history_of(step: Step, iteration: int, phase: str, at_start: Tips | None = None) -> list[Change]:
    """What the phase did to history that no earlier phase of the run was already reported for.

    at_start: HEAD and its branch when the phase started (keep_at_phase); without them, as the
    phase's refs say."""
    project = step.cfg.project
    run_ref, phase_ref = safety.run_prefix(step.run_id), safety.phase_prefix(step.run_id, iteration, phase)
    try:
        run_tips, lost = _repaired(step, phase, run_ref, _started(step))
        phase_tips, also = _repaired(step, phase, phase_ref, at_start or safety.kept(project, phase_ref))
        pruned = list({(c.branch, c.lost): c for c in lost + also}.values())  # one per commit and branch
        own = phase_tips.branch or run_tips.branch
        now = safety.read_tips(project)
        found = pruned + changes(project, _fleet_scoped(run_tips, own), _fleet_scoped(phase_tips, own),
                                 _fleet_scoped(now, own), run_ref, phase_ref)
        found += pushed(project, at_start.remotes if at_start else {}, now.remotes, phase_ref)
    except (GitFailed, OSError) as exc:
        step.say(f"{phase}: cannot tell what it did to history ({exc})", "warn")
        return []
    told = {(c.get("kind"), c.get("branch"), c.get("ref")) for e in step.events(kinds=("history_rewritten",))
            for c in e.get("changes") or [] if isinstance(c, dict) and str(c.get("ref", "")).startswith(
                safety.run_prefix(step.run_id))}
    return [c for c in found if (c.kind, c.branch, c.ref) not in told]


FLEET_BRANCHES = ("genesis/task/", "genesis/plan/")  # fleet/taskref.py's, and the Planner's


def _fleet_scoped(tips: Tips, own: str | None) -> Tips:
    """A fleet's child (its branch is one of the fleet's) answers for its own branch alone among
    the fleet's: the monitor's merge queue replays and prunes the other tasks' branches while it
    runs. The user's branches are watched as ever (the project branch only moves forward)."""
    if not own or not own.startswith(FLEET_BRANCHES):
        return tips
    return Tips(tips.head, tips.branch, {name: sha for name, sha in tips.branches.items()
                                         if name == own or not name.startswith(FLEET_BRANCHES)})


def orphaning(found: list[Change]) -> bool:
    """Whether commits made now land off the phase's branch (a switch or a detached HEAD)."""
    return any(c.kind in ("switched", "detached") for c in found)


def kept_after(step: Step, iteration: int, phase: str) -> None:
    """HEAD after the phase's commit kept by a ref, so that work on no branch is not lost."""
    try:
        head = safety.read_tips(step.cfg.project).head
        if head:
            ref = safety.keep_after(step.cfg.project, step.run_id, iteration, phase, head)
            refstore.keep(step.cfg.project, {ref: head})
    except (GitFailed, OSError) as exc:
        step.say(f"{phase}: could not keep HEAD after its commit ({exc})", "warn")


def stop_for(step: Step, iteration: int, phase: str, found: list[Change]) -> int | None:
    """Record and say what the phase did to history; the exit code that stops the loop, or None."""
    if not found:
        return None
    allowed = step.cfg.allow_history_rewrite
    project = shlex.quote(str(step.cfg.project))
    for change in found:
        step.say(f"{phase}: {describe(change)}", "error" if not allowed else "warn")
    step.event("history_rewritten", iteration=iteration, phase=phase, allowed=allowed,
               changes=[c.to_json() for c in found])
    back = (f"get it back with `{hint(step.cfg.project, 'restore')}` (it lists what each safety ref keeps) or "
            f"plain git, e.g. `git -C {project} branch -f BRANCH REF`")
    if allowed:
        step.say(f"{phase}: GENESIS_ALLOW_HISTORY_REWRITE=true: the loop goes on, and this does not count as "
                 f"progress; {back}", "warn")
        return None
    reason = (f"{phase} (iteration {iteration}) changed history: "
              + "; ".join(describe(c) for c in found)[:1500]
              + f". Not allowed (GENESIS_ALLOW_HISTORY_REWRITE=false): the loop stops; {back}")
    step.say(reason, "error")
    step.event("stop_reason", code=exitcodes.HISTORY_REWRITTEN, reason=reason)
    return exitcodes.HISTORY_REWRITTEN

"""A task's evidence: after a phase that ticked a task `[x]`, Genesis runs its checks itself,
records them, and reopens a claim they do not bear out (loop/claims.py says what counts).

The checks run the way the agent runs: by bash, in the project, in the agent's box, with the
agent's environment, bounded in time (GENESIS_CHECK_TIMEOUT, killed with everything they
started) and in output (only its tail is kept, made safe and redacted). A task's check is the
`check:` line it had when the phase started: an agent that rewrites or removes it has not
changed what its claim is checked against. A reopening is Genesis's own edit of TASKS.md (the
box set back, a `Genesis:` note under it), committed alone; the next attempt's prompt gives
the failed check's tail (notes_for_prompt), as it gives the note of a task sent back for more
work (`genesis send-back`: a `note:` line under it).
"""

from __future__ import annotations

import signal
import time
from typing import Iterable, Mapping, Sequence

from genesis.ledger.store import Ledger, LedgerError
from genesis.loop.claims import (EVIDENCE_EVENT, FAILED, REOPENED_EVENT, CheckRun, Verdict, evidence_of, judge,
                                 unproven)
from genesis.loop.sandboxing import box_for
from genesis.loop.step import Step, StepFailed, agent_env, ledger_of
from genesis.procs.bounded import run_bounded
from genesis.procs.markers import markers_for
from genesis.repo.autocommit import commit
from genesis.repo.phasework import Before
from genesis.repo.signing import unsigned_for
from genesis.repo.tasks import DONE, OPEN, TASKS_FILE, Tasks, read_tasks, reopened, same_text
from genesis.sandbox.network import serving
from genesis.store.atomicio import write_text
from genesis.store.layout import Layout
from genesis.watch.evidence import tail_of
from genesis.when import stamp
from genesis.words import one_line

__all__ = ["after_phase", "done_gate", "notes_for_prompt", "proven", "OUTPUT_KEEP", "TAIL_LINES", "TAIL_BYTES"]

OUTPUT_KEEP = 64 << 10   # bytes of a check's output kept while it runs (its end: the rest is dropped)
TAIL_LINES = 20          # lines of it kept as evidence
TAIL_BYTES = 1500        # bytes of them at most (an event's value stays whole in the ledger)
PROMPT_TASKS = 5         # reopened tasks whose failure a prompt tells at most
GATE = "Genesis"         # who runs the checks of a tick that has none recorded, at the done rule


def after_phase(step: Step, phase: str, iteration: int, start: Before) -> None:
    """Every task the phase ticked `[x]`: its checks run, its evidence recorded, and the claim
    reopened where the evidence does not bear it out."""
    tasks = read_tasks(step.cfg.project)
    if tasks is None:
        return
    claimed: dict[str, str] = {}
    for t in tasks.items:
        if t.state == DONE and t.text and t.text not in start.done and t.text not in claimed:
            claimed[t.text] = t.check
    if claimed:
        _verify(step, phase, iteration, claimed, start.checks, [p.name for p in step.cfg.phases])


def _verify(step: Step, phase: str, iteration: int, claimed: Mapping[str, str], checks: Iterable[tuple[str, str]],
            phases: Sequence[str]) -> int:
    """The claimed tasks' checks run (`checks`: the ones they had before the claim, which win),
    their evidence recorded, the refuted ones reopened; how many were."""
    env = agent_env(step, phase, iteration)
    project_run = _run(step, "project", step.cfg.check_cmd, env) if step.cfg.check_cmd else None
    pinned = {" ".join(t.split()): c for t, c in checks}  # a respaced task is the same task
    back: list[tuple[str, Verdict]] = []
    for text, now in claimed.items():
        command = pinned.get(" ".join(text.split()), now)
        if now != command:
            step.say(f"{phase} changed the check of {text!r}; the one it had when the phase started is run", "warn")
        runs = [r for r in (_run(step, "task", command, env) if command else None, project_run) if r is not None]
        verdict = judge(runs, phase, phases)
        shown = next((r for r in runs if not r.passed), runs[-1] if runs else None)
        step.event(EVIDENCE_EVENT, iteration=iteration, phase=phase, task=text, outcome=verdict.outcome,
                   why=verdict.why[:1000], back_to=verdict.back_to, checks=[r.to_json() for r in runs],
                   tail=list(shown.tail) if shown else [])
        step.say(f"{phase}: task {text!r}: {verdict.said()}", "ok" if verdict.back_to is None else "warn")
        if verdict.back_to is not None:
            back.append((text, verdict))
    if back:
        _reopen(step, phase, iteration, back)
    return len(back)


def _run(step: Step, kind: str, command: str, env: Mapping[str, str]) -> CheckRun:
    """One check, run by bash in the project, in the agent's box, within its bounds."""
    argv = ("bash", "-c", command)
    try:
        box = box_for(step, argv, env)
    except StepFailed as exc:  # the box cannot run: no check runs unboxed
        return CheckRun(kind, command, None, 0.0, error=str(exc))

    def in_child() -> None:
        signal.pthread_sigmask(signal.SIG_SETMASK, set())  # the watcher's blocked stop signals are not the check's
        box.in_child()

    with serving(box) as (served, _proxy):  # the allow-list's proxy for the check too
        ran = run_bounded(served.wrap(argv), step.cfg.project, {**env, **served.proxy_env()}, step.cfg.check_timeout,
                          OUTPUT_KEEP, preexec=in_child)
    tail = tail_of(ran.output.decode("utf-8", "replace"), TAIL_LINES, TAIL_BYTES, env)
    return CheckRun(kind, command, ran.exit_code, ran.seconds, tuple(tail), ran.timed_out, ran.error)


def _reopen(step: Step, phase: str, iteration: int, back: list[tuple[str, Verdict]]) -> None:
    """TASKS.md with each task set back and noted, written and committed alone, as Genesis's."""
    cfg, lay = step.cfg, step.layout
    path = cfg.project / TASKS_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        step.say(f"cannot reopen {len(back)} task(s): {TASKS_FILE} cannot be read ({exc}); they do not count "
                 f"as done", "error")
        return
    counts: dict[str, int] = {}
    for e in step.events(kinds=(REOPENED_EVENT,)):
        counts[str(e.get("task"))] = counts.get(str(e.get("task")), 0) + 1
    for task, verdict in back:
        when = stamp(time.time())
        note = (f"reopened {when}: {verdict.why}" if verdict.back_to == OPEN
                else f"sent back for review {when}: {verdict.why}")
        edited = reopened(text, task, verdict.back_to or OPEN, note[:300])
        if edited is None:
            continue
        text = edited
        counts[task] = counts.get(task, 0) + 1
        step.event(REOPENED_EVENT, iteration=iteration, phase=phase, task=task, to=verdict.back_to,
                   outcome=verdict.outcome, count=counts[task])
    try:
        write_text(path, text)
    except OSError as exc:
        step.say(f"cannot write {TASKS_FILE} to reopen its tasks ({exc}); they do not count as done", "error")
        return
    if not cfg.auto_commit:
        step.say(f"{TASKS_FILE}: {len(back)} task(s) reopened, left uncommitted (AUTO_COMMIT is off)", "warn")
        return
    names = "; ".join(task for task, _ in back)
    result = commit(cfg.project, f"genesis: reopen what {phase} ticked without evidence (iteration {iteration}): "
                                 f"{names}"[:200], lay.ignored(), cfg.auto_push, only=[TASKS_FILE],
                    markers=markers_for(cfg.project, step.run_id), run_hooks=cfg.git_hooks,
                    unsigned=unsigned_for(cfg.project, lay.state_dir, step.run_id))
    if result.error:
        step.say(f"{TASKS_FILE}: the reopening could not be committed ({result.error}); the tasks do not count "
                 f"as done", "warn")
    elif result.committed:
        step.say(f"{TASKS_FILE}: reopened {len(back)} task(s), committed {result.sha}", "info")


def done_gate(step: Step, done: bool, why: str, task: str | None, iteration: int) -> tuple[bool, str]:
    """The done rule's last word: no task an agent ticked counts as done without accepted evidence
    recorded after its tick, in any run of this ledger. A tick whose evidence was never gathered
    (its loop stopped between the tick and its checks) or whose reopening could not be written
    has its checks run now, by Genesis (GATE); one they refute is reopened and the work is not done."""
    if not done:
        return done, why
    tasks = read_tasks(step.cfg.project)
    ticked = {t.text: t.check for t in (tasks.items if tasks is not None else ())
              if t.state == DONE and t.text and (not task or same_text(t.text, task))}
    events = _claims(step)
    if events is None:
        return False, "the ledger cannot be read, so no task's evidence can be"
    left = unproven(events, ticked)
    if not left:
        return done, why
    step.say(f"{len(left)} task(s) ticked done have no evidence yet (the loop stopped between a tick and its checks, "
             f"or a reopening could not be written): their checks run now", "warn")
    reopened_now = _verify(step, GATE, iteration, {t: ticked[t] for t in left}, (), ())
    if reopened_now:
        return False, f"{reopened_now} task(s) ticked done were reopened: their checks failed"
    events = _claims(step)
    left = unproven(events, ticked) if events is not None else left
    if left:
        return False, (f"{len(left)} task(s) ticked done without evidence that bears it out: "
                       + "; ".join(repr(t) for t in left[:3]))
    return done, why


def _claims(step: Step) -> list[dict] | None:
    """The ticks and the evidence of every run this ledger holds, oldest first; None unreadable."""
    try:
        return ledger_of(step.layout).events(kinds=("phase_work", EVIDENCE_EVENT))
    except LedgerError:
        return None


def notes_for_prompt(step: Step) -> str:
    """What the next attempt is told: each open task whose last claim a check refuted, with the
    check and the last lines of its output, and each open task sent back with a note ("" for none)."""
    tasks = read_tasks(step.cfg.project)
    if tasks is None:
        return ""
    return _refuted(step, tasks) + _sent_back(tasks)


def _refuted(step: Step, tasks: Tasks) -> str:
    latest = evidence_of(step.events(kinds=(EVIDENCE_EVENT,)))
    notes = []
    for t in tasks.items:
        if t.state != OPEN or len(notes) >= PROMPT_TASKS:
            continue
        e = latest.get(" ".join(t.text.split()))
        if e is None or e.get("outcome") != FAILED:
            continue
        tail = "\n".join(f"    {line}" for line in e.get("tail") or [])
        notes.append(f"- {t.text}\n  It was ticked done, but its check failed: {one_line(str(e.get('why', '')))}\n"
                     f"  The last lines of the check's output:\n{tail or '    (no output)'}")
    if not notes:
        return ""
    return (f"Genesis ran the checks of these {TASKS_FILE} tasks after they were ticked done, and reopened "
            f"them because a check failed. A task is done only when its checks pass:\n\n" + "\n".join(notes)
            + "\n\n---\n\n")


def _sent_back(tasks: Tasks) -> str:
    notes = [f"- {t.text}\n  The note: {one_line(t.note, None)}" for t in tasks.items if t.state == OPEN and t.note]
    if not notes:
        return ""
    return (f"These {TASKS_FILE} tasks were reviewed and sent back for more work, each with a note (the "
            f"`note:` line under it) saying what to do differently. Do what the note says:\n\n"
            + "\n".join(notes[:PROMPT_TASKS]) + "\n\n---\n\n")


def proven(layout: Layout | None, task: str) -> tuple[bool, str]:
    """Whether a loop's own ledger bears out its one task's `[x]` (a fleet's child, read by its
    monitor): no claim of it without accepted evidence after. An unreadable ledger proves nothing."""
    if layout is None:
        return False, "its loop's ledger is unknown"
    try:
        with Ledger.open(layout.ledger_file, readonly=True) as led:
            events = led.events(kinds=("phase_work", EVIDENCE_EVENT))
    except (LedgerError, OSError) as exc:
        return False, f"its loop's ledger cannot be read ({exc})"
    if not any(same_text(t, task) for e in events if e.get("event") == "phase_work" for t in e.get("tasks_done") or ()):
        return False, "no phase of its loop ticked it done"
    if unproven(events, [task]):
        return False, "it was ticked done without evidence that bears it out"
    return True, "its evidence bears it out"

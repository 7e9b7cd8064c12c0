"""How a phase ended: one word for it, what the agent reported, what is said and recorded, and
the commit message of its work."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from genesis.agents.base import PERMISSION_REFUSED, REFUSAL
from genesis.loop.step import Step
from genesis.phases import DoneRule, Phase
from genesis.watch.evidence import transcript_tail
from genesis.watch.supervisor import Outcome
from genesis.words import LABELS, sanitize

__all__ = ["how_it_ended", "said_done", "reported", "describe", "commit_message"]

CONSOLE_LINES = 12  # of a killed agent's evidence, said on the console


def how_it_ended(outcome: Outcome) -> str:
    """One word for the phase's end: finished, failed, limit, outage, fatal, or the watcher's status."""
    end = outcome.ending
    if outcome.status == "api_fatal":  # ended by Genesis: the API refuses what retrying cannot fix soon
        return "limit" if end is not None and end.limit is not None else "fatal"
    if outcome.status not in ("exited", "done"):  # done: its result written, ended as it did not exit
        return outcome.status
    if end is not None and end.limit is not None:
        return "limit"
    if end is not None and end.api_error is not None:
        if end.api_error.code == REFUSAL:
            return "refused"
        return "outage" if end.api_error.retryable else "fatal"
    return "finished" if outcome.returncode == 0 or outcome.status == "done" else "failed"


def said_done(rule: DoneRule, outcome: Outcome) -> bool:
    """Whether the agent's final result holds the completion phrase (never its echoed text)."""
    end = outcome.ending
    return (rule.kind == "phrase" and outcome.status in ("exited", "done") and end is not None
            and rule.text in end.final_text)


def reported(outcome: Outcome) -> dict:
    """What the agent reported of its run, for the ledger and the report."""
    end = outcome.ending
    result = end.result if end is not None else None
    return {
        "num_turns": result.num_turns if result else None,
        "cost_usd": result.total_cost_usd if result else None,
        "input_tokens": result.input_tokens if result else None,
        "output_tokens": result.output_tokens if result else None,
        "is_error": result.is_error if result else None,
        "terminal_reason": (result.terminal_reason or None) if result else None,
        "api_error_status": result.api_error_status if result else None,
        "session_id": (result.session_id or None) if result else None,
        "model_used": (result.model or None) if result else None,
        "result": (result.text[:500] or None) if result else None,
        "limit": asdict(end.limit) if end is not None and end.limit is not None else None,
        "api_error": asdict(end.api_error) if end is not None and end.api_error is not None else None,
        "capped": outcome.capped or None,
    }


def describe(step: Step, phase: Phase, outcome: Outcome, log: Path, ending: str,
             lines: list[str] | None = None) -> str:
    """Say how the phase ended; return the reason the ledger and the report keep. `lines`: the
    attempt's evidence as recorded with its end (read from its log when not given)."""
    say, took = step.say, f"{outcome.duration:.0f}s"
    lines = transcript_tail(log) if lines is None else lines
    result = outcome.ending.result if outcome.ending is not None else None
    cost = (f", {result.num_turns} turns" if result and result.num_turns is not None else "") + \
        (f", ${result.total_cost_usd:.4f}" if result and result.total_cost_usd is not None else "")
    if ending == "finished" and outcome.status == "done":
        say(f"{phase.name}: finished in {took}{cost}; {outcome.detail}", "ok")
        return outcome.detail
    if ending == "finished":
        say(f"{phase.name}: finished in {took}{cost}" + (f" ({outcome.capped})" if outcome.capped else ""),
            "warn" if outcome.capped else "ok")
        return f"finished; {outcome.capped}" if outcome.capped else "finished"
    if ending in ("limit", "outage", "fatal", "refused") and outcome.ending is not None:
        end = outcome.ending
        message = end.limit.message if end.limit is not None else end.api_error.message
        refused = end.api_error is not None and end.api_error.code == PERMISSION_REFUSED
        # A refused permission is no error of the API's: its message says what and the fix, then the CLI's words.
        detail = sanitize(message, 600) if refused else f"{LABELS[ending]}: {sanitize(message)}"
        say(f"{phase.name}: {detail} (after {took}; see {step.rel(log)})", "warn")
        return detail
    if outcome.status == "exited":
        last = lines[-1] if lines else ""
        detail = f"the agent exited with status {outcome.returncode}" + (f"; its last line: {last}" if last else "")
        detail = f"{outcome.capped}; {detail}" if outcome.capped else detail
        say(f"{phase.name}: {detail} (after {took}; see {step.rel(log)})", "warn")
        return detail
    if outcome.status == "not_started":
        say(f"{phase.name}: {outcome.detail}", "error")
        return outcome.detail
    kill = outcome.kill
    killed = f"; killed {kill.targets} process(es), {kill.killed} with SIGKILL" if kill else ""
    label = LABELS.get(outcome.status, outcome.status)
    detail = f"{outcome.detail}; {outcome.capped}" if outcome.capped else outcome.detail
    say(f"{phase.name}: {label}: {detail}{killed}", "error" if outcome.status != "interrupted" else "warn")
    if outcome.status != "interrupted":
        for line in lines[-CONSOLE_LINES:]:
            say(f"  | {line}", "info")
    return detail


def commit_message(phase: str, iteration: int, run_id: str, outcome: Outcome) -> str:
    """Names the run and how the phase ended; work of an agent that did not finish is partial."""
    if outcome.status == "done" or (outcome.status == "exited" and outcome.returncode == 0):
        how = "finished"
    elif outcome.status == "exited":
        how = f"ended: exit {outcome.returncode}; partial work"
    else:
        how = f"ended: {LABELS.get(outcome.status, outcome.status)}, killed; partial work"
    return f"genesis: {phase}, iteration {iteration} ({how}) [run {run_id}]"

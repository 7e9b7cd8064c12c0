"""Configuration: defaults < project file < environment < flags, validated in one place."""

from __future__ import annotations

import difflib
import os
import re
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from genesis.agents import UnknownCli, adapter_named
from genesis.alerts.settings import DURATIONS as ALERT_DURATIONS
from genesis.alerts.settings import KNOBS as ALERT_KNOBS
from genesis.alerts.settings import PREFIX as ALERT_PREFIX
from genesis.alerts.settings import AlertSettings
from genesis.alerts.settings import misspelt as misspelt_alert
from genesis.alerts.settings import parse as parse_alerts
from genesis.alerts.settings import refusal as alert_refusal
from genesis.durations import seconds as duration_seconds
from genesis.durations import unit_of, with_unit, written
from genesis.health.doomloop import DoomLimits
from genesis.hints import hint
from genesis.phases import BUILTIN_PROMPTS, NAME_RE, DoneRule, Phase, Trigger, parse_done_rule, parse_trigger
from genesis.procs.memory import auto_cap, parse_size
from genesis.repo.phasekeys import check_key
from genesis.sandbox.box import CHOICES as SANDBOX_CHOICES
from genesis.sandbox.allowlist import AllowlistError, Entry, parse_entries
from genesis.sandbox.box import NETWORKS
from genesis.sandbox.home import AllowError, Allowed, parse_allow
from genesis.store.atomicio import CorruptFile, TooLarge, quarantine, read_bytes, read_json
from genesis.store.layout import Layout, state_dir_of

__all__ = ["load_snapshot", "ConfigError", "Config", "Knob", "KNOBS", "CONFIG_FILE", "MAX_CONFIG_BYTES",
           "MAX_VALUE_CHARS", "MAX_PROMPT_BYTES", "advice", "closest", "read_prompt", "resolve", "layout_for",
           "default_layout"]

CONFIG_FILE = "orchestrator/genesis.conf"
RANKS = {"default": 0, "file": 1, "env": 2, "flag": 3}
# Sizes far beyond any real setting. They bound the work as well as the memory: shlex
# grows each token by string concatenation on an attribute, quadratic in the token's
# length (a 400 KB value took seconds, 10 MB many minutes); 8 KiB takes milliseconds.
MAX_CONFIG_BYTES = 64 << 10
MAX_VALUE_CHARS = 8 << 10       # one line of the file; one value from the environment or a flag
MAX_PROMPT_BYTES = 1 << 20


class ConfigError(ValueError):
    """A setting is missing or wrong; the message names it and says what to do."""


@dataclass(frozen=True)
class Knob:
    name: str
    default: str | None
    help: str
    unit: str | None = None   # a duration's: what a bare number means (s, m or h); None: no duration


# The shipped workflow on TASKS.md, read with the one grammar of repo/tasks.py.
DEFAULT_TRIGGERS = {
    "Builder": "always",
    "Criticizer": "tasks:review",
    "Planner": "any:every:5,tasks:none-open",
}

KNOBS: tuple[Knob, ...] = (
    Knob("GENESIS_AGENT_CMD", "claude -p --dangerously-skip-permissions",
         "agent command line, word-split like a shell; the phase prompt is appended"),
    Knob("GENESIS_AGENT_CLI", None, "which agent CLI the command runs: claude, codex, gemini, qwen, opencode, "
         "copilot, aider or generic; unset: recognised from GENESIS_AGENT_CMD's program. Set alone, that CLI "
         "runs with its own unattended flags"),
    Knob("GENESIS_PHASES", "Builder Criticizer Planner", "phases run in order each iteration"),
    Knob("GENESIS_MAX_ITERATIONS", "0", "stop after this many iterations (0: no limit)"),
    Knob("ITERATION_PAUSE_SECONDS", "10", "pause between iterations (interruptible)", unit="s"),
    Knob("HEARTBEAT_CHECK_INTERVAL", "60", "seconds between heartbeat checks", unit="s"),
    Knob("HEARTBEAT_STALE", "15m", "no heartbeat for this long means stuck", unit="s"),
    Knob("AGENT_MAX_RUNTIME", "45m", "runtime cap per agent run, even with fresh heartbeats", unit="s"),
    Knob("TOOL_SILENT", "5m", "a tool in flight whose processes use no CPU, do no I/O, start nothing and "
         "print nothing for this long is stuck (0: off)", unit="s"),
    Knob("TOOL_BUSY_MAX_MINUTES", "60", "a tool in flight whose processes work (CPU, I/O, new processes) is "
         "not stuck however silent, for at most this long", unit="m"),
    Knob("DOOM_SAME_FAILURES", "6", "the same tool call (same input) failing this many times in a row ends the "
         "phase as wedged (stall_same_tool; 3-50)"),
    Knob("DOOM_CYCLE_CALLS", "12", "the last this many tool calls cycling over at most DOOM_CYCLE_INPUTS inputs, "
         "the repository unchanged, end the phase as wedged (doom_loop; 6-200)"),
    Knob("DOOM_CYCLE_INPUTS", "3", "see DOOM_CYCLE_CALLS (1-10)"),
    Knob("DOOM_SEVERITY_LADDER", "5 10 15 20", "tool calls since the last successful one for warn, medium, high "
         "and critical (recorded in the health snapshot)"),
    Knob("GENESIS_HEALTH_ENFORCE", "true", "false: warn only; record classifications and would-be kills, kill "
         "nothing but a run over AGENT_MAX_RUNTIME (to tune thresholds on real nights)"),
    Knob("AGENT_FIRST_EVENT_WINDOW", "60s", "a Claude Code run with nothing on its output and no heartbeat this "
         "long after its start is hung at start-up: ended as stuck (first_event; 0: off)", unit="s"),
    Knob("AGENT_RESULT_EXIT_WINDOW", "30s", "a run whose final result was read and that has nothing of its own left "
         "to run (or only background work silent for TOOL_SILENT) but does not exit is ended this long after the "
         "result, as done, not stuck (result_exit; 0: off)", unit="s"),
    Knob("AGENT_STREAM_IDLE_WINDOW", "2m", "Claude Code's own watchdog of the model's stream "
         "(CLAUDE_BYTE_STREAM_IDLE_TIMEOUT_MS, unless set): no byte from the API this long and it drops the "
         "connection and retries; its default is 3-5 minutes (10s-30m; 0: the CLI's default)", unit="s"),
    Knob("PHASE_RETRIES", "1", "a phase that ended stuck or wedged runs again this many times per iteration "
         "(after a short jittered delay), then counts as failed for the iteration (0-5)"),
    Knob("PHASE_RETRY_DELAY_SECONDS", "10", "the wait before a retry, up to half as long again (jitter)", unit="s"),
    Knob("GENESIS_FALLBACK_AGENT_CMD", None, "the agent command a retry runs (e.g. another model); unset: "
         "the same command"),
    Knob("GENESIS_MAX_RECOVERIES", "8", "retries in one run before the loop stops as thrashing (exit 25; 0-100)"),
    Knob("HEARTBEAT_COUNT_OUTPUT", "true", "agent output to its log also counts as a sign of life "
         "(for CLIs without hooks)"),
    Knob("KILL_GRACE_SECONDS", "10", "SIGTERM, then SIGKILL after this many seconds", unit="s"),
    Knob("CB_WARNING_THRESHOLD", "3", "iterations without progress before HALF_OPEN (warn)"),
    Knob("CB_STOP_THRESHOLD", "5", "iterations without progress before OPEN (stop)"),
    Knob("AUTO_COMMIT", "true", "commit the project's changes after each phase"),
    Knob("AUTO_PUSH", "false", "push after each auto-commit"),
    Knob("GENESIS_COMMIT_KEY", "", "each phase's auto-commit carries a trailer `Genesis-Phase: <key>/<iteration>-"
         "<phase>` (the fleet on Temporal sets it per attempt: a fleet child with a key skips a phase an earlier "
         "try keyed on its branch, gives its task branch an upstream, and steps aside with exit 35 when its push is "
         "refused); printable ASCII without spaces, at most 200 characters; empty: no trailer"),
    Knob("GENESIS_COMMIT_MAX_FILE_MB", "10", "auto-commit leaves out a file larger than this, as it leaves out "
         "files that look like secrets (0: no size cap); what it leaves out stays in the work tree and is reported"),
    Knob("GENESIS_SANDBOX", "auto", "the agent's box: auto (bubblewrap where it runs, else Landlock, else "
         "Seatbelt on macOS, else none), bwrap, landlock, seatbelt (refused at start where it cannot run; exit 29) "
         "or off (no box: the agent can edit Genesis's state and signal the loop)"),
    Knob("GENESIS_AGENT_MEMORY_MAX", "auto", "a cap on the agent tree's memory (memory.max of its cgroup, where "
         "writable), e.g. 8G; auto: half the machine's memory; none: no cap. It bounds the box's /tmp too (a "
         "tmpfs charged to it). The agent's tree is the OOM killer's first choice either way"),
    Knob("GENESIS_AGENT_PIDS_MAX", "4096", "a cap on the agent tree's processes and threads (pids.max of its "
         "cgroup, where writable): a fork bomb meets it and the phase goes on to its end; 0: no cap"),
    Knob("GENESIS_NETWORK", "allowlist", "the agent's network: allowlist (bubblewrap: a network namespace of its "
         "own, its loopback its own, and out only through Genesis's proxy to the agent CLI's API hosts, the package "
         "registries, the project's git remotes and GENESIS_NETWORK_ALLOW; each refusal recorded; Seatbelt: the proxy "
         "on a port of 127.0.0.1 and no IP out but to it and the allowed loopback ports; Landlock and none leave the "
         "host's network, said at start), open (the host's, loopback services included) or none (bubblewrap: "
         "its loopback alone; Seatbelt: the loopback alone; refused in a box that cannot, exit 29)"),
    Knob("GENESIS_NETWORK_ALLOW", "", "hosts the box's proxy lets the agent reach beyond the defaults "
         "(GENESIS_NETWORK=allowlist): host, host:port or *.domain, separated by commas (a host alone: ports 80 "
         "and 443); a loopback address needs its port (e.g. api.example.com,*.internal.example,127.0.0.1:5432)"),
    Knob("GENESIS_BOX_ALLOW", "", "what the box gives the agent beyond its private HOME: paths separated by "
         "commas, each PATH, PATH:ro or PATH:rw (read-only unless :rw; absolute or ~/...), a socket included "
         "(e.g. ~/.config/mytool:ro,~/.cache/mytool:rw); `~:rw` gives back all of HOME"),
    Knob("GENESIS_GIT_HOOKS", "false", "run the repository's git hooks in Genesis's own commits (an agent "
         "may have planted one)"),
    Knob("GENESIS_ALLOW_HISTORY_REWRITE", "false", "true: a phase may rewrite or delete pre-run history, "
         "switch branch or detach HEAD (it is still reported, and kept by safety refs); false: the loop stops "
         "(exit 27)"),
    Knob("GENESIS_UNTRACKED_COPY_MAX_MB", "100", "the user's untracked and ignored files are copied aside at "
         "the start up to this many MB in all (20 MB per file at most; 0: no copy); see `genesis restore`"),
    Knob("AGENT_LOG_MAX_MB", "50", "an agent log's size cap per phase: its head and newest tail are kept"),
    Knob("REAP_SCOPE", "all", "all: reap every leftover of this loop's agents; matching: only "
         "REAP_PATTERNS and REAP_PORTS"),
    Knob("REAP_PATTERNS", r"python[0-9.]* -m server\.main|pytest",
         "extended regex on a leftover's command line (| for several)"),
    Knob("REAP_PORTS", "8080", "ports whose listeners are reaped if ours, reported if not"),
    Knob("GENESIS_LIMIT_MARGIN_SECONDS", "60", "after a usage limit, wait this long past its reset before "
         "retrying the phase", unit="s"),
    Knob("GENESIS_SHARED_STATE_DIR", "", "the machine-wide, per-user state every loop shares (usage limits and "
         "API outages, per account); empty: $XDG_STATE_HOME/genesis, else ~/.local/state/genesis"),
    Knob("GENESIS_LIMIT_JITTER_PERCENT", "20", "after a usage limit, each waiting loop resumes up to this "
         "percent of GENESIS_LIMIT_MARGIN_SECONDS later, at random, so that loops on one account resume one by one"),
    Knob("GENESIS_MAX_LIMIT_WAIT", "6h", "a usage limit that resets later than this (e.g. a weekly one) ends "
         "the loop (exit 20); a duration: 90s, 30m, 6h, 2d", unit="s"),
    Knob("GENESIS_BACKOFF_FIRST_SECONDS", "30", "API outage: the first wait before retrying the phase; "
         "doubles each time, with up to 20% jitter below", unit="s"),
    Knob("GENESIS_BACKOFF_MAX_SECONDS", "900", "API outage: the longest single wait", unit="s"),
    Knob("GENESIS_MAX_OUTAGE_MINUTES", "120", "an API outage longer than this ends the loop (exit 21)", unit="m"),
    Knob("GENESIS_DONE_WHEN", "tasks", "when the work is done and the loop ends with exit 0: tasks (TASKS.md "
         "has nothing open after a Planner pass), when:COMMAND, phrase:TEXT or never"),
    Knob("GENESIS_CHECK_CMD", "", "the project's check: a bash command run in the agent's box, with the task's "
         "own `check:` line, after a phase ticks a task [x] (a failure reopens the task) and, in a fleet, on the "
         "merged tree before a merge lands (empty: none)"),
    Knob("GENESIS_CHECK_TIMEOUT", "10m", "a check (GENESIS_CHECK_CMD, a task's `check:`) running longer is killed "
         "with everything it started and counts as failed; a duration: 90s, 10m, 1h", unit="s"),
    Knob("GENESIS_MAX_RUNTIME_HOURS", "0", "end the run after this many hours, between phases (0: no "
         "ceiling; exit 23)", unit="h"),
    Knob("GENESIS_MAX_COST_USD", "0", "end the run once the agents' reported costs reach this, between "
         "phases (0: no ceiling; exit 24)"),
    Knob("CB_COOLDOWN_MINUTES", None, "opt-in: an OPEN breaker waits this long, then lets one trial "
         "iteration through (HALF_OPEN); unset, OPEN stops the loop", unit="m"),
    Knob("CB_MAX_TRIALS", "3", "with CB_COOLDOWN_MINUTES: trial iterations before OPEN stops the loop; "
         "the cooldown doubles after each failed trial"),
    Knob("GENESIS_FLEET_MAX_TASK_RESTARTS", "3", "a fleet: a task whose child ends abnormally is restarted with "
         "the same settings this many times, then escalated (0-20)"),
    Knob("GENESIS_FLEET_MAX_FAILED_TASKS", "3", "a fleet: escalations of a task (each to the next strategy of "
         "GENESIS_FLEET_ESCALATION) before it fails permanently (0-20)"),
    Knob("GENESIS_FLEET_ESCALATION", "fallback|longer", "a fleet: the strategies an escalated task tries, in "
         "order, |-separated: fallback (GENESIS_FALLBACK_AGENT_CMD; skipped when unset), longer (the same agent "
         "with its stale and runtime windows doubled) or an agent command line"),
    Knob("GENESIS_FLEET_RESTART_BACKOFF_SECONDS", "10", "a fleet: a task's restart n waits this times 2^(n-1) "
         "seconds, at most 300", unit="s"),
    Knob("GENESIS_FLEET_RESTART_EVERY_SECONDS", "60", "a fleet: at most one restart or escalation (or agent "
         "started again inside its child after it died) per this many seconds across the whole fleet (0: no bound)", unit="s"),
    Knob("GENESIS_FLEET_CASCADE_PERCENT", "30", "a fleet: when more than this percent of its children (at least "
         "two) end abnormally within GENESIS_FLEET_CASCADE_WINDOW_SECONDS, it stops restarting and probes with "
         "one child (0: off)"),
    Knob("GENESIS_FLEET_CASCADE_WINDOW_SECONDS", "300", "a fleet: the window of GENESIS_FLEET_CASCADE_PERCENT",
         unit="s"),
    Knob("GENESIS_FLEET_WORKTREE_DIR", "", "a fleet: where each task's git worktree is made (<dir>/<task id>), "
         "outside the project's work tree; empty: genesis-worktrees in the repository's git directory"),
    Knob("GENESIS_FLEET_MERGE", "queue", "a fleet: queue (a verified task's branch is rebased onto the project "
         "branch, tested and fast-forwarded into it) or branch (each finished branch is kept for review, rebased "
         "as the project branch moves, pushed when AUTO_PUSH is on)"),
    Knob("GENESIS_MERGE_TEST_CMD", "", "a fleet's merge queue: the project's test command, run by bash in the "
         "task's worktree after the rebase; a failure keeps the branch out (empty: no test)"),
    Knob("GENESIS_MERGE_TEST_TIMEOUT", "20m", "a fleet's merge queue: GENESIS_MERGE_TEST_CMD running longer is "
         "killed with everything it started, and the merge counts as failed; a duration: 90s, 30m, 2h", unit="s"),
    *(Knob(name, default, help, unit=unit_of(name) if name in ALERT_DURATIONS else None)
      for name, default, help in ALERT_KNOBS),
    Knob("GENESIS_FLEET_CHILD_ITERATIONS", "6", "a fleet's child loop: iterations on its one task before it "
         "ends (1-1000)"),
    Knob("GENESIS_FLEET_STAGGER_SECONDS", "5", "a fleet: seconds between two launches of children", unit="s"),
    Knob("GENESIS_FLEET_MEMORY_PER_AGENT_MB", "400", "a fleet: memory one agent takes, for --parallel auto "
         "(agent CLIs take 200-620 MB)"),
    Knob("GENESIS_FLEET_MEMORY_FLOOR_MB", "1024", "a fleet launches no child while less memory than this is "
         "available"),
    Knob("GENESIS_FLEET_PORT_BASE", "20000", "a fleet: the first port of the children's port ranges"),
    Knob("GENESIS_FLEET_PORTS_PER_TASK", "10", "a fleet: ports in each child's range (PORT, GENESIS_PORT_BASE)"),
    Knob("GENESIS_FLEET_CHECK_SECONDS", "2", "a fleet's monitor checks its children this often", unit="s"),
    Knob("GENESIS_FLEET_MONITOR_STALE_SECONDS", "60", "a fleet's child raises one \"monitor down\" alert when "
         "the monitor's heartbeat (monitor.json) is older than this (1-86400)", unit="s"),
    Knob("GENESIS_FLEET_MONITOR_STOP_SECONDS", "0", "a fleet's child ends its night (exit 34) at its next check "
         "between phases once its monitor's heartbeat is older than this, or missing that long: its task may be "
         "another machine's by then (0: never, the child goes on to its own end; at most 604800)", unit="s"),
    Knob("GENESIS_LOG_DIR", "orchestrator/logs", "agent logs and the console's copy, relative to the project"),
    Knob("GENESIS_STOP_FLAG", "hooks/loop_multi_agent.txt",
         "the loop stops when this file says false (relative to the project)"),
    Knob("GENESIS_FLEET_ENGINE", "local", "a fleet: local (one machine, one monitor process) or temporal (a "
         "Temporal server carries it, with a `genesis worker` on each machine; the temporal extra)"),
    Knob("GENESIS_TEMPORAL_ADDRESS", "127.0.0.1:7233", "the temporal engine: the Temporal frontend, HOST:PORT"),
    Knob("GENESIS_TEMPORAL_NAMESPACE", "default", "the temporal engine: the Temporal namespace"),
    Knob("GENESIS_TEMPORAL_TASK_QUEUE", "genesis", "the temporal engine: the prefix of its task queues "
         "(<prefix>-fleet, <prefix>-any, <prefix>@<host>)"),
    Knob("GENESIS_TEMPORAL_HOST", "", "the temporal engine: this machine's name in its task queue (empty: the "
         "hostname)"),
    Knob("GENESIS_TEMPORAL_HEARTBEAT_SECONDS", "60", "the temporal engine: a phase whose worker has not "
         "heartbeaten for this long is retried (1-3600)", unit="s"),
    Knob("GENESIS_TEMPORAL_HOST_WAIT_SECONDS", "300", "the temporal engine: how long a task's phase waits for "
         "the machine holding its worktree before it moves to another machine's fresh clone (1-86400)", unit="s"),
    Knob("GENESIS_TEMPORAL_REMOTE", "origin", "the temporal engine: the git remote every machine clones the "
         "tasks' branches from and pushes them to"),
    Knob("GENESIS_TEMPORAL_ACCOUNT", "", "the temporal engine: a name for the agent subscription machines share, "
         "so a usage limit met on one holds all; read at home, for its whole fleet (empty: from the home's "
         "API key's fingerprint, else the home machine's name: per home, not per worker)"),
    Knob("GENESIS_TEMPORAL_TLS_CA", "", "the temporal engine: a PEM file of the CA that signed the server's "
         "certificate; setting it (or a certificate, or an API key) turns TLS on (empty: the system's roots)"),
    Knob("GENESIS_TEMPORAL_TLS_CERT", "", "the temporal engine: this client's PEM certificate, for mutual TLS "
         "(with GENESIS_TEMPORAL_TLS_KEY)"),
    Knob("GENESIS_TEMPORAL_TLS_KEY", "", "the temporal engine: the PEM private key of GENESIS_TEMPORAL_TLS_CERT"),
    Knob("GENESIS_TEMPORAL_API_KEY_FILE", "", "the temporal engine: a file holding the API key (Temporal Cloud); "
         "the environment's GENESIS_TEMPORAL_API_KEY wins; the key is never shown"),
    Knob("GENESIS_TEMPORAL_AGENT_COMMANDS", "", "the temporal engine, on a worker: |-separated agent command "
         "lines it may run besides its own GENESIS_AGENT_CMD and GENESIS_FALLBACK_AGENT_CMD; a workflow asking "
         "for any other is refused"),
    Knob("GENESIS_TEMPORAL_METRICS", "", "the temporal engine: HOST:PORT where this process (a worker, the home) "
         "serves the Temporal SDK's metrics for Prometheus at /metrics (schedule-to-start latencies, failed "
         "activities, polls); empty: none"),
)
KNOB_NAMES = {k.name for k in KNOBS}
KNOB_BY_NAME = {k.name: k for k in KNOBS}
# The names the three windows had when each was two knobs, still read (a _SECONDS one wins
# over its _MINUTES one, and the new name over both, at equal precedence) and said to be old.
OLD_NAMES = {"HEARTBEAT_STALE_MINUTES": "HEARTBEAT_STALE", "HEARTBEAT_STALE_SECONDS": "HEARTBEAT_STALE",
             "AGENT_MAX_RUNTIME_MINUTES": "AGENT_MAX_RUNTIME", "AGENT_MAX_RUNTIME_SECONDS": "AGENT_MAX_RUNTIME",
             "TOOL_SILENT_MINUTES": "TOOL_SILENT", "TOOL_SILENT_SECONDS": "TOOL_SILENT"}
PHASE_SUFFIXES = ("TRIGGER", "PROMPT", "MAX_TURNS", "MAX_BUDGET_USD")
PHASE_KEY_RE = re.compile(r"^PHASE_([A-Za-z][A-Za-z0-9_]*)_(" + "|".join(PHASE_SUFFIXES) + ")$")
# A variable in the environment with a knob's prefix, close to a knob's name but none, is
# most likely a misspelt knob (read nowhere, so silently ignored without this warning).
KNOB_PREFIXES = ("GENESIS_", "HEARTBEAT_", "CB_", "REAP_", "PHASE_", "AUTO_", "AGENT_", "TOOL_", "DOOM_",
                 "ITERATION_", "KILL_")
# Variables Genesis itself sets or reads that are no settings (markers, the hook's, the script's).
NOT_SETTINGS = frozenset({"GENESIS_AGENT", "GENESIS_ITERATION", "GENESIS_PHASE", "GENESIS_RUN_ID",
                          "GENESIS_PROJECT_DIR", "GENESIS_HEARTBEAT_FILE", "GENESIS_STATE_DIR", "GENESIS_HOOK_ATOMIC",
                          "GENESIS_BIN", "GENESIS_HOME", "GENESIS_ALERT_SEVERITY", "GENESIS_ALERT_TEXT",
                          "GENESIS_SIM_SCRIPT", "GENESIS_SIM_PORT", "GENESIS_TASK", "GENESIS_TASK_ID",
                          "GENESIS_FLEET_DIR", "GENESIS_PORT_BASE", "GENESIS_PORT_COUNT",
                          "GENESIS_TEMPORAL_API_KEY"})
CLOSE = 0.8                  # difflib's ratio for "most likely meant"
MAX_ADVICE = 10              # warnings said at one start, at most
# $NAME or ${NAME...}: what a shell would expand and genesis.conf does not.
PATH_VARIABLES = frozenset({"HOME", "USER", "LOGNAME", "PWD", "TMPDIR"})
VARIABLE_RE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)[^}]*\}|([A-Za-z_][A-Za-z0-9_]*))")
MAX_TRIALS = 20
# A newline, NUL or other control character in a value (a tab is spacing): meaningless in any
# setting, and a newline in a path would shift the lines `genesis loop-settings` gives the loop.
CONTROL_RE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


@dataclass(frozen=True)
class Setting:
    value: str
    source: str
    old: str = ""   # the old name it was written under (OLD_NAMES), to be said at start


@dataclass(frozen=True)
class Config:
    """The validated settings; made only by build(), so that KNOBS is the one source of the defaults."""
    project: Path
    agent_cmd: tuple[str, ...]
    phases: tuple[Phase, ...]
    max_iterations: int
    pause: float
    check_interval: float
    stale_after: float
    max_runtime: float
    kill_grace: float
    count_output: bool
    cb_warning: int
    cb_stop: int
    auto_commit: bool
    auto_push: bool
    commit_key: str                       # GENESIS_COMMIT_KEY ("": no Genesis-Phase trailer)
    reap_scope: str
    reap_patterns: str
    reap_ports: tuple[int, ...]
    log_dir: Path
    stop_flag: Path
    git_hooks: bool
    log_max_bytes: int
    tool_silent: float                    # 0: off
    tool_busy_max: float
    health_enforce: bool
    first_event_window: float             # 0: off
    result_exit_window: float             # 0: off
    stream_idle_window: float             # 0: the CLI's own default
    doom_limits: DoomLimits
    phase_retries: int
    retry_delay: float
    fallback_agent_cmd: tuple[str, ...]   # (): a retry runs agent_cmd
    max_recoveries: int
    limit_margin: float
    limit_jitter: float                   # a fraction (GENESIS_LIMIT_JITTER_PERCENT / 100)
    shared_state_dir: str                 # GENESIS_SHARED_STATE_DIR; "": the default place (store/accounts.py)
    max_limit_wait: float
    backoff_first: float
    backoff_max: float
    max_outage: float
    done_when: DoneRule
    agent_cli: str                        # GENESIS_AGENT_CLI; "": recognised from agent_cmd
    max_run_seconds: float                # 0: no ceiling
    max_cost_usd: float                   # 0: no ceiling
    cb_cooldown: float | None             # seconds; None: an OPEN breaker stops the loop
    cb_max_trials: int
    alerts: AlertSettings
    sandbox: str                          # GENESIS_SANDBOX: auto, bwrap, landlock, seatbelt or off
    agent_memory_max: int | None          # bytes; None: no cap
    allow_history_rewrite: bool           # GENESIS_ALLOW_HISTORY_REWRITE
    untracked_copy_max: int               # bytes; GENESIS_UNTRACKED_COPY_MAX_MB
    commit_max_file: int                  # bytes; GENESIS_COMMIT_MAX_FILE_MB (0: no cap)
    fleet_max_task_restarts: int          # GENESIS_FLEET_MAX_TASK_RESTARTS
    fleet_max_failed_tasks: int           # GENESIS_FLEET_MAX_FAILED_TASKS
    fleet_escalation: tuple[str, ...]     # GENESIS_FLEET_ESCALATION's entries (see fleet/ladder.strategies)
    fleet_restart_backoff: float          # seconds; GENESIS_FLEET_RESTART_BACKOFF_SECONDS
    fleet_restart_every: float            # seconds; GENESIS_FLEET_RESTART_EVERY_SECONDS (0: no bound)
    fleet_cascade_percent: float          # GENESIS_FLEET_CASCADE_PERCENT (0: off)
    fleet_cascade_window: float           # seconds; GENESIS_FLEET_CASCADE_WINDOW_SECONDS
    monitor_stale: float                  # seconds; GENESIS_FLEET_MONITOR_STALE_SECONDS (a fleet's child)
    monitor_stop: float                   # seconds; GENESIS_FLEET_MONITOR_STOP_SECONDS (0: a child never stops for it)
    fleet_worktree_dir: Path | None       # GENESIS_FLEET_WORKTREE_DIR; None: <git common dir>/genesis-worktrees
    fleet_merge: str                      # GENESIS_FLEET_MERGE: queue or branch
    merge_test_cmd: str                   # GENESIS_MERGE_TEST_CMD ("": none)
    merge_test_timeout: float             # seconds; GENESIS_MERGE_TEST_TIMEOUT
    check_cmd: str                        # GENESIS_CHECK_CMD ("": none)
    check_timeout: float                  # seconds; GENESIS_CHECK_TIMEOUT
    settings: Mapping[str, Setting] = field(compare=False)  # what each value was, and where it came from
    box_allow: tuple[Allowed, ...] = ()   # GENESIS_BOX_ALLOW's paths
    network: str = "allowlist"            # GENESIS_NETWORK: allowlist, open or none
    network_allow: tuple[Entry, ...] = ()  # GENESIS_NETWORK_ALLOW's hosts
    agent_pids_max: int | None = None     # GENESIS_AGENT_PIDS_MAX; None: no cap


def is_genesis_key(key: str) -> bool:
    return key in KNOB_NAMES or key in OLD_NAMES or PHASE_KEY_RE.match(key) is not None


def default_of(name: str) -> str:
    """A knob's default, from the one table that holds them (KeyError: no such knob, or none)."""
    default = KNOB_BY_NAME[name].default
    if default is None:
        raise KeyError(f"{name} has no default")
    return default


def _renamed(merged: Mapping[str, Setting]) -> dict[str, Setting]:
    """The settings with each old name's value under its new name, written with its unit, where
    it wins: from a higher source than the new name's, or from the same one when the new name
    is not set there (a _SECONDS form beats a _MINUTES one from the same source)."""
    kept = {key: setting for key, setting in merged.items() if key not in OLD_NAMES}
    for old in sorted(OLD_NAMES, key=lambda name: name.endswith("_SECONDS")):   # _MINUTES first
        if old not in merged:
            continue
        new, setting = OLD_NAMES[old], merged[old]
        current = kept.get(new)
        if current is None or RANKS[setting.source] > RANKS[current.source] or (
                RANKS[setting.source] == RANKS[current.source] and current.old):
            kept[new] = Setting(with_unit(setting.value, unit_of(old)), setting.source, old)
    return kept


def closest(key: str, phases: tuple[str, ...] = ()) -> str | None:
    """The knob (or setting of one of the phases) a misspelt key most likely meant, if any is close."""
    names = sorted(KNOB_NAMES) + [f"PHASE_{p}_{suffix}" for p in phases for suffix in PHASE_SUFFIXES]
    found = difflib.get_close_matches(key, names, n=1, cutoff=CLOSE)
    return found[0] if found else None


def misspelt_channel(env: Mapping[str, str]) -> str | None:
    """Why the environment is refused: a variable that most likely meant an alert setting and
    is none (the other misspelt knobs are only warned about, see advice)."""
    said = misspelt_alert(env)
    if said:
        return said
    for key in sorted(env):
        if key in NOT_SETTINGS or not key.startswith(KNOB_PREFIXES) or is_genesis_key(key):
            continue
        near = closest(key)
        if near and near.startswith(ALERT_PREFIX):
            return alert_refusal(key, _nearest_alert(key))
    return None


def _nearest_alert(key: str) -> str:
    """The alert setting KEY most likely meant: compared as written, and as if its NOTIFY_ were
    left out (GENESIS_NTFY is GENESIS_NOTIFY_NTFY, not the nearer-spelt GENESIS_NOTIFY_CMD)."""
    names = [name for name, _, _ in ALERT_KNOBS if name.startswith(ALERT_PREFIX)]
    filled = ALERT_PREFIX + key.split("_", 1)[-1]

    def likeness(name: str) -> float:
        return max(difflib.SequenceMatcher(None, key, name).ratio(), difflib.SequenceMatcher(None, filled, name).ratio())

    return max(names, key=likeness)


def _meant(key: str, phases: tuple[str, ...] = ()) -> str:
    near = closest(key, phases)
    return f"; did you mean {near}?" if near else ""


def parse_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines, # comments, optional shell-style quotes; never executed."""
    values: dict[str, str] = {}
    try:
        data = read_bytes(path, MAX_CONFIG_BYTES, follow_symlinks=True)
    except FileNotFoundError:
        return values
    except TooLarge:
        raise ConfigError(f"{path} is larger than {MAX_CONFIG_BYTES >> 10} KiB, too large for a few KEY=VALUE "
                          f"lines; keep only the settings in it (long texts belong in prompt files)") from None
    except CorruptFile as exc:
        raise ConfigError(f"{exc}; replace it with a text file of KEY=VALUE lines") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it ({exc.strerror}); fix or remove it") from None
    try:
        if b"\0" in data:
            raise UnicodeDecodeError("utf-8", data, data.index(b"\0"), data.index(b"\0") + 1, "NUL byte")
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        # Not text at all (a crash or disk error, not a typo): keep it aside for inspection
        # and stop, rather than run all night on settings the user did not choose.
        kept = quarantine(path, time.time())
        raise ConfigError(f"{path} is corrupt (not UTF-8 text); it was moved aside to {kept}. Restore or "
                          f"rewrite it; without it the defaults and environment apply") from None
    for n, line in enumerate(text.splitlines(), 1):
        if len(line) > MAX_VALUE_CHARS:
            raise ConfigError(f"{path}:{n}: the line is {len(line)} characters long, more than the "
                              f"{MAX_VALUE_CHARS} allowed; shorten it (a long text belongs in a prompt file, "
                              f"see PHASE_<Name>_PROMPT)")
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, raw = line.partition("=")
        key = key.strip().removeprefix("export ").strip()
        if not sep or not is_genesis_key(key):
            raise ConfigError(f"{path}:{n}: '{line[:60]}' is not KEY=VALUE with a known key"
                              f"{_meant(key) if sep else ''} (docs/reference/settings.md lists the keys)")
        try:
            parts = shlex.split(raw, comments=True)
        except ValueError as exc:
            raise ConfigError(f"{path}:{n}: {key}: {exc}; quote the value, on one line") from None
        values[key] = " ".join(parts) if len(parts) != 1 else parts[0]
    return values


def gather(project: Path, env: Mapping[str, str], flags: Mapping[str, str]) -> dict[str, Setting]:
    refused = misspelt_channel(env)
    if refused:
        raise ConfigError(refused)
    merged: dict[str, Setting] = {k.name: Setting(k.default, "default") for k in KNOBS if k.default is not None}
    for source, values in (("file", parse_file(project / CONFIG_FILE)),
                           ("env", {k: v for k, v in env.items() if is_genesis_key(k)}),
                           ("flag", flags)):
        for key, value in values.items():
            if not is_genesis_key(key):
                raise ConfigError(f"unknown setting {key}{_meant(key)}; `{hint(project, 'config', 'show')}` lists "
                                  f"the settings")
            where = "the environment" if source == "env" else "a --set flag" if source == "flag" else CONFIG_FILE
            if len(value) > MAX_VALUE_CHARS:
                raise ConfigError(f"{key} from {where} is {len(value)} characters long, more than the "
                                  f"{MAX_VALUE_CHARS} allowed; shorten it")
            control = CONTROL_RE.search(value)
            if control:
                raise ConfigError(f"{key} from {where} holds a control character ({control.group()!r} at "
                                  f"character {control.start() + 1}): no setting means one, and a newline would "
                                  f"split the value in two; write the value on one line without it")
            merged[key] = Setting(value, source)
    return _renamed(merged)


def resolve(project: Path, env: Mapping[str, str] | None = None,
            flags: Mapping[str, str] | None = None) -> Config:
    """Load and validate; ConfigError names the first bad setting and what it accepts."""
    project = Path(project).resolve()
    return build(project, gather(project, os.environ if env is None else env, flags or {}))


def snapshot(cfg: Config) -> dict:
    """The settings a run started with, to be read back by every later step of that run."""
    return {key: [setting.value, setting.source] for key, setting in cfg.settings.items()}


def from_snapshot(project: Path, data: object) -> Config:
    """The configuration a run started with (see snapshot); ConfigError if unusable."""
    if not isinstance(data, dict) or not all(
            isinstance(v, list) and len(v) == 2 and all(isinstance(x, str) for x in v) for v in data.values()):
        raise ConfigError("the run's configuration snapshot is unreadable; restart the loop")
    return build(Path(project).resolve(), _renamed({key: Setting(v[0], v[1]) for key, v in data.items()}))


def build(project: Path, s: Mapping[str, Setting]) -> Config:
    """Validate gathered settings into a Config."""

    def get(key: str) -> str:
        return s[key].value.strip()

    def number(key: str, minimum: float, integer: bool = False) -> float:
        raw = get(key)
        try:
            value = int(raw) if integer else float(raw)
        except ValueError:
            kind = "a whole number" if integer else "a number"
            raise ConfigError(f"{key}={raw!r} ({s[key].source}): expected {kind}") from None
        if not value >= minimum or value != value or value in (float("inf"),):
            raise ConfigError(f"{key}={raw!r} ({s[key].source}): must be at least {minimum:g}")
        return value

    def boolean(key: str) -> bool:
        raw = get(key).lower()
        if raw in ("1", "true", "yes", "on"):
            return True
        if raw in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{key}={get(key)!r} ({s[key].source}): expected true or false")

    def span(key: str, minimum: float, maximum: float | None = None) -> float:
        """A duration knob in seconds, from minimum to maximum (its name's unit for a bare number)."""
        name, raw = s[key].old or key, get(key)
        try:
            value = duration_seconds(name, raw, unit_of(name), s[key].source)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if value < minimum:
            raise ConfigError(f"{name}={raw!r} ({s[key].source}): must be at least {written(minimum)}")
        if maximum is not None and value > maximum:
            raise ConfigError(f"{name}={raw!r} ({s[key].source}): at most {written(maximum)}")
        return value

    def clamped(key: str, low: int, high: int) -> int:
        value = int(number(key, low, integer=True))
        if value > high:
            raise ConfigError(f"{key}={value} ({s[key].source}): at most {high}")
        return value

    try:
        fallback = tuple(shlex.split(s["GENESIS_FALLBACK_AGENT_CMD"].value)) if "GENESIS_FALLBACK_AGENT_CMD" in s \
            else ()
    except ValueError as exc:
        raise ConfigError(f"GENESIS_FALLBACK_AGENT_CMD: {exc}; check its quotes") from None
    try:
        agent_cmd = tuple(shlex.split(get("GENESIS_AGENT_CMD")))
    except ValueError as exc:
        raise ConfigError(f"GENESIS_AGENT_CMD: {exc}; check its quotes") from None
    if not agent_cmd:
        raise ConfigError("GENESIS_AGENT_CMD is empty; set the agent command, e.g. 'claude -p'")
    agent_cli = _agent_cli(s)
    if agent_cli and s["GENESIS_AGENT_CMD"].source == "default":
        agent_cmd = (adapter_named(agent_cli).program or agent_cmd[0],)  # its adapter adds the flags

    check_interval = span("HEARTBEAT_CHECK_INTERVAL", 0.05)
    stale_after = span("HEARTBEAT_STALE", 0.1)
    if stale_after < check_interval:
        raise ConfigError(f"the stale window ({stale_after:g}s) is shorter than HEARTBEAT_CHECK_INTERVAL "
                          f"({check_interval:g}s); lengthen the window or check more often")
    tool_silent = span("TOOL_SILENT", 0)
    if 0 < tool_silent < check_interval:
        raise ConfigError(f"the tool-silent window ({tool_silent:g}s) is shorter than HEARTBEAT_CHECK_INTERVAL "
                          f"({check_interval:g}s); lengthen it, check more often, or set it to 0 (off)")
    cb_warning = int(number("CB_WARNING_THRESHOLD", 1, integer=True))
    cb_stop = int(number("CB_STOP_THRESHOLD", 1, integer=True))
    if cb_stop < cb_warning:
        raise ConfigError(f"CB_STOP_THRESHOLD ({cb_stop}) is below CB_WARNING_THRESHOLD ({cb_warning}); "
                          f"the loop must warn before it stops")

    scope = get("REAP_SCOPE")
    if scope not in ("all", "matching"):
        raise ConfigError(f"REAP_SCOPE={scope!r}: expected all or matching")
    patterns = get("REAP_PATTERNS")
    try:
        re.compile(patterns)
    except re.error as exc:
        raise ConfigError(f"REAP_PATTERNS={patterns!r}: not a valid regex ({exc})") from None
    ports = []
    for word in get("REAP_PORTS").replace(",", " ").split():
        if not word.isdigit() or not 1 <= int(word) <= 65535:
            raise ConfigError(f"REAP_PORTS: {word!r} is not a port number (1-65535)")
        ports.append(int(word))

    backoff_first = span("GENESIS_BACKOFF_FIRST_SECONDS", 0.1)
    backoff_max = span("GENESIS_BACKOFF_MAX_SECONDS", 0.1)
    if backoff_max < backoff_first:
        raise ConfigError(f"GENESIS_BACKOFF_MAX_SECONDS ({backoff_max:g}) is below GENESIS_BACKOFF_FIRST_SECONDS "
                          f"({backoff_first:g}); raise the cap or lower the first wait")
    ladder = get("DOOM_SEVERITY_LADDER").replace(",", " ").split()
    if len(ladder) != 4 or not all(w.isdigit() for w in ladder):
        raise ConfigError(f"DOOM_SEVERITY_LADDER={get('DOOM_SEVERITY_LADDER')!r}: expected four whole numbers "
                          f"(warn medium high critical), e.g. '5 10 15 20'")

    doom_limits = DoomLimits(*map(int, ladder), same_failures=int(number("DOOM_SAME_FAILURES", 1, integer=True)),
                             cycle_window=int(number("DOOM_CYCLE_CALLS", 1, integer=True)),
                             cycle_inputs=int(number("DOOM_CYCLE_INPUTS", 1, integer=True))).clamped()
    trials = int(number("CB_MAX_TRIALS", 1, integer=True))
    if trials > MAX_TRIALS:
        raise ConfigError(f"CB_MAX_TRIALS={trials}: at most {MAX_TRIALS} (the cooldown doubles after each trial; "
                          f"{MAX_TRIALS} already reaches years)")
    try:
        alerts = parse_alerts({key: setting.value for key, setting in s.items()})
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    try:
        done_when = parse_done_rule(get("GENESIS_DONE_WHEN"))
    except ValueError as exc:
        raise ConfigError(f"GENESIS_DONE_WHEN: {exc}") from None

    return Config(
        project=project,
        agent_cmd=agent_cmd,
        agent_cli=agent_cli,
        phases=_phases(project, s),
        max_iterations=int(number("GENESIS_MAX_ITERATIONS", 0, integer=True)),
        pause=span("ITERATION_PAUSE_SECONDS", 0),
        check_interval=check_interval,
        stale_after=stale_after,
        max_runtime=span("AGENT_MAX_RUNTIME", 0.1),
        kill_grace=span("KILL_GRACE_SECONDS", 0),
        count_output=boolean("HEARTBEAT_COUNT_OUTPUT"),
        cb_warning=cb_warning,
        cb_stop=cb_stop,
        auto_commit=boolean("AUTO_COMMIT"),
        auto_push=boolean("AUTO_PUSH"),
        commit_key=_commit_key(s),
        reap_scope=scope,
        reap_patterns=patterns,
        reap_ports=tuple(ports),
        log_dir=project / get("GENESIS_LOG_DIR"),
        stop_flag=project / get("GENESIS_STOP_FLAG"),
        git_hooks=boolean("GENESIS_GIT_HOOKS"),
        log_max_bytes=int(number("AGENT_LOG_MAX_MB", 1) * (1 << 20)),
        tool_silent=tool_silent,
        tool_busy_max=span("TOOL_BUSY_MAX_MINUTES", 0.6),
        health_enforce=boolean("GENESIS_HEALTH_ENFORCE"),
        first_event_window=span("AGENT_FIRST_EVENT_WINDOW", 0),
        result_exit_window=span("AGENT_RESULT_EXIT_WINDOW", 0),
        stream_idle_window=_stream_idle(span("AGENT_STREAM_IDLE_WINDOW", 0)),
        doom_limits=doom_limits,
        phase_retries=clamped("PHASE_RETRIES", 0, 5),
        retry_delay=span("PHASE_RETRY_DELAY_SECONDS", 0),
        fallback_agent_cmd=fallback,
        max_recoveries=clamped("GENESIS_MAX_RECOVERIES", 0, 100),
        limit_margin=span("GENESIS_LIMIT_MARGIN_SECONDS", 0),
        limit_jitter=min(number("GENESIS_LIMIT_JITTER_PERCENT", 0), 100.0) / 100,
        shared_state_dir=_shared_state_dir(s),
        max_limit_wait=span("GENESIS_MAX_LIMIT_WAIT", 0),
        backoff_first=backoff_first,
        backoff_max=backoff_max,
        max_outage=span("GENESIS_MAX_OUTAGE_MINUTES", 0),
        done_when=done_when,
        max_run_seconds=span("GENESIS_MAX_RUNTIME_HOURS", 0),
        max_cost_usd=number("GENESIS_MAX_COST_USD", 0),
        cb_cooldown=span("CB_COOLDOWN_MINUTES", 0.6) if "CB_COOLDOWN_MINUTES" in s and get("CB_COOLDOWN_MINUTES")
        else None,
        cb_max_trials=trials,
        alerts=alerts,
        sandbox=_sandbox(s),
        agent_memory_max=_memory_max(s),
        settings=s,
        allow_history_rewrite=boolean("GENESIS_ALLOW_HISTORY_REWRITE"),
        untracked_copy_max=int(number("GENESIS_UNTRACKED_COPY_MAX_MB", 0) * (1 << 20)),
        commit_max_file=int(number("GENESIS_COMMIT_MAX_FILE_MB", 0) * (1 << 20)),
        fleet_max_task_restarts=clamped("GENESIS_FLEET_MAX_TASK_RESTARTS", 0, 20),
        fleet_max_failed_tasks=clamped("GENESIS_FLEET_MAX_FAILED_TASKS", 0, 20),
        fleet_escalation=_escalation(s),
        fleet_restart_backoff=min(span("GENESIS_FLEET_RESTART_BACKOFF_SECONDS", 0), 300.0),
        fleet_restart_every=span("GENESIS_FLEET_RESTART_EVERY_SECONDS", 0),
        fleet_cascade_percent=_percent(s, "GENESIS_FLEET_CASCADE_PERCENT"),
        fleet_cascade_window=span("GENESIS_FLEET_CASCADE_WINDOW_SECONDS", 1),
        monitor_stale=min(span("GENESIS_FLEET_MONITOR_STALE_SECONDS", 1), 86400.0),
        monitor_stop=min(span("GENESIS_FLEET_MONITOR_STOP_SECONDS", 0), 604800.0),
        fleet_worktree_dir=_worktree_dir(project, s),
        fleet_merge=_choice(s, "GENESIS_FLEET_MERGE", ("queue", "branch")),
        merge_test_cmd=get("GENESIS_MERGE_TEST_CMD"),
        merge_test_timeout=span("GENESIS_MERGE_TEST_TIMEOUT", 0),
        check_cmd=get("GENESIS_CHECK_CMD"),
        check_timeout=span("GENESIS_CHECK_TIMEOUT", 1),
        box_allow=_box_allow(s),
        network=_network(s),
        network_allow=_network_allow(s),
        agent_pids_max=int(clamped("GENESIS_AGENT_PIDS_MAX", 0, 1 << 22)) or None,
    )


def _escalation(s: Mapping[str, Setting]) -> tuple[str, ...]:
    """GENESIS_FLEET_ESCALATION's entries: fallback, longer or an agent command line each."""
    setting = s["GENESIS_FLEET_ESCALATION"]
    entries = tuple(part.strip() for part in setting.value.split("|") if part.strip())
    for entry in entries:
        try:
            words = shlex.split(entry)
        except ValueError as exc:
            raise ConfigError(f"GENESIS_FLEET_ESCALATION ({setting.source}): {entry!r}: {exc}; check its "
                              f"quotes") from None
        if not words or not words[0]:
            raise ConfigError(f"GENESIS_FLEET_ESCALATION ({setting.source}): {entry!r} is no agent command; "
                              f"write fallback, longer or an agent command line")
    return entries


def _worktree_dir(project: Path, s: Mapping[str, Setting]) -> Path | None:
    """GENESIS_FLEET_WORKTREE_DIR (relative to the project), never inside its work tree: git would
    see every worktree there as the project's untracked files, and `git clean -fdx` would take them."""
    setting = s["GENESIS_FLEET_WORKTREE_DIR"]
    if not setting.value.strip():
        return None
    path = Path(os.path.abspath(project / os.path.expanduser(setting.value.strip())))
    inside = path == project or project in path.parents
    if inside and not (path == project / ".git" or project / ".git" in path.parents):
        raise ConfigError(f"GENESIS_FLEET_WORKTREE_DIR={setting.value!r} ({setting.source}) is inside the project's "
                          f"work tree ({path}); choose a folder outside it, or leave it empty for the repository's "
                          f"git directory")
    return path


def _choice(s: Mapping[str, Setting], key: str, choices: tuple[str, ...]) -> str:
    value = s[key].value.strip().lower()
    if value not in choices:
        raise ConfigError(f"{key}={s[key].value!r} ({s[key].source}): expected {' or '.join(choices)}")
    return value


def _percent(s: Mapping[str, Setting], key: str) -> float:
    raw = s[key].value.strip()
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 100:
        raise ConfigError(f"{key}={raw!r} ({s[key].source}): expected a percentage from 0 to 100")
    return value


def _commit_key(s: Mapping[str, Setting]) -> str:
    setting = s["GENESIS_COMMIT_KEY"]
    key = setting.value.strip()
    why = check_key(key)
    if why:
        raise ConfigError(f"GENESIS_COMMIT_KEY={setting.value[:60]!r} ({setting.source}) {why}")
    return key


def _stream_idle(window: float) -> float:
    """AGENT_STREAM_IDLE_WINDOW within what Claude Code accepts of its stream watchdog (10s-30m), or 0."""
    if window and not 10 <= window <= 1800:
        raise ConfigError(f"AGENT_STREAM_IDLE_WINDOW={window:g}s: Claude Code's stream watchdog takes 10s to 30m; "
                          f"set a window in that range, or 0 for the CLI's own default")
    return window


def _sandbox(s: Mapping[str, Setting]) -> str:
    value = s["GENESIS_SANDBOX"].value.strip().lower()
    if value not in SANDBOX_CHOICES:
        raise ConfigError(f"GENESIS_SANDBOX={s['GENESIS_SANDBOX'].value!r} ({s['GENESIS_SANDBOX'].source}): expected "
                          f"{', '.join(SANDBOX_CHOICES[:-1])} or {SANDBOX_CHOICES[-1]}")
    return value


def _shared_state_dir(s: Mapping[str, Setting]) -> str:
    """An absolute folder (`~` allowed), or "" for the default: every loop must name the same place."""
    value = s["GENESIS_SHARED_STATE_DIR"].value.strip()
    if value and not os.path.isabs(os.path.expanduser(value)):
        raise ConfigError(f"GENESIS_SHARED_STATE_DIR={value!r} ({s['GENESIS_SHARED_STATE_DIR'].source}): expected an "
                          f"absolute folder (or empty for $XDG_STATE_HOME/genesis, else ~/.local/state/genesis)")
    return value


def _network(s: Mapping[str, Setting]) -> str:
    value = s["GENESIS_NETWORK"].value.strip().lower()
    if value not in NETWORKS:
        raise ConfigError(f"GENESIS_NETWORK={s['GENESIS_NETWORK'].value!r} ({s['GENESIS_NETWORK'].source}): expected "
                          f"allowlist, open or none")
    return value


def _network_allow(s: Mapping[str, Setting]) -> tuple[Entry, ...]:
    setting = s["GENESIS_NETWORK_ALLOW"]
    try:
        return parse_entries(setting.value)
    except AllowlistError as exc:
        raise ConfigError(f"GENESIS_NETWORK_ALLOW ({setting.source}): {exc}") from None


def _box_allow(s: Mapping[str, Setting]) -> tuple[Allowed, ...]:
    setting = s["GENESIS_BOX_ALLOW"]
    try:
        return parse_allow(setting.value, os.environ.get("HOME"))
    except AllowError as exc:
        raise ConfigError(f"GENESIS_BOX_ALLOW ({setting.source}): {exc}") from None


def _memory_max(s: Mapping[str, Setting]) -> int | None:
    setting = s["GENESIS_AGENT_MEMORY_MAX"]
    if setting.value.strip().lower() == "auto":
        return auto_cap()
    if setting.value.strip().lower() in ("none", "off", "0"):
        return None
    try:
        return parse_size(setting.value)
    except ValueError as exc:
        raise ConfigError(f"GENESIS_AGENT_MEMORY_MAX: {exc} ({setting.source})") from None


def _agent_cli(s: dict) -> str:
    name = s["GENESIS_AGENT_CLI"].value.strip().lower() if "GENESIS_AGENT_CLI" in s else ""
    if name:
        try:
            adapter_named(name)
        except UnknownCli as exc:
            raise ConfigError(f"GENESIS_AGENT_CLI ({s['GENESIS_AGENT_CLI'].source}): {exc}") from None
    return name


def _phases(project: Path, s: dict[str, Setting]) -> tuple[Phase, ...]:
    names = s["GENESIS_PHASES"].value.replace(",", " ").split()
    if not names:
        raise ConfigError("GENESIS_PHASES is empty; name at least one phase, e.g. 'Builder'")
    phases = []
    for name in names:
        if not NAME_RE.match(name):
            raise ConfigError(f"GENESIS_PHASES: {name!r} is not a phase name (letters, digits, _)")
        if name in (p.name for p in phases):
            raise ConfigError(f"GENESIS_PHASES: {name} is listed twice")
        trig_key, prompt_key = f"PHASE_{name}_TRIGGER", f"PHASE_{name}_PROMPT"
        trig_text = s[trig_key].value if trig_key in s else DEFAULT_TRIGGERS.get(name, "always")
        try:
            trigger: Trigger = parse_trigger(trig_text)
        except ValueError as exc:
            raise ConfigError(f"{trig_key}: {exc}") from None
        prompt = s[prompt_key].value if prompt_key in s else f"orchestrator/prompts/{name.lower()}.md"
        phases.append(Phase(name, trigger, _prompt_file(project, prompt_key, prompt),
                            max_turns=_phase_number(s, f"PHASE_{name}_MAX_TURNS", int),
                            max_budget_usd=_phase_number(s, f"PHASE_{name}_MAX_BUDGET_USD", float)))
    return tuple(phases)


def _phase_number(s: Mapping[str, Setting], key: str, kind: type) -> int | float | None:
    """A phase's optional positive number (its turn or budget cap for the agent); unset: None."""
    if key not in s or not s[key].value.strip():
        return None
    raw = s[key].value.strip()
    try:
        value = kind(raw)
    except ValueError:
        value = None
    if value is None or not value > 0 or value != value or value == float("inf"):
        what = "a whole number" if kind is int else "a number"
        raise ConfigError(f"{key}={raw!r} ({s[key].source}): expected {what} above 0")
    return value


def _prompt_file(project: Path, key: str, prompt: str) -> Path:
    """The project's own prompt file if it has one, else the one shipped with Genesis."""
    path = Path(prompt).expanduser()
    candidates = [path] if path.is_absolute() else [project / path, BUILTIN_PROMPTS / path.name]
    for candidate in candidates:
        if candidate.is_file():
            size = candidate.stat().st_size
            if size > MAX_PROMPT_BYTES:
                raise ConfigError(f"{key}: {_too_long(candidate, size)} or set {key} to another file")
            return candidate
    raise ConfigError(f"{key}: no prompt file {prompt!r} in {project} or among Genesis's prompts; "
                      f"create it or set {key} to an existing file")


def _too_long(path: Path, size: int | None = None) -> str:
    what = f"is {size} bytes, over" if size is not None else "is over"
    return f"the prompt file {path} {what} the {MAX_PROMPT_BYTES >> 20} MiB limit for a prompt: shorten it"


def read_prompt(path: Path) -> str:
    """A phase's prompt as text, read with a bound; ConfigError says what is wrong with the file."""
    try:
        data = read_bytes(path, MAX_PROMPT_BYTES, follow_symlinks=True)
    except TooLarge:
        raise ConfigError(_too_long(path)) from None
    except CorruptFile as exc:
        raise ConfigError(f"{exc}; a prompt must be a text file") from None
    except OSError as exc:
        raise ConfigError(f"cannot read the prompt file {path} ({exc.strerror}); fix it or point "
                          f"PHASE_<Name>_PROMPT at another file") from None
    nul = data.find(b"\0")
    if nul >= 0:
        raise ConfigError(f"the prompt file {path} holds a NUL byte (at byte {nul}), so it is not text; remove it")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"the prompt file {path} is not UTF-8 text (byte {exc.start}: {exc.reason}); "
                          f"save it as UTF-8") from None


def effective(cfg: Config) -> list[tuple[str, str, str, str]]:
    """Every knob and phase setting: effective value, where it came from, what it does."""
    rows = [(k.name, cfg.settings[k.name].value, cfg.settings[k.name].source, k.help)
            for k in KNOBS if k.name in cfg.settings]
    for phase in cfg.phases:
        rows_of = [("TRIGGER", str(phase.trigger), "when the phase runs"),
                   ("PROMPT", str(phase.prompt_file), "the phase's prompt file")]
        if phase.max_turns is not None:
            rows_of.append(("MAX_TURNS", str(phase.max_turns), "Claude Code's --max-turns for the phase"))
        if phase.max_budget_usd is not None:
            rows_of.append(("MAX_BUDGET_USD", f"{phase.max_budget_usd:g}", "Claude Code's --max-budget-usd"))
        for suffix, value, what in rows_of:
            key = f"PHASE_{phase.name}_{suffix}"
            rows.append((key, value, cfg.settings[key].source if key in cfg.settings else "default", what))
    return rows


def advice(cfg: Config, env: Mapping[str, str]) -> list[str]:
    """What in the settings is most likely a mistake though valid: a misspelt knob in the
    environment (ignored there, where a misspelt key in genesis.conf is refused), a phase
    setting for no phase, a `$VARIABLE` in genesis.conf (never expanded)."""
    phases = tuple(p.name for p in cfg.phases)
    said = [f"{setting.old} is an old name: write {key}={setting.value}"
            for key, setting in sorted(cfg.settings.items()) if setting.old]
    for key in sorted(env):
        if key in NOT_SETTINGS or not key.startswith(KNOB_PREFIXES) or is_genesis_key(key):
            continue
        near = closest(key, phases)
        if near:
            said.append(f"{key} is set in the environment but is not a setting, so it is ignored; did you mean "
                        f"{near}?")
    for key, setting in sorted(cfg.settings.items()):
        found = PHASE_KEY_RE.match(key)
        # A setting of a phase left out of GENESIS_PHASES may be kept on purpose; one of a phase
        # named almost like a listed one is a typo.
        near = difflib.get_close_matches(found.group(1), phases, n=1, cutoff=CLOSE) if found else []
        if found and found.group(1) not in phases and near:
            said.append(f"{key} ({_source(setting.source)}) is for a phase named {found.group(1)}, which is not in "
                        f"GENESIS_PHASES ({' '.join(phases)}), so it is ignored; did you mean "
                        f"PHASE_{near[0]}_{found.group(2)}?")
        if setting.source == "file" and key != "REAP_PATTERNS" and not setting.value.startswith("when:"):
            names = [a or b for a, b in VARIABLE_RE.findall(setting.value)]
            if names:
                said.append(_unexpanded(key, setting.value, names, env))
    return said[:MAX_ADVICE]


def _source(source: str) -> str:
    return {"file": CONFIG_FILE, "env": "the environment", "flag": "a --set flag"}.get(source, source)


def _unexpanded(key: str, value: str, names: list[str], env: Mapping[str, str]) -> str:
    shown = value if len(value) <= 200 else value[:199] + "\u2026"
    told = f"{key}={shown!r} in {CONFIG_FILE} is used as written, ${names[0]} and all: genesis.conf is never " \
           f"run by a shell, so nothing in it is expanded"
    # Expanded here only where the result is a path: another variable may hold a secret.
    if all(name in env and (name in PATH_VARIABLES or name.startswith("XDG_")) for name in names):
        literal = VARIABLE_RE.sub(lambda m: env[m.group(1) or m.group(2)], value)
        return f"{told}. Write the value itself: {key}={shlex.quote(literal)}"
    return f"{told}. Write the value itself there, or set {key} in the environment or with --set, where your " \
           f"shell expands it"


def load_snapshot(path: Path, run_id: str) -> dict | None:
    """The configuration snapshot at path if it is run_id's, else None."""

    try:
        data = read_json(path)
    except CorruptFile:
        return None
    return data if isinstance(data, dict) and data.get("run_id") == run_id else None


def layout_for(cfg: Config) -> Layout:
    return Layout(cfg.project, cfg.log_dir, cfg.stop_flag, state_dir_of(cfg.project))


def default_layout(project: Path, state_dir: Path | None = None) -> Layout:
    """The project's layout with the default log and flag places, without validating the
    whole configuration: enough for what never moves (the state folder, the breaker file),
    so that a broken genesis.conf never hides them. NotARepository outside a git work tree."""

    project = Path(project).resolve()
    defaults = {k.name: str(k.default) for k in KNOBS}
    return Layout(project, project / defaults["GENESIS_LOG_DIR"], project / defaults["GENESIS_STOP_FLAG"],
                  state_dir if state_dir is not None else state_dir_of(project))

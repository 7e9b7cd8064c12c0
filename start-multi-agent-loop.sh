#!/usr/bin/env bash
# start-multi-agent-loop.sh - run agent phases over a git project, iteration after
# iteration, and keep the loop healthy while nobody watches.
#
# Usage: ./start-multi-agent-loop.sh [--project DIR] [--agent-cmd CMD] [--max-iterations N]
#                                    [--set KEY=VALUE]... [--allow-dirty] [--allow-detached]
#                                    [--trust] [--demo] [--parallel N|auto] [--fleet FILE] [--help]
#                                    [--engine local|temporal] [--temporal-address HOST:PORT]
#                                    [--temporal-namespace NS] [--temporal-task-queue PREFIX]
#
# --parallel N runs a fleet instead: one loop per open task of TASKS.md (each in its own git
# worktree and branch), at most N at once (auto: from the cores and the free memory), under
# one monitor (`genesis fleet run`) that merges each verified task home.
#
# --engine temporal (with --parallel) puts that fleet on a Temporal server, so it spans
# machines: each machine runs `genesis worker`; this one is the fleet's home (see
# docs/guides/temporal.md).
#
# --fleet FILE runs the fleets of several projects under that one monitor: FILE (TOML) lists
# each project's path, parallel and settings (see docs/guides/fleet.md). The account's
# usage limits, the cascade pause and max_parallel span them all. Not with --project or
# --parallel (the file says both).
#
# This script only sequences steps, handles signals and never dies silently; every
# decision about time, JSON, git or processes is a `genesis` subcommand. A step prints on
# stdout only what this script reads; status lines go to stderr, and into the run's
# console log. Exit codes: 0 done (the work is finished, max iterations or stop flag),
# 1 internal error, 2 usage or configuration, 3 circuit breaker OPEN, 4 another loop runs
# on the project, 6 disk full, 7 the watcher died too often, 8 a step overran its bound
# twice, 20 a usage limit resets beyond GENESIS_MAX_LIMIT_WAIT, 21 an API outage outlasted
# GENESIS_MAX_OUTAGE_MINUTES, 22 an agent error retrying cannot fix, 23 the runtime
# ceiling, 24 the cost ceiling, 25 stuck phases retried too often (thrashing), 26 Genesis's
# own state was taken from under the loop, 27 a phase rewrote history or left its branch, 28 a command
# genesis.conf names is new or changed since the last start (approve it: --trust),
# 29 the box GENESIS_SANDBOX names cannot run here, 31 a fleet: some task failed permanently,
# 32 a fleet: some task needs review, 34 a fleet's child whose monitor was gone too long,
# 35 a fleet's keyed child whose push was refused (another loop of its task owns the branch),
# 36 a usage limit resets weeks away (a monthly or credit-pool limit), 37 the model's safeguards
# refused the task and no fallback agent is left, 129/130/143 SIGHUP/SIGINT/SIGTERM.
set -euo pipefail
set -o errtrace  # the ERR trap also fires inside functions, so no failure goes unreported

# Exit codes: EXIT_<name> is <name> in genesis/exitcodes.py, and tests/test_exit_codes.py checks
# it. Nothing below this block spells a code as a number.
readonly EXIT_OK=0 EXIT_ERROR=1 EXIT_USAGE=2 EXIT_BREAKER_OPEN=3 EXIT_DISK_FULL=6 EXIT_WATCHER_LOST=7
readonly EXIT_STEP_TIMEOUT=8 EXIT_USAGE_LIMIT=20 EXIT_API_OUTAGE=21 EXIT_AGENT_FATAL=22 EXIT_MAX_RUNTIME=23
readonly EXIT_MAX_COST=24 EXIT_RECOVERY_SPENT=25 EXIT_STATE_LOST=26 EXIT_UNTRUSTED_COMMAND=28
readonly EXIT_HISTORY_REWRITTEN=27
readonly EXIT_SANDBOX_UNAVAILABLE=29 EXIT_MONITOR_LOST=34 EXIT_STEPPED_ASIDE=35 EXIT_LIMIT_FAR=36
readonly EXIT_POLICY_REFUSED=37
# shellcheck disable=SC2034  # a fleet's codes: its monitor (exec'd by --parallel) ends with them
readonly EXIT_FLEET_TASKS_FAILED=31 EXIT_FLEET_NEEDS_REVIEW=32
readonly EXIT_INTERRUPTED_HUP=129 EXIT_INTERRUPTED_INT=130 EXIT_INTERRUPTED_TERM=143
# Only steps end with these, never the loop: a phase ended and the loop goes on; a wait; the work is done.
readonly EXIT_AGENT_FAILED=10 EXIT_PHASE_SKIPPED=11 EXIT_AGENT_STALE=124 EXIT_AGENT_OVERTIME=125
readonly EXIT_WAIT=12 EXIT_WORK_DONE=13

# The terminal or a `| tee` may go away mid-night (closed, killed, logged out of): that costs
# the output, never the night. A write to a lost reader fails (EPIPE) instead of killing the
# loop, and every write of this script is best effort (see emit). Agents start with SIGPIPE's
# default back (Python's subprocess restores it).
trap '' PIPE

GENESIS_HOME="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
readonly GENESIS_HOME

project="."
demo=0
parallel=""
fleet=""
project_given=0
allow_dirty=()
allow_detached=()
trust=()
engine=()          # --engine and --temporal-*: how a fleet (--parallel) runs
overrides=()
genesis_cmd=()
run_id=""
child=""
finishing=0
console_log=""
last_step=""
counting_down=0
max_iterations="" pause_seconds="" stop_flag="" phases="" lock_file="" rc2=0

# A line for the user: into the run's console log first (once there is one; never through a
# symlink planted there), then on stderr if it is still there. A write error is dropped.
emit() {
  if [[ -n ${console_log} && ! -L ${console_log} ]]; then
    { printf '%s\n' "$1" >>"${console_log}"; } 2>/dev/null || true
  fi
  printf '%s\n' "$1" >&2 2>/dev/null || true
}
err() { emit "genesis: error: $*"; }
say() {
  local stamp
  stamp="$(date +%H:%M:%S)"
  emit "[genesis ${stamp}] $*"
}

usage() {
  sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p;}' "${BASH_SOURCE[0]}"
}

# The genesis CLI from this checkout's virtualenv, created on first use.
bootstrap() {
  local venv="${GENESIS_HOME}/.venv" python log failed=""
  if [[ -n ${GENESIS_BIN:-} ]]; then
    genesis_cmd=("${GENESIS_BIN}")
    return
  fi
  if [[ -x ${venv}/bin/genesis ]] && "${venv}/bin/python" -c 'import genesis, click, psutil, git, rich, detect_secrets' 2>/dev/null; then
    genesis_cmd=("${venv}/bin/genesis")
    return
  fi
  python="$(command -v python3 || true)"
  if [[ -z ${python} ]] || ! "${python}" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
    err "Genesis needs Python 3.10 or newer as python3 on PATH"
    exit "${EXIT_USAGE}"
  fi
  say "first run: creating ${venv} and installing Genesis into it from PyPI (once)"
  log="$(mktemp "${TMPDIR:-/tmp}/genesis-install.XXXXXX")"
  "${python}" -m venv "${venv}" >"${log}" 2>&1 || failed="${python} -m venv ${venv}"
  if [[ -z ${failed} ]]; then
    "${venv}/bin/python" -m pip install --quiet --disable-pip-version-check -e "${GENESIS_HOME}" >>"${log}" 2>&1 \
      || failed="pip install -e ${GENESIS_HOME}"
  fi
  if [[ -n ${failed} ]]; then
    install_failed "${failed}" "${log}" "${python}" "${venv}"
  fi
  rm -f "${log}"
  genesis_cmd=("${venv}/bin/genesis")
}

# A first run that could not install Genesis (offline, no venv module): what failed, in
# its own last words, and how to go on. A usage error: nothing ran yet.
install_failed() {
  local failed="$1" log="$2" python="$3" venv="$4" line by_hand
  printf -v by_hand '%q -m venv %q && %q -m pip install -e %q' "${python}" "${venv}" "${venv}/bin/python" \
    "${GENESIS_HOME}"
  err "first run: could not install Genesis into ${venv}: '${failed}' failed. Its last lines:"
  { grep -E '^[[:space:]]*ERROR:' "${log}" || tail -n 5 "${log}"; } | sed 's/^[[:space:]]*//' | awk '!seen[$0]++' |
    tail -n 5 | cut -c 1-300 | while IFS= read -r line; do emit "    ${line}"; done
  if [[ ${failed} == pip* ]]; then
    err "pip needs the package index (PyPI) once, for Genesis's dependencies: connect to the network, or point" \
      "PIP_INDEX_URL at an index you can reach, then run the same command again. Or install it yourself:" \
      "${by_hand} (its full output: ${log})"
  else
    err "python3 cannot create a virtualenv here: install its venv module (e.g. apt-get install python3-venv)," \
      "then run the same command again (the full output: ${log})"
  fi
  exit "${EXIT_USAGE}"
}

g() { "${genesis_cmd[@]}" --project "${project}" ${overrides[@]+"${overrides[@]}"} "$@"; }

stop_requested() {
  local flag_file="$1" value=""
  [[ -f ${flag_file} && ! -L ${flag_file} ]] || return 1
  IFS= read -r value <"${flag_file}" || true
  value="${value//[[:space:]]/}"
  case "${value}" in [Ff][Aa][Ll][Ss][Ee]) return 0 ;; esac
  return 1
}

# Ends the loop: whatever happened, leftovers are reaped, the lock released, a summary shown.
finish_loop() {
  local code="$1" reason="$2"
  finishing=1
  trap '' HUP INT TERM
  trap - EXIT ERR
  g finish --run-id "${run_id}" --reason "${reason}" --code "${code}" || err "final clean-up failed"
  if ((demo)); then
    say "demo finished. The demo project is ${project}; look at its orchestrator/logs/ and TASKS.md"
  fi
  exit "${code}"
}

# Stops the running step, if any, with the signal the loop got (SIGTERM by default): a phase's
# watcher and a wait record it as the reason; then SIGTERM, which ends any other step. Only a
# pid bash still lists as its own running job, never a pid that may have been recycled since.
stop_child() {
  local sig="${1:-TERM}" pid
  [[ -n ${child} ]] || return 0
  for pid in $(jobs -pr); do
    if [[ ${pid} == "${child}" ]]; then
      kill -s "${sig}" "${child}" 2>/dev/null || true
      [[ ${sig} == TERM ]] || kill -s TERM "${child}" 2>/dev/null || true
      break
    fi
  done
  wait "${child}" 2>/dev/null || true
  child=""
}

on_signal() {
  local name="$1" code="$2"
  trap '' HUP INT TERM
  # A wait's countdown holds the terminal's last line: the wait ends first (ending that line),
  # so that what follows starts a line of its own.
  if ((counting_down)); then
    stop_child "${name}"
  fi
  say "received SIG${name}: stopping the agent and cleaning up"
  stop_child "${name}"
  finish_loop "${code}" "interrupted by SIG${name}"
}

on_error() {
  local status="$1" line="$2" command="$3"
  ((BASH_SUBSHELL > 0)) && exit "${status}"  # in $(...) or &: the parent reports it
  ((finishing)) && return
  [[ ${command} == return* && -n ${last_step} ]] && command="${last_step}"  # a step failed
  err "internal error: '${command}' failed with status ${status} at line ${line}"
  stop_child
  finish_loop "${EXIT_ERROR}" "internal error at line ${line}: ${command}"
}

# Runs a genesis step in the background and waits, so that signals are handled at once.
# A simple command, not g: bash then execs genesis itself, so $child is genesis's pid.
step() {
  local rc=0
  keep_lock
  last_step="genesis $*"
  "${genesis_cmd[@]}" --project "${project}" ${overrides[@]+"${overrides[@]}"} "$@" &
  child=$!
  wait "${child}" || rc=$?
  child=""
  return "${rc}"
}

# An agent may delete or swap Genesis's state folder mid-run: the flock this loop holds is then
# on a file nobody can open any more, and a second loop would be let in. Before each step (a
# test builtin, no process): fd 9 is still the lock file, else the folder is healed and the run's
# settings put back from fd 8 (open on the snapshot), and the lock taken anew; if another loop
# has it by then, this one stops (exit 26) so that the two never interleave.
keep_lock() {
  local rc=0
  [[ -n ${lock_file} && ! /dev/fd/9 -ef ${lock_file} ]] || return 0
  last_step="genesis relock"
  g relock --run-id "${run_id}" --loop-pid "$$" --snapshot-fd 8 || rc=$?
  ((rc == EXIT_OK)) || after_step "${rc}" "${LINENO}"
  exec 9>>"${lock_file}"
  g relock --run-id "${run_id}" --loop-pid "$$" --snapshot-fd 8 --lock-fd 9 || rc=$?
  ((rc == EXIT_OK)) || after_step "${rc}" "${LINENO}"
}

pause() {
  [[ $1 == 0 ]] && return 0
  sleep "$1" &
  child=$!
  wait "${child}" || true
  child=""
}

# Reads what the loop needs from `genesis loop-settings` (which refuses a bad configuration).
read_settings() {
  local settings
  settings="$(g loop-settings --run-id "${run_id}")"
  {
    IFS= read -r max_iterations
    IFS= read -r pause_seconds
    IFS= read -r stop_flag
    IFS= read -r console_log
    IFS= read -r phases
    IFS= read -r lock_file
  } <<<"${settings}"
  # One value a line, each checked by loop-settings; a shifted line is still never opened.
  if [[ ${lock_file} != /* || ${console_log} != /* || ! ${max_iterations} =~ ^[0-9]+$ ]]; then
    err "genesis loop-settings gave lines the loop cannot use (a value holding a line break?)"
    exit "${EXIT_USAGE}"
  fi
}

# After a step that failed: a documented reason stops the loop cleanly (the step said the
# details); anything else is reported as an internal error.
after_step() {
  local rc="$1" line="$2"
  case "${rc}" in
    "${EXIT_OK}") return 0 ;;
    "${EXIT_DISK_FULL}") finish_loop "${rc}" "disk full: no room left for Genesis's state or logs" ;;
    "${EXIT_STEP_TIMEOUT}") finish_loop "${rc}" "a step overran its time bound twice: ${last_step}" ;;
    "${EXIT_USAGE}") finish_loop "${rc}" "a configuration or usage error: ${last_step}" ;;
    "${EXIT_USAGE_LIMIT}") finish_loop "${rc}" "a usage limit resets later than GENESIS_MAX_LIMIT_WAIT" ;;
    "${EXIT_LIMIT_FAR}") finish_loop "${rc}" "a usage limit resets weeks away (a monthly or credit-pool limit)" ;;
    "${EXIT_API_OUTAGE}") finish_loop "${rc}" "the model API failed for longer than GENESIS_MAX_OUTAGE_MINUTES" ;;
    "${EXIT_AGENT_FATAL}") finish_loop "${rc}" "the agent reported an error retrying cannot fix" ;;
    "${EXIT_POLICY_REFUSED}") finish_loop "${rc}" \
      "the model's safeguards refused the task and no fallback agent is left: another model or CLI, or rephrase it" ;;
    "${EXIT_MAX_RUNTIME}") finish_loop "${rc}" "the runtime ceiling GENESIS_MAX_RUNTIME_HOURS was reached" ;;
    "${EXIT_MAX_COST}") finish_loop "${rc}" "the cost ceiling GENESIS_MAX_COST_USD was reached" ;;
    "${EXIT_RECOVERY_SPENT}")
      finish_loop "${rc}" "stuck phases were retried GENESIS_MAX_RECOVERIES times: the loop only thrashes" ;;
    "${EXIT_STATE_LOST}") finish_loop "${rc}" "Genesis's own state was taken from under the loop: ${last_step}" ;;
    "${EXIT_SANDBOX_UNAVAILABLE}") finish_loop "${rc}" "the box GENESIS_SANDBOX names cannot run here any more" ;;
    "${EXIT_MONITOR_LOST}") finish_loop "${rc}" \
      "the fleet's monitor is gone (GENESIS_FLEET_MONITOR_STOP_SECONDS): another machine may have this task" ;;
    "${EXIT_STEPPED_ASIDE}") finish_loop "${rc}" \
      "the task's branch was pushed by another loop of this task: this loop stepped aside, its work committed" ;;
    "${EXIT_HISTORY_REWRITTEN}") finish_loop "${rc}" \
      "a phase rewrote or deleted history, or left its branch (GENESIS_ALLOW_HISTORY_REWRITE=false)" ;;
    "${EXIT_INTERRUPTED_HUP}" | "${EXIT_INTERRUPTED_INT}" | "${EXIT_INTERRUPTED_TERM}")
      finish_loop "${rc}" "interrupted" ;;
    *) on_error "${rc}" "${line}" "${last_step}" ;;
  esac
}

# Sits out the wait a step planned (a usage limit, an API outage, a breaker cooldown); the
# stop flag ends it early, and then the loop.
sit_out() {
  local rc=0
  counting_down=1
  step wait --run-id "${run_id}" || rc=$?
  counting_down=0
  after_step "${rc}" "${LINENO}"
  stop_requested "${stop_flag}" && finish_loop "${EXIT_OK}" "stop flag ${stop_flag} says false"
  return 0
}

run_loop() {
  local iteration=0 phase rc
  while true; do
    iteration=$((iteration + 1))
    if ((max_iterations > 0 && iteration > max_iterations)); then
      finish_loop "${EXIT_OK}" "reached GENESIS_MAX_ITERATIONS=${max_iterations}"
    fi
    stop_requested "${stop_flag}" && finish_loop "${EXIT_OK}" "stop flag ${stop_flag} says false"
    rc=0
    step iteration start --iteration "${iteration}" --run-id "${run_id}" || rc=$?
    after_step "${rc}" "${LINENO}"
    # Every phase in order; run-phase checks the phase's trigger just before it runs.
    for phase in ${phases}; do
      while true; do  # a phase that met a limit, an outage or a stall runs again after the wait
        stop_requested "${stop_flag}" && finish_loop "${EXIT_OK}" "stop flag ${stop_flag} says false"
        rc=0
        step run-phase --iteration "${iteration}" --phase "${phase}" --run-id "${run_id}" || rc=$?
        ((rc == EXIT_WAIT)) || break
        sit_out
      done
      case "${rc}" in
        "${EXIT_OK}" | "${EXIT_AGENT_FAILED}" | "${EXIT_PHASE_SKIPPED}" | "${EXIT_AGENT_STALE}" | \
          "${EXIT_AGENT_OVERTIME}") ;;  # finished, failed, skipped, stuck or over time: go on
        "${EXIT_ERROR}" | "${EXIT_USAGE}" | "${EXIT_DISK_FULL}" | "${EXIT_STEP_TIMEOUT}" | \
          "${EXIT_USAGE_LIMIT}" | "${EXIT_API_OUTAGE}" | "${EXIT_AGENT_FATAL}" | "${EXIT_MAX_RUNTIME}" | \
          "${EXIT_MAX_COST}" | "${EXIT_RECOVERY_SPENT}" | "${EXIT_STATE_LOST}" | "${EXIT_HISTORY_REWRITTEN}" | \
          "${EXIT_SANDBOX_UNAVAILABLE}" | "${EXIT_MONITOR_LOST}" | "${EXIT_STEPPED_ASIDE}" | "${EXIT_LIMIT_FAR}" | \
          "${EXIT_POLICY_REFUSED}")
          after_step "${rc}" "${LINENO}" ;;
        *)
          # The watcher died of a signal this loop did not send (the user's reaches the
          # loop's trap first): a failed phase, reaped by its run's identity; bounded.
          rc2=0
          step phase-lost --iteration "${iteration}" --phase "${phase}" --status "${rc}" \
            --run-id "${run_id}" || rc2=$?
          case "${rc2}" in
            "${EXIT_OK}") ;;
            "${EXIT_WATCHER_LOST}")
              finish_loop "${rc2}" "the watcher died too often (last: phase ${phase}, status ${rc})" ;;
            *) after_step "${rc2}" "${LINENO}" ;;
          esac ;;
      esac
    done
    rc=0
    step iteration finish --iteration "${iteration}" --run-id "${run_id}" || rc=$?
    case "${rc}" in
      "${EXIT_OK}") ;;
      "${EXIT_WAIT}") sit_out ;;  # the OPEN breaker's cooldown, then a trial iteration
      "${EXIT_WORK_DONE}") finish_loop "${EXIT_OK}" "done: the work is finished (GENESIS_DONE_WHEN)" ;;
      "${EXIT_BREAKER_OPEN}") finish_loop "${rc}" "circuit breaker OPEN" ;;
      *) after_step "${rc}" "${LINENO}" ;;
    esac
    if ((max_iterations == 0 || iteration < max_iterations)); then
      pause "${pause_seconds}"
    fi
  done
}

# Refuses an option without its value, or with a value of the wrong form: a usage error
# (exit 2), said before anything runs. Usage: needs OPTION WHAT PATTERN [VALUE].
needs() {
  local option="$1" what="$2" pattern="$3"
  if (($# < 4)) || [[ -z ${4//[[:space:]]/} ]]; then
    err "${option} needs ${what} (see --help)"
  elif [[ $4 == --* && $4 != *[[:space:]=]* ]]; then
    err "${option} needs ${what}, not the option '$4' (see --help)"
  elif [[ ! $4 =~ ${pattern} ]]; then
    err "${option} needs ${what}, not '$4' (see --help)"
  else
    return 0
  fi
  exit "${EXIT_USAGE}"
}

main() {
  local quoted rc=0
  while (($# > 0)); do
    case "$1" in  # --option=value reads as --option value
      --project=* | --agent-cmd=* | --max-iterations=* | --set=* | --parallel=* | --fleet=* | --engine=* | \
        --temporal-address=* | --temporal-namespace=* | --temporal-task-queue=*)
        set -- "${1%%=*}" "${1#*=}" "${@:2}" ;;
    esac
    case "$1" in
      --project) needs "$1" "a directory, the git project to work on" '.' "${@:2:1}"; project="$2"
        project_given=1; shift 2 ;;
      --fleet) needs "$1" "a fleet file (TOML) listing the projects, e.g. --fleet fleet.toml" '.' "${@:2:1}"
        fleet="$2"; shift 2 ;;
      --agent-cmd) needs "$1" "the agent's command line, e.g. --agent-cmd 'claude -p'" '.' "${@:2:1}"
        overrides+=(--set "GENESIS_AGENT_CMD=$2"); shift 2 ;;
      --max-iterations) needs "$1" "a whole number, e.g. --max-iterations 40 (0: no limit)" '^[0-9]+$' "${@:2:1}"
        overrides+=(--set "GENESIS_MAX_ITERATIONS=$2"); shift 2 ;;
      --set) needs "$1" "KEY=VALUE, e.g. --set AUTO_PUSH=true" '^[A-Za-z_][A-Za-z0-9_]*=' "${@:2:1}"
        overrides+=(--set "$2"); shift 2 ;;
      --allow-dirty) allow_dirty=(--allow-dirty); shift ;;
      --allow-detached) allow_detached=(--allow-detached); shift ;;
      --trust) trust=(--trust); shift ;;
      --parallel) needs "$1" "a number of tasks at once, or auto, e.g. --parallel 3" '^([1-9][0-9]*|auto)$' \
        "${@:2:1}"; parallel="$2"; shift 2 ;;
      --demo) demo=1; shift ;;
      --engine) needs "$1" "local or temporal, e.g. --engine temporal" '^(local|temporal)$' "${@:2:1}"
        engine+=(--engine "$2"); shift 2 ;;
      --temporal-address | --temporal-namespace | --temporal-task-queue)
        needs "$1" "a value for the temporal engine, e.g. $1 ${1#--temporal-}" '.' "${@:2:1}"
        engine+=("$1" "$2"); shift 2 ;;
      -h | --help) usage; exit "${EXIT_OK}" ;;
      *)
        if [[ $1 != -* && -d $1 ]]; then
          printf -v quoted '%q' "$1"
          err "unknown argument '$1': to run the loop on that project, use --project ${quoted}"
        else
          err "unknown argument '$1' (see --help)"
        fi
        exit "${EXIT_USAGE}" ;;
    esac
  done
  if ((${#engine[@]} > 0)) && [[ -z ${parallel} ]]; then
    err "--engine and the --temporal-* options choose how a fleet runs: give them with --parallel N"
    exit "${EXIT_USAGE}"
  fi
  if [[ -n ${fleet} ]] && { ((project_given || demo)) || [[ -n ${parallel} ]]; }; then
    err "--fleet runs the projects its file lists, each with its own parallel: not with --project, --parallel or --demo"
    exit "${EXIT_USAGE}"
  fi
  bootstrap
  if [[ -n ${fleet} ]]; then
    if [[ ! -f ${fleet} ]]; then
      err "--fleet ${fleet}: no such file"
      exit "${EXIT_USAGE}"
    fi
    fleet="$(cd "$(dirname "${fleet}")" && pwd)/$(basename "${fleet}")"
    # As --parallel: the monitor replaces this script and its exit code is the whole fleet's.
    exec "${genesis_cmd[@]}" ${overrides[@]+"${overrides[@]}"} fleet run --fleet "${fleet}" \
      ${trust[@]+"${trust[@]}"}
  fi
  if ((demo)); then
    project="$(mktemp -d "${TMPDIR:-/tmp}/genesis-demo.XXXXXX")/project"
    say "demo: creating a throwaway git project in ${project}"
    "${genesis_cmd[@]}" demo-init "${project}" >/dev/null
    g hook install --scope local
  fi
  if [[ ! -d ${project} ]]; then
    err "--project ${project}: no such directory"
    exit "${EXIT_USAGE}"
  fi
  project="$(cd "${project}" && pwd)"
  if [[ -n ${parallel} ]]; then
    # The monitor replaces this script (exec): the terminal's Ctrl-C, a SIGTERM or SIGHUP reach
    # it directly, it forwards them to every child loop, and its exit code is the fleet's.
    exec "${genesis_cmd[@]}" --project "${project}" ${overrides[@]+"${overrides[@]}"} fleet run \
      --parallel "${parallel}" ${trust[@]+"${trust[@]}"} ${engine[@]+"${engine[@]}"}
  fi
  run_id="$(date -u +%Y%m%dT%H%M%SZ)-$$"
  read_settings
  # The loop keeps this descriptor open for its whole life; preflight flock()s it, and the
  # kernel lets go when the loop and its steps are gone. Agents never inherit it.
  exec 9>>"${lock_file}"
  g preflight --loop-pid "$$" --lock-fd 9 --run-id "${run_id}" ${allow_dirty[@]+"${allow_dirty[@]}"} \
    ${allow_detached[@]+"${allow_detached[@]}"} ${trust[@]+"${trust[@]}"} || {
    rc=$?
    ((rc != EXIT_UNTRUSTED_COMMAND)) || say "run the same command with --trust to approve them and start"
    exit "${rc}"
  }
  # The run's settings snapshot (Layout.config_snapshot, beside the lock), held open: if the
  # state folder is deleted, keep_lock puts it back from here, never from genesis.conf.
  exec 8<"${lock_file%/*}/config.json"
  # The loop's companion (genesis/watch/companion.py): this script cannot see its own SIGKILL or
  # SIGSTOP, so a process of Genesis's outside the agent's tree, in its own session, records,
  # reaps and tells them. It holds neither the lock (9) nor the snapshot (8); it exits with the loop.
  "${genesis_cmd[@]}" --project "${project}" ${overrides[@]+"${overrides[@]}"} companion --loop-pid "$$" \
    --run-id "${run_id}" </dev/null >/dev/null 2>&1 8<&- 9>&- &
  trap 'on_signal HUP "${EXIT_INTERRUPTED_HUP}"' HUP
  trap 'on_signal INT "${EXIT_INTERRUPTED_INT}"' INT
  trap 'on_signal TERM "${EXIT_INTERRUPTED_TERM}"' TERM
  trap 'on_error $? ${LINENO} "${BASH_COMMAND}"' ERR
  trap 'on_error $? ${LINENO} "${BASH_COMMAND}"' EXIT
  run_loop
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  main "$@"
fi

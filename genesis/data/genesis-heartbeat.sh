#!/usr/bin/env bash
# genesis-heartbeat.sh - the agent's hook: records that the agent is alive.
#
# Usage: genesis-heartbeat.sh [TOOL_NAME] [< hook-stdin-json]
#
# Claude Code runs it on PreToolUse, PostToolUse and PostToolUseFailure with one JSON
# object on stdin; any other agent may run it with no stdin and a tool name argument.
# It writes {"agent","timestamp","epoch","tool","event","session_id","pid","run_id"} to
# $GENESIS_HEARTBEAT_FILE, or without it to heartbeat.json in a private per-user
# directory ($GENESIS_STATE_DIR, else $XDG_RUNTIME_DIR/genesis, else
# ~/.local/state/genesis).
#
# It runs on every tool call, so: no Python and, on bash 5, no fork at all. It never
# blocks the agent and never fails the tool call: it always exits 0 and prints nothing.
# No `set -e`: any failed step just ends the hook quietly.
set -u
exec >/dev/null 2>&1
TZ=UTC

readonly STDIN_HEAD=4096     # the fields we need come before tool_input/tool_response

# Keep only characters that are safe inside a JSON string and a file name.
clean() { local v="${1//[^A-Za-z0-9_.:@+-]/}"; REPLY="${v:0:200}"; }

# The first string value of key $1 in the payload, cleaned.
field() {
  REPLY=""
  if [[ ${payload} =~ \"$1\"[[:space:]]*:[[:space:]]*\"([^\"]*)\" ]]; then
    clean "${BASH_REMATCH[1]}"
  fi
}

payload=""
if [[ ! -t 0 ]]; then
  # bash reads a pipe a byte at a time, and with -t it sets a timer for every byte: so
  # when the payload is already there (Claude Code writes it whole) read it untimed, and
  # only wait, briefly, when nothing has arrived yet.
  if ((BASH_VERSINFO[0] >= 4)) && read -r -t 0; then
    IFS= read -r -d '' -n "${STDIN_HEAD}" payload
  else
    wait_s=1   # bash 3.2 takes whole seconds only
    ((BASH_VERSINFO[0] >= 4)) && wait_s=0.5
    IFS= read -r -d '' -t "${wait_s}" -n "${STDIN_HEAD}" payload
  fi
  # A large payload: drain the rest in the background so the writer never sees EPIPE
  # and this hook never waits on it.
  ((${#payload} >= STDIN_HEAD)) && { cat >/dev/null 2>&1 & }
fi

field hook_event_name; event="${REPLY}"
field session_id; session="${REPLY}"
if (($# > 0)); then clean "$1"; else field tool_name; fi
tool="${REPLY}"
clean "${GENESIS_AGENT:-unknown}"; agent="${REPLY}"
clean "${GENESIS_RUN_ID:-}"; run_id="${REPLY}"
pid="${CLAUDE_PID:-${PPID}}"
[[ ${pid} =~ ^[0-9]+$ ]] || pid="${PPID}"

target="${GENESIS_HEARTBEAT_FILE:-}"
if [[ -z ${target} ]]; then
  [[ -n ${GENESIS_STATE_DIR:-} || -n ${XDG_RUNTIME_DIR:-} || -n ${HOME:-} ]] || exit 0
  dir="${GENESIS_STATE_DIR:-${XDG_RUNTIME_DIR:+${XDG_RUNTIME_DIR}/genesis}}"
  dir="${dir:-${HOME}/.local/state/genesis}"
  # shellcheck disable=SC2174  # only the last directory holds heartbeats: it is the private one
  [[ -e ${dir} || -L ${dir} ]] || mkdir -p -m 700 "${dir}" || exit 0
  target="${dir}/heartbeat.json"
else
  dir="${target%/*}"
  [[ ${dir} == "${target}" ]] && dir="."
fi

# Only a real directory of ours; never write through a symlink planted at the path.
[[ -d ${dir} && ! -L ${dir} && -O ${dir} ]] || exit 0
[[ -L ${target} || -d ${target} ]] && exit 0

if [[ -n ${EPOCHREALTIME:-} ]]; then
  epoch="${EPOCHREALTIME/,/.}"   # some locales print a decimal comma
  printf -v stamp '%(%Y-%m-%dT%H:%M:%SZ)T' "${epoch%.*}"
else                             # bash 3.2 (stock macOS): two forks, still portable
  epoch="$(date -u +%s)"
  stamp="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
fi

printf -v json '{"agent":"%s","timestamp":"%s","epoch":%s,"tool":"%s","event":"%s","session_id":"%s","pid":%s,"run_id":"%s"}' \
  "${agent}" "${stamp}" "${epoch}" "${tool}" "${event}" "${session}" "${pid}" "${run_id}"

# Atomic: a reader sees the old heartbeat or the new one, never half.
# bash 5 (readline 8): when the target exists, its own `history -w` writes
# "<target>-NNNNN.tmp" (the last five digits of its pid) and renames it over the target,
# with no fork. That temp name is claimed first with noclobber (O_EXCL), so history
# writes into a file this hook just created, never through a planted symlink; if the
# claim fails, or for the first beat (history would write a new file in place), the mv
# path below is used. The history settings are pinned so that the file holds exactly the
# one line, and it all stands on one line so that history records no command.
# GENESIS_HOOK_ATOMIC=mv forces the mv path.
set -o noclobber
printf -v claim '%s-%05d.tmp' "${target}" "$(($$ % 100000))"
if ((BASH_VERSINFO[0] >= 5)) && [[ ${GENESIS_HOOK_ATOMIC:-} != mv && -f ${target} ]] \
  && : >"${claim}"; then
  HISTFILE=/dev/null HISTSIZE=2 HISTFILESIZE=2
  unset HISTTIMEFORMAT HISTIGNORE HISTCONTROL
  set -o history; history -c; history -s "${json}"; history -w "${target}"; set +o history
  exit 0
fi
# Older bash: write a new file with noclobber (O_EXCL), then rename it with mv.
tmp="${dir}/.${target##*/}.${$}.${RANDOM}.tmp"
if printf '%s\n' "${json}" >"${tmp}"; then
  mv -f -- "${tmp}" "${target}" || rm -f -- "${tmp}"
else
  rm -f -- "${tmp}"   # disk full or the like: the previous heartbeat stays as it was
fi
exit 0

#!/usr/bin/env bash
# genesis-heartbeat.sh - the agent's hook: records that the agent is alive.
# Usage: genesis-heartbeat.sh [--event NAME] [TOOL_NAME] [< hook-stdin-json]. Always exits
# 0, prints nothing, no fork on bash 5. How it works: the notes at the end of this file (bash lexes
# every comment it passes, on every tool call; it never reaches those).
set -u
exec >/dev/null 2>&1
export TZ=UTC   # exported: an unexported TZ is ignored by the C library's clock
LC_ALL=C        # bytes, not characters: 4096 means bytes, and no multibyte matching

readonly STDIN_HEAD=4096     # the heartbeat's fields come before tool_input

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
  # (note 2)
  if ((BASH_VERSINFO[0] >= 5)) && read -r -t 0; then
    IFS= read -r -N "${STDIN_HEAD}" payload
  elif ((BASH_VERSINFO[0] >= 4)) && read -r -t 0; then
    IFS= read -r -d '' -n "${STDIN_HEAD}" payload
  else
    wait_s=1   # bash 3.2 takes whole seconds only
    ((BASH_VERSINFO[0] >= 4)) && wait_s=0.5
    IFS= read -r -d '' -t "${wait_s}" -n "${STDIN_HEAD}" payload
  fi
  ((${#payload} >= STDIN_HEAD)) && { cat >/dev/null 2>&1 & }
fi

# (note 6)
field hook_event_name; event="${REPLY}"
if [[ ${1:-} == --event ]]; then
  [[ -n ${event} ]] || { clean "${2:-}"; event="${REPLY}"; }
  shift $(($# > 1 ? 2 : 1))
fi
field session_id; [[ -n ${REPLY} ]] || field sessionId
session="${REPLY}"
if (($# > 0)); then clean "$1"; else field tool_name; [[ -n ${REPLY} ]] || field toolName; fi
tool="${REPLY}"
clean "${GENESIS_AGENT:-unknown}"; agent="${REPLY}"
clean "${GENESIS_RUN_ID:-}"; run_id="${REPLY}"
pid="${CLAUDE_PID:-${PPID}}"
[[ ${pid} =~ ^[0-9]+$ ]] || pid="${PPID}"
# Who ran the hook: its ancestors, nearest first, up to the CLI (note 7).
ppids="${PPID}" up="${PPID}"
for _ in 1 2 3; do
  [[ ${up} != "${CLAUDE_PID:-}" && ${up} -gt 1 ]] || break
  IFS= read -r stat <"/proc/${up}/stat" || break
  stat="${stat##*) }"; stat="${stat#* }"; up="${stat%% *}"
  [[ ${up} =~ ^[0-9]+$ ]] || break
  ppids+=",${up}"
done

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

printf -v json '{"agent":"%s","timestamp":"%s","epoch":%s,"tool":"%s","event":"%s","session_id":"%s","pid":%s,"run_id":"%s","ppids":[%s]}' \
  "${agent}" "${stamp}" "${epoch}" "${tool}" "${event}" "${session}" "${pid}" "${run_id}" "${ppids}"

# The tool log (note 3), before the heartbeat; not for Genesis's own hook self-test.
slow=""
if [[ -n ${GENESIS_HEARTBEAT_FILE:-} && -n ${event}${tool} && ${session} != genesis-self-test.* ]]; then
  log="${target%.json}.tools.jsonl"
  line="{\"t\":${epoch},\"e\":\"${event}\",\"tool\":\"${tool}\",\"pp\":[${ppids}]"
  t="${payload:$((${#payload} > 320 ? ${#payload} - 320 : 0))}"
  if [[ ${t} == *\"tool_use_id\"* ]]; then
    pre="${t%%\"tool_use_id\"*}"; t="${t:${#pre}+13:80}"; t="${t#*\"}"; clean "${t%%\"*}"
  else
    field tool_use_id
  fi
  [[ -n ${REPLY} ]] && line+=",\"id\":\"${REPLY}\""
  case ${event} in
    PostToolUse | AfterTool | postToolUse | tool.execute.after) line+=',"ok":true' ;;
    PostToolUseFailure | postToolUseFailure | tool.execute.error) line+=',"ok":false' ;;
  esac
  if [[ ${event} == Post* || ${event} == tool.execute.[ae]* ]]; then
    t="${payload: -40}"; t="${t#*\"duration_ms\"}"; t="${t//[[:space:]]/}"
    [[ ${t} == :[0-9]* ]] && t="${t:1}" && line+=",\"ms\":${t%%[!0-9]*}"
  fi
  case ${tool} in
    "") key="" ;;
    Bash | bash | shell | run_shell_command | exec_command) key="command" ;;
    Glob | Grep) key="pattern" ;;
    Read | Write | Edit | MultiEdit | read_file | write_file | replace) key="file_path" ;;
    read | write | edit) key="filePath" ;;
    *) key="command|file_path|pattern" ;;
  esac
  if [[ -n ${key} && ${payload} =~ \"(${key})\"[[:space:]]*:[[:space:]]*\"([^\"]*) ]]; then
    cmd="${BASH_REMATCH[2]:0:160}"
    if [[ ${cmd} == *[\\$'\x01'-$'\x1f'$'\x80'-$'\xff']* ]]; then
      slow="${BASH_REMATCH[0]}" vlen="${#BASH_REMATCH[2]}"
    else
      line+=",\"cmd\":\"${cmd}\""
    fi
  fi
  append() { [[ ! -L ${log} ]] && [[ -f ${log} || ! -e ${log} ]] && printf '%s}\n' "${line}" >>"${log}"; }
  [[ -n ${slow} ]] || append
fi

# The heartbeat, atomically (note 4).
set -o noclobber
printf -v claim '%s-%05d.tmp' "${target}" "$(($$ % 100000))"
if ((BASH_VERSINFO[0] >= 5)) && [[ ${GENESIS_HOOK_ATOMIC:-} != mv && -f ${target} ]] \
  && : >"${claim}"; then
  HISTFILE=/dev/null HISTSIZE=2 HISTFILESIZE=2
  unset HISTTIMEFORMAT HISTIGNORE HISTCONTROL
  set -o history; history -c; history -s "${json}"; history -w "${target}"; set +o history
else
  tmp="${dir}/.${target##*/}.${$}.${RANDOM}.tmp"
  if printf '%s\n' "${json}" >"${tmp}"; then
    mv -f -- "${tmp}" "${target}" || rm -f -- "${tmp}"
  else
    rm -f -- "${tmp}"   # disk full or the like: the previous heartbeat stays as it was
  fi
fi
[[ -n ${slow} ]] || exit 0

# A command with backslashes, control characters or non-ASCII bytes (note 5).
pre="${payload%%"${slow}"*}"
cmd="${payload:${#pre}+${#slow}-vlen:160}"
t="${cmd//\\[\\\"]/__}"; t="${t%%\"*}"
case ${t} in *\\ | *\\u | *\\u? | *\\u?? | *\\u???) t="${t%\\*}" ;; esac
case ${t} in *\\u[dD][89abAB]??) t="${t%\\*}" ;; esac
cmd="${cmd:0:${#t}}"
case ${cmd} in
  *[$'\xc0'-$'\xff']) cmd="${cmd%?}" ;;
  *[$'\xe0'-$'\xff'][$'\x80'-$'\xbf']) cmd="${cmd%??}" ;;
  *[$'\xf0'-$'\xff'][$'\x80'-$'\xbf'][$'\x80'-$'\xbf']) cmd="${cmd%???}" ;;
esac
[[ ${t} == *\\u* ]] && t="${t//\\u[0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F]/}"
utf8=$'^([^\x80-\xff]|[\xc2-\xdf][\x80-\xbf]|\xe0[\xa0-\xbf][\x80-\xbf]|[\xe1-\xec\xee\xef][\x80-\xbf]{2}|\xed[\x80-\x9f][\x80-\xbf]|\xf0[\x90-\xbf][\x80-\xbf]{2}|[\xf1-\xf3][\x80-\xbf]{3}|\xf4[\x80-\x8f][\x80-\xbf]{2})*$'
if [[ ${t} == *[$'\x01'-$'\x1f']* || ${t} == *\\[!/bfnrt]* ]] \
  || { [[ ${cmd} == *[$'\x80'-$'\xff']* ]] && ! [[ ${cmd} =~ ${utf8} ]]; }; then
  cmd="${cmd//[^A-Za-z0-9 ._\/:=+,@%-]/_}"
fi
line+=",\"cmd\":\"${cmd}\""
append
exit 0

# Notes
#
# 1. What it writes. Claude Code runs it on PreToolUse, PostToolUse, PostToolUseFailure
# and SessionStart with one JSON object on stdin, and so do the other CLIs on their tool
# events (note 6); any other agent may run it with no stdin and a tool name argument. It writes
# {"agent","timestamp","epoch","tool","event","session_id","pid","run_id"} to
# $GENESIS_HEARTBEAT_FILE, or without it to heartbeat.json in a private per-user directory
# ($GENESIS_STATE_DIR, else $XDG_RUNTIME_DIR/genesis, else ~/.local/state/genesis). It runs
# on every tool call, so: no Python and, on bash 5, no fork at all. It never blocks the
# agent and never fails the tool call. No `set -e`: any failed step just ends it quietly.
#
# 2. Reading stdin. bash reads a pipe a byte at a time (one read(2) per byte), and with
# -t it sets a timer for every byte: so when the payload is already there (Claude Code
# writes it whole and closes the pipe) it is read untimed with -N, which bash 5 reads in
# blocks (a 4 KiB payload: 5 system calls instead of 4100), and only when nothing has
# arrived yet does it wait, briefly. A payload larger than 4096 bytes: the rest is drained
# in the background so that the writer never sees EPIPE and this hook never waits on it.
#
# 3. The tool log. With $GENESIS_HEARTBEAT_FILE set, one line per event is appended to
# the tool log beside it (Builder.json -> Builder.tools.jsonl):
#   {"t":EPOCH,"e":EVENT,"tool":TOOL,"pp":[PPIDS],"id":TOOL_USE_ID,"ok":BOOL,"ms":DURATION,"cmd":TEXT}
# t is the heartbeat's epoch, pp its ppids (note 7); ok only for post events (false for PostToolUseFailure); id,
# ms and cmd only when the payload's first 4096 bytes hold them: Claude Code sends
# tool_use_id and duration_ms last, after tool_input and tool_response, so they are
# looked for in the payload's tail first. cmd is at most the first 160 bytes of the
# tool's command, file_path or pattern, still JSON-escaped as the payload spelled it.
# The line is written before the heartbeat, so a watcher that sees a new heartbeat finds
# its line. One printf of one line through `>>` (O_APPEND) is one write(2): concurrent
# hooks never interleave. Never through a symlink, never into a FIFO or a device (it would
# block). The reader (genesis.health.toollog) hashes cmd and bounds the log's size: this
# hook cannot check a size without a fork. Genesis's hook self-test (session id
# genesis-self-test.*) beats but is no tool call of the agent's. Costs here: a regex
# about 0.07 ms, ${x%%"key"*} about 0.1 us per byte it scans, a substring little; and
# bash lexes all the code and comments it passes, so the common path is short and the
# care a rare command needs comes after it, lexed only when needed.
#
# 4. The heartbeat, atomically: a reader sees the old heartbeat or the new one, never
# half. bash 5 (readline 8): when the target exists, its own `history -w` writes
# "<target>-NNNNN.tmp" (the last five digits of its pid) and renames it over the target,
# with no fork. That temp name is claimed first with noclobber (O_EXCL), so history writes
# into a file this hook just created, never through a planted symlink; if the claim fails,
# or for the first beat (history would write a new file in place), or on older bash, a new
# file is written with noclobber (O_EXCL) and renamed with mv. The history settings are
# pinned so that the file holds exactly the one line, and it all stands in one compound
# command so that history records no command. GENESIS_HOOK_ATOMIC=mv forces the mv path.
# This leans on readline's private temp-file naming because nothing else renames without a
# fork: no bash builtin, loadable or not, calls rename(2). The mv path costs a fork and an
# exec: measured 3.5 ms a call against 2.3 ms here (bash -c true: 1.2 ms), past the hook's
# budget of twice bash -c true (`GENESIS_HOOK_ATOMIC=mv python bench/run.py --only 1`).
#
# 5. A rare command. The fast match ended at the value's first quote, which may be an
# escaped one: the 160 bytes from the value's start (found by the matched text, at its
# first occurrence) are taken again; \\ and \" are paired left to right (t keeps the
# offsets) to find the closing quote; an escape, a surrogate pair or a UTF-8 sequence that
# the cut (or the 4096-byte head) split is dropped. Control characters, unknown escapes
# and invalid UTF-8 come only from a malformed payload: then only safe characters are kept.
#
# 6. Every CLI's payload. Codex and Qwen Code send Claude Code's shape; Gemini CLI too,
# with its own event names (BeforeTool, AfterTool); opencode's plugin writes Claude Code's
# shape with opencode's names (tool.execute.before/after, and tool.execute.error of its own). Copilot CLI sends camelCase
# (toolName, sessionId) and no event name, so its hook command passes `--event NAME`;
# an event in the payload wins. Genesis maps every CLI's names to Claude Code's when it
# reads them (genesis.health.heartbeat.tool_event); the beat keeps the CLI's own.
#
# 7. Who ran the hook. "ppids" lists the hook's parent and its ancestors, nearest first,
# up to the CLI's pid (CLAUDE_PID, where the CLI sets it) or 4 of them, read from /proc/PID/stat
# with the read builtin (no fork; one read a level, none at all when the CLI ran the hook
# itself; on macOS, with no /proc, only the parent). The watcher counts a beat as a sign of
# life only when the CLI's own hook call wrote it, not a loop the agent runs below a tool
# (genesis.health.beatorigin): an environment variable can forge CLAUDE_PID, not $PPID.

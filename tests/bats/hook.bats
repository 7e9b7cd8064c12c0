#!/usr/bin/env bats
# The heartbeat hook: Claude-Code-shaped stdin, the test_tool form, hostile input.

bats_require_minimum_version 1.5.0
load test_helper

setup() {
  common_setup
  HB="${BATS_TEST_TMPDIR}/hb/Builder.json"
  mkdir -m 700 -p "${BATS_TEST_TMPDIR}/hb"
  export GENESIS_HEARTBEAT_FILE="${HB}"
}

json_field() { "${PY}" -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }

@test "PostToolUse stdin from Claude Code gives a heartbeat with tool, event, session and agent pid" {
  payload='{"session_id":"97f9-abc","transcript_path":"/x/97f9.jsonl","cwd":"/p","permission_mode":"bypassPermissions","hook_event_name":"PostToolUse","tool_name":"Bash","tool_input":{"command":"echo \"tool_name\": \"Evil\""},"tool_response":{"stdout":""},"tool_use_id":"toolu_1","duration_ms":5}'
  run -0 bash -c 'printf %s "$1" | GENESIS_AGENT=Builder GENESIS_RUN_ID=run-7 CLAUDE_PID=4242 "$2"' _ "${payload}" "${HOOK}"
  assert_output ""
  run -0 json_field "${HB}" tool; assert_output "Bash"
  run -0 json_field "${HB}" event; assert_output "PostToolUse"
  run -0 json_field "${HB}" session_id; assert_output "97f9-abc"
  run -0 json_field "${HB}" agent; assert_output "Builder"
  run -0 json_field "${HB}" pid; assert_output "4242"
  run -0 json_field "${HB}" run_id; assert_output "run-7"
  run -0 json_field "${HB}" timestamp; assert_output --regexp '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$'
  run -0 "${PY}" -c 'import json, sys, time; e = json.load(open(sys.argv[1]))["epoch"]; assert abs(time.time() - e) < 60, e' "${HB}"
}

@test "a failed tool call (PostToolUseFailure) and the start of one (PreToolUse) are heartbeats too" {
  run -0 bash -c 'echo "{\"session_id\":\"s1\",\"hook_event_name\":\"PostToolUseFailure\",\"tool_name\":\"Bash\",\"error\":\"Exit code 3\"}" | "$1"' _ "${HOOK}"
  run -0 json_field "${HB}" event; assert_output "PostToolUseFailure"
  run -0 bash -c 'echo "{\"session_id\":\"s1\",\"hook_event_name\":\"PreToolUse\",\"tool_name\":\"Write\"}" | "$1"' _ "${HOOK}"
  run -0 json_field "${HB}" event; assert_output "PreToolUse"
  run -0 json_field "${HB}" tool; assert_output "Write"
}

@test "the seed's manual test: genesis-heartbeat.sh test_tool with no stdin" {
  run -0 "${HOOK}" test_tool </dev/null
  assert_output ""
  run -0 json_field "${HB}" tool; assert_output "test_tool"
  rm "${HB}"
  run -0 "${HOOK}" test_tool <&-
  run -0 json_field "${HB}" tool; assert_output "test_tool"
}

@test "without a loop path it writes to a private per-user directory that genesis heartbeat show finds" {
  unset GENESIS_HEARTBEAT_FILE
  run -0 "${HOOK}" test_tool </dev/null
  [[ -f ${HOME}/.local/state/genesis/heartbeat.json ]] || false
  run -0 "${PY}" -c 'import os, stat, sys; print(oct(stat.S_IMODE(os.stat(sys.argv[1]).st_mode)))' "${HOME}/.local/state/genesis"
  assert_output "0o700"
  run -0 genesis heartbeat show
  assert_line "heartbeat file: ${HOME}/.local/state/genesis/heartbeat.json"
  assert_line --regexp '^age: [0-9.]+s'
  assert_output --partial "tool: test_tool"
}

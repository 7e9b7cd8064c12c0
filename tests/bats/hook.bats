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

@test "every CLI's payload: Gemini's event names, Copilot's camelCase with --event, an event in the payload wins" {
  run -0 bash -c 'echo "{\"session_id\":\"g1\",\"hook_event_name\":\"BeforeTool\",\"tool_name\":\"run_shell_command\",\"tool_input\":{\"command\":\"ls -la\"}}" | "$1"' _ "${HOOK}"
  run -0 json_field "${HB}" event; assert_output "BeforeTool"
  run -0 json_field "${HB}" tool; assert_output "run_shell_command"
  run -0 bash -c 'echo "{\"timestamp\":1,\"cwd\":\"/p\",\"sessionId\":\"c1\",\"toolName\":\"bash\",\"toolArgs\":\"{}\"}" | "$1" --event postToolUse' _ "${HOOK}"
  run -0 json_field "${HB}" event; assert_output "postToolUse"
  run -0 json_field "${HB}" tool; assert_output "bash"
  run -0 json_field "${HB}" session_id; assert_output "c1"
  run -0 bash -c 'echo "{\"hook_event_name\":\"AfterTool\",\"tool_name\":\"read_file\"}" | "$1" --event postToolUse' _ "${HOOK}"
  run -0 json_field "${HB}" event; assert_output "AfterTool"
  run -0 "${HOOK}" --event preToolUse my_tool </dev/null
  run -0 json_field "${HB}" event; assert_output "preToolUse"
  run -0 json_field "${HB}" tool; assert_output "my_tool"
  run -0 tool_lines
  assert_line --index 0 --regexp '^\{"cmd": "ls -la", "e": "BeforeTool", "pp": \[[0-9, ]+\], "t": [0-9.]+, "tool": "run_shell_command"\}$'
  assert_line --index 1 --regexp '^\{"e": "postToolUse", "ok": true, "pp": \[[0-9, ]+\], "t": [0-9.]+, "tool": "bash"\}$'
  assert_line --index 2 --regexp '^\{"e": "AfterTool", "ok": true, "pp": \[[0-9, ]+\], "t": [0-9.]+, "tool": "read_file"\}$'
}

@test "the manual test: genesis-heartbeat.sh test_tool with no stdin" {
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

# The tool log beside the heartbeat: one JSON line per event.
TOOLS() { printf '%s\n' "${HB%.json}.tools.jsonl"; }
tool_lines() { "${PY}" -c 'import json, sys; [print(json.dumps(json.loads(l), sort_keys=True)) for l in open(sys.argv[1], encoding="utf-8")]' "$(TOOLS)"; }

@test "the tool log gets one line per event: id, ok for post events, duration, and the command still escaped" {
  pre='{"session_id":"s1","transcript_path":"/x/s1.jsonl","cwd":"/p","hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"pytest -x \"tests/a b.py\"","description":"Run"},"tool_use_id":"toolu_9"}'
  post='{"session_id":"s1","cwd":"/p","hook_event_name":"PostToolUse","tool_name":"Bash","tool_input":{"command":"pytest -x \"tests/a b.py\""},"tool_response":{"stdout":"1 passed"},"tool_use_id":"toolu_9","duration_ms":812}'
  fail='{"session_id":"s1","cwd":"/p","hook_event_name":"PostToolUseFailure","tool_name":"Write","tool_input":{"file_path":"/p/notes.md","content":"x"},"tool_use_id":"toolu_10","error":"EACCES \"denied\"","is_interrupt":false,"duration_ms":13}'
  for payload in "${pre}" "${post}" "${fail}"; do
    run -0 bash -c 'printf %s "$1" | "$2"' _ "${payload}" "${HOOK}"
    assert_output ""
  done
  run -0 tool_lines
  assert_line --index 0 --regexp '^\{"cmd": "pytest -x \\"tests/a b.py\\"", "e": "PreToolUse", "id": "toolu_9", "pp": \[[0-9, ]+\], "t": [0-9.]+, "tool": "Bash"\}$'
  assert_line --index 1 --regexp '^\{"cmd": "pytest -x \\"tests/a b.py\\"", "e": "PostToolUse", "id": "toolu_9", "ms": 812, "ok": true, "pp": \[[0-9, ]+\], "t": [0-9.]+, "tool": "Bash"\}$'
  assert_line --index 2 --regexp '^\{"cmd": "/p/notes.md", "e": "PostToolUseFailure", "id": "toolu_10", "ms": 13, "ok": false, "pp": \[[0-9, ]+\], "t": [0-9.]+, "tool": "Write"\}$'
  [[ ${#lines[@]} -eq 3 ]] || false
  # the line's time is the heartbeat's
  run -0 "${PY}" -c 'import json, sys; a = json.loads(open(sys.argv[1]).read().splitlines()[-1])["t"]; b = json.load(open(sys.argv[2]))["epoch"]; assert a == b, (a, b)' "$(TOOLS)" "${HB}"
}

@test "without a loop heartbeat path there is no tool log; with the tool name form the line has no id" {
  unset GENESIS_HEARTBEAT_FILE
  run -0 "${HOOK}" test_tool </dev/null
  run -0 find "${HOME}" -name '*.tools.jsonl'
  assert_output ""
  export GENESIS_HEARTBEAT_FILE="${HB}"
  run -0 "${HOOK}" test_tool </dev/null
  run -0 tool_lines
  assert_output --regexp '^\{"e": "", "pp": \[[0-9, ]+\], "t": [0-9.]+, "tool": "test_tool"\}$'
}

@test "garbage on stdin gives a valid JSON line or none, never a broken one" {
  run -0 "${PY}" - "${HOOK}" "$(TOOLS)" <<'PYEOF'
import json, os, random, subprocess, sys
hook, log = sys.argv[1], sys.argv[2]
rnd = random.Random(11)
good = json.dumps({"hook_event_name": "PreToolUse", "tool_name": "Bash",
                   "tool_input": {"command": "echo \"\u00e9\\\\\" \u001b done" * 9}, "tool_use_id": "toolu_1"}).encode()
written = 0
for i in range(120):
    data = bytearray(good)
    if i % 3 == 0:
        data = bytearray(rnd.randbytes(rnd.randint(0, 600)))
    for _ in range(rnd.randint(0, 12)):
        data[rnd.randrange(len(data) or 1) if data else 0:0] = bytes([rnd.randrange(256)])
    if i % 3 == 1:
        data = data[:rnd.randint(0, len(data))]
    subprocess.run(["bash", hook], input=bytes(data), check=True)
    if os.path.exists(log):
        lines = open(log, "rb").read().split(b"\n")
        assert lines[-1] == b"", lines[-1]
        for line in lines[:-1]:
            json.loads(line.decode("utf-8"))  # strict: valid UTF-8 and valid JSON
            written += 1
        os.unlink(log)
assert written > 40, written
print(written)
PYEOF
}

@test "a symlink, a directory or a FIFO at the tool log's path is never written through" {
  echo "keep" >"${BATS_TEST_TMPDIR}/victim"
  ln -s "${BATS_TEST_TMPDIR}/victim" "$(TOOLS)"
  run -0 bash -c 'echo "{\"hook_event_name\":\"PreToolUse\",\"tool_name\":\"Bash\"}" | "$1"' _ "${HOOK}"
  run -0 cat "${BATS_TEST_TMPDIR}/victim"
  assert_output "keep"
  run -0 json_field "${HB}" event; assert_output "PreToolUse"   # the heartbeat itself still beats
  rm "$(TOOLS)"
  mkfifo "$(TOOLS)"
  run -0 timeout 5 bash -c 'echo "{\"hook_event_name\":\"PreToolUse\",\"tool_name\":\"Bash\"}" | "$1"' _ "${HOOK}"
  [[ -p $(TOOLS) ]] || false
  rm "$(TOOLS)"
  mkdir "$(TOOLS)"
  run -0 bash -c 'echo "{\"hook_event_name\":\"PreToolUse\",\"tool_name\":\"Bash\"}" | "$1"' _ "${HOOK}"
  run -0 find "$(TOOLS)" -mindepth 1
  assert_output ""
}

@test "50 concurrent hooks append 50 whole lines" {
  run -0 "${PY}" - "${HOOK}" "$(TOOLS)" <<'PYEOF'
import json, subprocess, sys
hook, log = sys.argv[1], sys.argv[2]
procs = []
for i in range(50):
    payload = json.dumps({"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_use_id": f"toolu_{i}",
                          "tool_input": {"command": f"echo {i} " + "x" * 150}}).encode()
    p = subprocess.Popen(["bash", hook], stdin=subprocess.PIPE)
    procs.append((p, payload))
for p, payload in procs:
    p.stdin.write(payload)
    p.stdin.close()
for p, _ in procs:
    assert p.wait(timeout=30) == 0
ids = sorted(int(json.loads(line)["id"].split("_")[1]) for line in open(log, encoding="utf-8"))
assert ids == list(range(50)), ids
PYEOF
}

@test "Genesis's own hook self-test beats but logs no tool call" {
  run -0 bash -c 'echo "{\"session_id\":\"genesis-self-test.1.ab\",\"hook_event_name\":\"PostToolUse\",\"tool_name\":\"Bash\",\"tool_input\":{\"command\":\"true\"},\"tool_use_id\":\"toolu_x\"}" | "$1"' _ "${HOOK}"
  run -0 json_field "${HB}" session_id; assert_output "genesis-self-test.1.ab"
  [[ ! -e $(TOOLS) ]] || false
}

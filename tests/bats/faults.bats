#!/usr/bin/env bats
# The fault suite, shell side: each test is named "fault N: ..." after the reliability
# list; run-tests.sh counts them with the pytest fault tests into one tally.

bats_require_minimum_version 1.5.0
load test_helper

setup() {
  common_setup
  HB="${BATS_TEST_TMPDIR}/hb/Builder.json"
  mkdir -p "${BATS_TEST_TMPDIR}/hb"
  chmod 700 "${BATS_TEST_TMPDIR}/hb"
  export GENESIS_HEARTBEAT_FILE="${HB}"
}

json_field() { "${PY}" -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }

loop_setup() {
  unset GENESIS_HEARTBEAT_FILE
  make_project
  genesis --project "${PROJECT}" hook install --scope local >/dev/null
}

# Starts the loop in the background (its own process group, as from a terminal) with an
# agent that hangs in a Bash call; returns once the agent runs, with the loop in LOOP_PID.
start_hung_loop() {
  fast_loop_env '*:*=hang'
  export HEARTBEAT_STALE=120s
  set -m
  # With the default SIGHUP and SIGINT, as from a terminal: under nohup, or with the suite started
  # in the background of a script, the loop would inherit them ignored, and bash cannot trap a
  # signal ignored at its start (exec keeps the pid the test signals).
  "${PY}" -c 'import os, signal as s, sys; [s.signal(n, s.SIG_DFL) for n in (s.SIGHUP, s.SIGINT)]; os.execv(sys.argv[1], sys.argv[1:])' \
    "${LOOP}" --project "${PROJECT}" >"${BATS_TEST_TMPDIR}/out" 2>&1 &
  LOOP_PID=$!
  set +m
  wait_until 30 log_has 1 Builder '[Bash]'
}

@test "fault 1: a symlink planted at the heartbeat path or its temp name is not followed" {
  echo "precious" >"${BATS_TEST_TMPDIR}/victim"
  ln -s "${BATS_TEST_TMPDIR}/victim" "${HB}"
  run -0 "${HOOK}" test_tool </dev/null
  assert_output ""
  run cat "${BATS_TEST_TMPDIR}/victim"; assert_output "precious"
  [[ -L ${HB} ]] || false
  # A symlink at the temp name bash 5's history writer would use (the hook's own pid, kept
  # across exec): the hook takes the mv path instead, the victim stays as it was.
  rm "${HB}"
  "${HOOK}" first </dev/null
  run -0 bash -c 'printf -v t "%s-%05d.tmp" "$2" "$(($$ % 100000))"; ln -s "$1" "$t"; exec "$3" second </dev/null' \
    _ "${BATS_TEST_TMPDIR}/victim" "${HB}" "${HOOK}"
  run cat "${BATS_TEST_TMPDIR}/victim"; assert_output "precious"
  run -0 json_field "${HB}" tool; assert_output "second"
}


@test "fault 2: the hook writes nothing into a heartbeat directory that is not its user's" {
  [[ $(id -u) == 0 ]] || skip "needs root to give the directory to another user"
  chown 65534 "${BATS_TEST_TMPDIR}/hb"
  run -0 "${HOOK}" test_tool </dev/null
  assert_output ""
  run ls -A "${BATS_TEST_TMPDIR}/hb"
  assert_output ""
}

@test "fault 20: garbage, binary and 10 MB stdin: exit 0, nothing printed, valid JSON" {
  run -0 bash -c 'echo "not json at all {{{" | "$1"' _ "${HOOK}"
  assert_output ""
  run -0 json_field "${HB}" tool; assert_output ""
  run -0 bash -c 'head -c 100000 /dev/urandom | "$1"' _ "${HOOK}"
  run -0 "${PY}" -c 'import json, sys; json.load(open(sys.argv[1]))' "${HB}"
  run -0 bash -c '{ printf "{\"hook_event_name\":\"PostToolUse\",\"tool_name\":\"Write\",\"tool_input\":{\"content\":\""; head -c 10000000 /dev/zero | tr "\0" a; printf "\"}}"; } | "$1"' _ "${HOOK}"
  assert_output ""
  run -0 json_field "${HB}" tool; assert_output "Write"
}


@test "fault 20: stdin that stays open without data does not block the hook" {
  mkfifo "${BATS_TEST_TMPDIR}/fifo"
  sleep 30 >"${BATS_TEST_TMPDIR}/fifo" &
  local writer=$!
  run timeout 10 "${HOOK}" <"${BATS_TEST_TMPDIR}/fifo"
  kill "${writer}" 2>/dev/null || true
  assert_success
  run -0 json_field "${HB}" tool; assert_output ""
}


@test "fault 20: absent and closed stdin: exit 0, a whole heartbeat" {
  run -0 "${HOOK}" absent </dev/null
  run -0 json_field "${HB}" tool; assert_output "absent"
  run -0 "${HOOK}" closed <&-
  run -0 json_field "${HB}" tool; assert_output "closed"
}

# Both ways the hook writes atomically: bash 5's history file writer, and a temp file + mv.
disk_full() {
  local fs="${BATS_TEST_TMPDIR}/full-$1" script
  mkdir -p "${fs}"
  # A real, tiny tmpfs in a private mount namespace (unshare), filled until ENOSPC.
  script='mount -t tmpfs -o size=64k,mode=700 tmpfs "$1" || exit 77
    GENESIS_HEARTBEAT_FILE="$1/hb.json" "$2" before </dev/null || exit 1
    cp "$1/hb.json" "$1/../before.json"
    dd if=/dev/zero of="$1/filler" bs=1k count=1000 2>/dev/null
    GENESIS_HOOK_ATOMIC="$3" GENESIS_HEARTBEAT_FILE="$1/hb.json" "$2" after </dev/null >"$1/../out" 2>&1
    echo "$?" >"$1/../status"
    cmp "$1/hb.json" "$1/../before.json" || exit 2
    cp "$1/hb.tools.jsonl" "$1/../tools.jsonl"
    ls -A "$1" >"$1/../listing"'
  run unshare --user --map-root-user --mount bash -c "${script}" _ "${fs}" "${HOOK}" "$1"
  [[ ${status} != 77 ]] || skip "cannot mount a tmpfs here (no mount namespace)"
  assert_success
  run cat "${BATS_TEST_TMPDIR}/status"; assert_output "0"
  run cat "${BATS_TEST_TMPDIR}/out"; assert_output ""
  run cat "${BATS_TEST_TMPDIR}/listing"; assert_output $'filler\nhb.json\nhb.tools.jsonl'
  run -0 json_field "${BATS_TEST_TMPDIR}/before.json" tool; assert_output "before"
  # The tool log holds whole lines only: the one written before the disk filled, maybe the new one.
  run -0 "${PY}" -c 'import json, sys; [json.loads(l) for l in open(sys.argv[1])]' "${BATS_TEST_TMPDIR}/tools.jsonl"
}

@test "fault 21: disk full: exit 0, nothing printed, the previous heartbeat intact, no temp file" {
  disk_full history
  disk_full mv
}

@test "fault 22: 100 concurrent invocations leave one whole heartbeat and no temp files" {
  local mode i
  "${HOOK}" first </dev/null
  for mode in history mv; do
    for i in $(seq 1 100); do GENESIS_HOOK_ATOMIC="${mode}" "${HOOK}" "${mode}_${i}" </dev/null & done
    wait
    run -0 json_field "${HB}" tool
    assert_output --regexp "^${mode}_[0-9]+$"
    run ls -A "${BATS_TEST_TMPDIR}/hb"
    assert_output $'Builder.json\nBuilder.tools.jsonl'
  done
  # Every invocation appended one whole line to the tool log: none lost, none interleaved.
  run -0 "${PY}" -c 'import json, sys; print(len([json.loads(l) for l in open(sys.argv[1])]))' \
    "${BATS_TEST_TMPDIR}/hb/Builder.tools.jsonl"
  assert_output "201"
}

interrupt_test() {
  local sig="$1" code="$2"
  start_hung_loop
  local loop="${LOOP_PID}"
  run -0 marked_count; refute_output "0"
  kill "-${sig}" "${loop}"
  local rc=0
  wait "${loop}" || rc=$?
  cat "${BATS_TEST_TMPDIR}/out"
  [[ ${rc} == "${code}" ]] || false
  run -0 marked_count; assert_output "0"
  run pgrep -f -- "--project ${PROJECT} .*run-phase"; assert_failure  # the watcher is gone too
  run grep -c "received SIG${sig}" "${BATS_TEST_TMPDIR}/out"; assert_output "1"
  [[ ! -e ${PROJECT}/.git/genesis/loop.json ]] || false
  run -0 genesis --project "${PROJECT}" report
  assert_output --regexp "ended [0-9-]+ [0-9:]+ [A-Z+0-9-]+ after [0-9hms]+ · exit ${code}"
  assert_output --partial "interrupted by SIG${sig}"
  assert_output --regexp "iteration 1 Builder: interrupted after [0-9hms]+"
}

@test "fault 24: SIGINT mid-phase: the agent tree is gone, the lock released, exit 130" {
  loop_setup
  interrupt_test INT 130
}


@test "fault 24: SIGTERM mid-phase: the agent tree is gone, exit 143" {
  loop_setup
  interrupt_test TERM 143
}


@test "fault 24: SIGHUP (terminal or SSH closed) to the loop's process group: as SIGTERM, exit 129" {
  loop_setup
  start_hung_loop
  local loop="${LOOP_PID}"
  run -0 marked_count; refute_output "0"
  # A hangup reaches the whole foreground process group: the loop and its watcher.
  kill -HUP -- "-${loop}"
  local rc=0
  wait "${loop}" || rc=$?
  cat "${BATS_TEST_TMPDIR}/out"
  [[ ${rc} == 129 ]] || false
  run -0 marked_count; assert_output "0"
  refute_output --partial "internal error"
  run grep -c "received SIGHUP" "${BATS_TEST_TMPDIR}/out"; assert_output "1"
  run -0 genesis --project "${PROJECT}" report
  assert_output --regexp "ended [0-9-]+ [0-9:]+ [A-Z+0-9-]+ after [0-9hms]+ · exit 129"
  assert_output --partial "interrupted by SIGHUP"
  assert_output --regexp "iteration 1 Builder: interrupted after [0-9hms]+"
}


@test "fault 19: a second loop on the same project is refused and names the running one" {
  loop_setup
  start_hung_loop
  local first="${LOOP_PID}"
  run -4 "${LOOP}" --project "${PROJECT}"
  assert_output --partial "another Genesis loop is already running on this project: pid ${first}"
  kill -TERM "${first}"
  wait "${first}" || true
  run -0 marked_count; assert_output "0"
}


@test "fault 19: a loop that was SIGKILLed does not block the next; its orphaned agent is reaped" {
  loop_setup
  # Without the box: in it the agent dies with its watcher (--die-with-parent), never an orphan.
  export GENESIS_SANDBOX=off
  start_hung_loop
  local first="${LOOP_PID}"
  # SIGKILL its companion, the loop, then its watcher: no trap runs and nobody settles the
  # night (as on a crash), the agent is orphaned, the lock stays.
  local watcher companion
  companion="$(pgrep -P "${first}" -f ' companion ')"
  watcher="$(pgrep -P "${first}" -f ' run-phase ')"
  kill -KILL "${companion}"
  kill -KILL "${first}"
  wait "${first}" || true
  kill -KILL "${watcher}"
  run -0 marked_count; refute_output "0"
  fast_loop_env '*:*=idle'
  run -0 "${LOOP}" --project "${PROJECT}" --max-iterations 1
  assert_output --regexp "reaped [0-9]+ leftover process\(es\) before Builder"
  run -0 marked_count; assert_output "0"
}

@test "fault 23: an internal error is reported with its reason; the loop cleans up and exits 1" {
  loop_setup
  cat >"${BATS_TEST_TMPDIR}/genesis-broken" <<WRAP
#!/usr/bin/env bash
# Fail the "iteration start" step (not the final step, whose --reason quotes it).
[[ " \$* " == *" iteration start "* && " \$* " != *" --reason "* && -e ${BATS_TEST_TMPDIR}/broken ]] && exit 42
exec "${REPO_ROOT}/.venv/bin/genesis" "\$@"
WRAP
  chmod +x "${BATS_TEST_TMPDIR}/genesis-broken"
  cat >"${BATS_TEST_TMPDIR}/agent.sh" <<AGENT
"${PY}" "${SPAWN}" detach "${BATS_TEST_TMPDIR}/leftover.pid" "${PY}" "${SPAWN}" sleep
touch "${BATS_TEST_TMPDIR}/broken"
AGENT
  fast_loop_env
  export GENESIS_AGENT_CMD="bash ${BATS_TEST_TMPDIR}/agent.sh"
  GENESIS_BIN="${BATS_TEST_TMPDIR}/genesis-broken" run -1 "${LOOP}" --project "${PROJECT}" --max-iterations 3
  assert_output --regexp "internal error: '[^']*' failed with status 42 at line [0-9]+"
  assert_output --regexp "ended [0-9-]+ [0-9:]+ [A-Z+0-9-]+ after [0-9hms]+ · exit 1"
  assert_output --regexp "internal error at line [0-9]+: genesis iteration start"
  run -0 marked_count; assert_output "0"
  [[ ! -e ${PROJECT}/.git/genesis/loop.json ]] || false
}


@test "fault 23: a watcher SIGKILLed mid-phase is a failed phase, reaped; three in a run stop the loop (exit 7)" {
  loop_setup
  cat >"${BATS_TEST_TMPDIR}/genesis-dies" <<WRAP
#!/usr/bin/env bash
if [[ " \$* " == *" run-phase "* ]]; then
  args=("\$@")
  for ((i = 0; i < \${#args[@]}; i++)); do
    case "\${args[i]}" in
      --phase) phase="\${args[i + 1]}" ;;
      --iteration) iteration="\${args[i + 1]}" ;;
    esac
  done
  log="\$(printf 'iter-%04d-%s.log' "\${iteration}" "\${phase}")"
  "${REPO_ROOT}/.venv/bin/genesis" "\$@" &
  watcher=\$!
  # Killed on an event, not after a delay: once its agent runs (the phase's log is there). A
  # phase the loop skips starts no agent and ends by itself.
  for _ in \$(seq 600); do
    kill -0 "\${watcher}" 2>/dev/null || break
    if compgen -G "${PROJECT}/orchestrator/logs/*/\${log}" >/dev/null; then
      sleep 0.5
      kill -KILL "\${watcher}"
      break
    fi
    sleep 0.1
  done
  wait "\${watcher}"
  exit
fi
exec "${REPO_ROOT}/.venv/bin/genesis" "\$@"
WRAP
  chmod +x "${BATS_TEST_TMPDIR}/genesis-dies"
  fast_loop_env '*:*=hang'
  export HEARTBEAT_STALE=120s
  # Without the box: in it the agent dies with its watcher (--die-with-parent), nothing to reap after.
  export GENESIS_SANDBOX=off
  GENESIS_BIN="${BATS_TEST_TMPDIR}/genesis-dies" run -7 "${LOOP}" --project "${PROJECT}" --max-iterations 3
  assert_output --partial "Builder: the watcher died of signal 9; the phase counts as failed"
  assert_output --partial -- "--- iteration 2 ---"
  assert_output --partial "the watcher died 3 times in this run"
  assert_output --regexp "reaped [0-9]+ leftover process\(es\) after the watcher of Builder died"
  run -0 marked_count; assert_output "0"
  run -0 genesis --project "${PROJECT}" report
  assert_output --regexp "iteration 1 Builder: watcher lost after [0-9hms]+; [0-9]+ processes ended"
  assert_output --partial "the watcher died of signal 9"
}

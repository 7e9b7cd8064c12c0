#!/usr/bin/env bats
# The loop end to end with the simulated Claude Code: real processes, git and signals.

bats_require_minimum_version 1.5.0
load test_helper

teardown() {
  [[ -z ${BYSTANDER:-} ]] || kill "${BYSTANDER}" 2>/dev/null || true
}

setup() {
  common_setup
  make_project
  genesis --project "${PROJECT}" hook install --scope local >/dev/null
}

breaker_field() {
  "${PY}" -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' \
    "${PROJECT}/orchestrator/.circuit_breaker.json" "$1"
}

@test "not a git work tree: a clear error before anything runs" {
  mkdir "${BATS_TEST_TMPDIR}/plain"
  run -2 "${LOOP}" --project "${BATS_TEST_TMPDIR}/plain"
  assert_output --partial "is not a git work tree"
  [[ ! -e ${BATS_TEST_TMPDIR}/plain/orchestrator ]] || false
}

@test "a healthy phase: heartbeats from every tool call, work committed, breaker CLOSED" {
  fast_loop_env '*:*=work'
  run -0 "${LOOP}" --project "${PROJECT}" --max-iterations 1
  assert_output --partial "Builder: finished"
  assert_output --partial "iteration 1: progress (new commits); breaker CLOSED"
  run -0 git -C "${PROJECT}" log --oneline
  assert_output --partial "Builder: iteration 1"
  run -0 genesis --project "${PROJECT}" heartbeat show --phase Builder
  assert_output --partial "agent: Builder"
  assert_output --regexp "tool: Bash  event: PostToolUse  session: [0-9a-f-]{36}"
  run -0 breaker_field state; assert_output "CLOSED"
  run -0 git -C "${PROJECT}" status --porcelain
  assert_output ""
}

@test "a hung agent is killed with its tree and the loop goes on to the next phase" {
  fast_loop_env '*:Builder=hang,*:Planner=work'
  run -0 "${LOOP}" --project "${PROJECT}" --max-iterations 1
  # The reason names the tool in flight, with its command, from the hook's tool log.
  assert_output --regexp "Builder: stuck: no heartbeat for [0-9.]+s \(stale after 4s\); the tool in flight: Bash .*time.sleep\(3600\).* since [0-9:]+; killed [0-9]+ process"
  assert_output --partial "[Bash] "
  assert_output --partial "Planner: finished"
  # Retried once (PHASE_RETRIES=1), stuck again: failed for the iteration, and the loop went on.
  assert_output --partial "Builder: stuck; retrying in 0s (retry 1 of 1"
  assert_output --partial "Builder: stuck again; its retries (PHASE_RETRIES=1) are spent: the phase failed"
  run -0 marked_count; assert_output "0"
  run -0 genesis --project "${PROJECT}" report
  assert_output --partial "1 iteration · 3 phases, 2 abnormal"
  assert_output --regexp "iteration 1 Builder: stuck after [0-9]+s"
  assert_output --regexp "iteration 1 Builder \(retry 1\): stuck after [0-9]+s"
  assert_output --partial "retry of a stuck phase"
  # Each stuck run left an incident record of what it was doing.
  run -0 genesis --project "${PROJECT}" incidents
  assert_line --index 0 --partial "Builder"
  [[ ${#lines[@]} -eq 2 ]] || false
}

@test "a window set by its old name still holds, and the start says the name is old" {
  fast_loop_env '*:Builder=hang'
  unset HEARTBEAT_STALE
  export HEARTBEAT_STALE_SECONDS=4 GENESIS_PHASES=Builder PHASE_RETRIES=0
  run -0 "${LOOP}" --project "${PROJECT}" --max-iterations 1
  assert_output --partial "HEARTBEAT_STALE_SECONDS is an old name: write HEARTBEAT_STALE=4s"
  assert_output --regexp "Builder: stuck: no heartbeat for [0-9.]+s \(stale after 4s\)"
}

@test "a server left on a port is reaped after the phase; an unrelated one survives" {
  local ours theirs
  ours="$(free_port)"
  theirs="$(free_port)"
  # Its own output and no bats descriptor: a failed assertion must not leave bats waiting on it.
  "${PY}" "${SPAWN}" listen "${theirs}" >/dev/null 2>&1 3>&- &
  BYSTANDER=$!
  local bystander=${BYSTANDER}
  fast_loop_env '*:*=server'
  export GENESIS_AGENT_CMD="${PY} -m genesis.demo.simagent --port ${ours} --script '*:*=server'"
  export REAP_PORTS="${ours} ${theirs}"
  # The sweep's own work, without the box: in it the server dies with the box first.
  export GENESIS_SANDBOX=off
  mkdir -p "${PROJECT}/server" && touch "${PROJECT}/server/__init__.py"
  cp "${REPO_ROOT}/tests/helpers/spawn.py" "${PROJECT}/server/main.py"
  sed -i.bak 's/^    main(sys.argv\[1:\])$/    main(["listen"] + sys.argv[1:])/' "${PROJECT}/server/main.py"
  run -0 "${LOOP}" --project "${PROJECT}" --max-iterations 1
  # Ended with the phase by the watcher (it carries the run's marker), before any reaper.
  assert_output --regexp "Builder: ended 1 process\(es\) the agent left behind: pid [0-9]+ '.*server.main ${ours}' \(carries this run's marker\)"
  assert_output --regexp "port ${theirs} is held by pid ${bystander} .*not this loop's: left alone"
  # ...and recorded in the ledger, not only printed.
  run -0 "${PY}" -c 'import sys; from genesis.ledger import Ledger
led = Ledger.open(sys.argv[1], readonly=True)
print(sum((p["port"], p["pid"]) == (int(sys.argv[2]), int(sys.argv[3]))
          for e in led.events(kinds=("foreign_port",)) for p in e["ports"]))' \
    "${PROJECT}/.git/genesis/ledger.sqlite3" "${theirs}" "${bystander}"
  refute_output "0"
  run -0 marked_count; assert_output "0"
  kill -0 "${bystander}"
  kill "${bystander}"
}

@test "no progress: HALF_OPEN at 3, OPEN at 5, the loop stops with exit 3" {
  fast_loop_env '*:*=idle'
  run -3 "${LOOP}" --project "${PROJECT}" --max-iterations 10
  assert_output --partial "iteration 3: no progress; breaker HALF_OPEN"
  assert_output --partial "iteration 5: no progress; breaker OPEN after 5 iteration(s) in a row"
  refute_output --partial -- "--- iteration 6 ---"
  run -0 breaker_field state; assert_output "OPEN"
  run -0 breaker_field no_progress_count; assert_output "5"
}

@test "an OPEN breaker survives a restart; deleting the file resets it; a change closes it" {
  fast_loop_env '*:*=idle'
  export CB_WARNING_THRESHOLD=1 CB_STOP_THRESHOLD=2
  run -3 "${LOOP}" --project "${PROJECT}" --max-iterations 5
  run -3 "${LOOP}" --project "${PROJECT}" --max-iterations 5
  assert_output --partial "circuit breaker is OPEN"
  assert_output --regexp "reset it: [^ ]*genesis --project [^ ]*/project breaker reset"
  refute_output --partial -- "--- iteration 1 ---"
  rm "${PROJECT}/orchestrator/.circuit_breaker.json"
  run -3 "${LOOP}" --project "${PROJECT}" --max-iterations 5
  assert_output --partial "--- iteration 2 ---"
  echo "new idea" >>"${PROJECT}/README.md"
  run -2 "${LOOP}" --project "${PROJECT}" --max-iterations 5
  assert_output --partial "uncommitted changes of yours: README.md"
  git -C "${PROJECT}" commit -qam "a new idea"
  run -3 "${LOOP}" --project "${PROJECT}" --max-iterations 5
  assert_output --partial "the repository changed since then, so it is CLOSED again"
}

@test "the flag file set to false stops the loop, and genesis stop sets it" {
  cat >"${BATS_TEST_TMPDIR}/agent.sh" <<'AGENT'
echo "iteration $GENESIS_ITERATION" >> progress.txt
[ "$GENESIS_ITERATION" = 2 ] && genesis --project . stop
exit 0
AGENT
  fast_loop_env
  export GENESIS_AGENT_CMD="bash ${BATS_TEST_TMPDIR}/agent.sh"
  run -0 "${LOOP}" --project "${PROJECT}" --max-iterations 10
  assert_output --partial "stop flag ${PROJECT}/hooks/loop_multi_agent.txt says false"
  refute_output --partial -- "--- iteration 3 ---"
  run cat "${PROJECT}/hooks/loop_multi_agent.txt"; assert_output "false"
  # the next start resets a flag left false by an earlier stop
  run -0 "${LOOP}" --project "${PROJECT}" --max-iterations 1
  assert_output --partial "said false (an earlier stop); set it back to true"
}


@test "Claude Code without a working hook is refused at start; with it, the self-test passes" {
  genesis --project "${PROJECT}" hook uninstall --scope local >/dev/null
  mkdir -p "${BATS_TEST_TMPDIR}/bin"
  printf '#!/usr/bin/env bash\necho "claude stub: $*"\n' >"${BATS_TEST_TMPDIR}/bin/claude"
  chmod +x "${BATS_TEST_TMPDIR}/bin/claude"
  fast_loop_env
  PATH="${BATS_TEST_TMPDIR}/bin:${PATH}" run -2 "${LOOP}" --project "${PROJECT}" --agent-cmd "claude -p" --max-iterations 1
  assert_output --partial "the heartbeat hook does not work (not_installed)"
  assert_output --regexp "[^ ]*genesis --project [^ ]*/project hook status --agent claude"
  # Installed, but its script was moved away: broken, and refused too.
  mkdir "${BATS_TEST_TMPDIR}/moved"
  cp "${REPO_ROOT}/genesis/data/genesis-heartbeat.sh" "${BATS_TEST_TMPDIR}/moved/"
  "${PY}" - "${PROJECT}/.claude/settings.local.json" "${BATS_TEST_TMPDIR}/moved/genesis-heartbeat.sh" <<'PY'
import json, sys
hook = {"type": "command", "command": f"bash {sys.argv[2]}", "timeout": 10}
json.dump({"hooks": {"PostToolUse": [{"matcher": "*", "hooks": [hook]}]}}, open(sys.argv[1], "w"))
PY
  rm -r "${BATS_TEST_TMPDIR}/moved"
  PATH="${BATS_TEST_TMPDIR}/bin:${PATH}" run -2 "${LOOP}" --project "${PROJECT}" --agent-cmd "claude -p" --max-iterations 1
  assert_output --partial "the heartbeat hook does not work (broken)"
  [[ ! -e ${PROJECT}/.git/genesis/loop.json ]] || false
  rm "${PROJECT}/.claude/settings.local.json"
  genesis --project "${PROJECT}" hook install --scope local >/dev/null
  PATH="${BATS_TEST_TMPDIR}/bin:${PATH}" run -0 "${LOOP}" --project "${PROJECT}" --agent-cmd "claude -p" --max-iterations 1
  assert_output --partial "heartbeat hook: working (local settings"
  # Claude Code runs with structured output added; the raw stream is kept beside the transcript.
  run -0 grep -c "claude stub: -p --output-format stream-json --verbose You are the Builder" "$(agent_log 1 Builder)"
  run -0 grep -c "claude stub: -p --output-format stream-json --verbose You are the Builder" \
    "$(agent_log 1 Builder | sed 's/\.log$/.jsonl/')"
}

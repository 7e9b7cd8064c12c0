#!/usr/bin/env bats
# The fault suite, continued: a careless or hostile agent, in the loop for real. Each test is
# named "fault N: ..." and counts in the tally with the others.

bats_require_minimum_version 1.5.0
load test_helper

setup() {
  common_setup
  make_project
  genesis --project "${PROJECT}" hook install --scope local >/dev/null
  STATE="${PROJECT}/.git/genesis"
}

breaker_field() {
  "${PY}" -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' \
    "${PROJECT}/orchestrator/.circuit_breaker.json" "$1"
}

# Iteration 1 is idle (HALF_OPEN at 1); in iteration 2 the Builder runs $1, a command that
# wipes Genesis's files in the work tree, and changes nothing else. The breaker must go on
# counting (OPEN at 3) instead of starting over, and nothing may be killed as stuck.
wipe_test() {
  fast_loop_env "2:Builder=bash:$1,*:*=idle"
  export CB_WARNING_THRESHOLD=1 CB_STOP_THRESHOLD=3
  run -3 "${LOOP}" --project "${PROJECT}" --max-iterations 6
  LOOP_OUTPUT="${output}"
  assert_output --partial "iteration 1: no progress; breaker HALF_OPEN"
  assert_output --partial "iteration 3: no progress; breaker OPEN after 3 iteration(s) in a row"
  refute_output --partial ": stuck:"
  refute_output --partial "genesis: error"
  run -0 breaker_field no_progress_count; assert_output "3"
  run -0 genesis --project "${PROJECT}" report
  assert_output --partial "3 iterations · 6 phases ·"
  refute_output --partial "abnormal"
  run -0 marked_count; assert_output "0"
  output="${LOOP_OUTPUT}"  # the loop's, for the caller's assertions
}

@test "fault 25: an agent runs git clean -fdx mid-phase: breaker, hook, logs and lock survive; the night goes on" {
  wipe_test "git%20clean%20-fdx"
  assert_output --regexp "repaired: the breaker file .* was deleted while the loop ran; restored \(HALF_OPEN, 1 without progress\)"
  # git clean took the local settings with the hook: reinstalled where it was, before the Planner ran.
  assert_output --regexp "repaired: the heartbeat hook stopped working .*; reinstalled it in ${PROJECT}/.claude/settings.local.json"
  [[ -f ${PROJECT}/.claude/settings.local.json ]] || false
  assert_output --partial "was deleted; restored from Genesis's copy"
  run -0 grep -c -- "--- iteration 1 ---" "$(dirname "$(agent_log 3 Builder)")/console.log"
}

@test "fault 26: an agent runs rm -rf orchestrator, or git stash -a, mid-phase: the same" {
  wipe_test "rm%20-rf%20orchestrator"
  assert_output --regexp "repaired: the breaker file .* was deleted while the loop ran; restored"
  git -C "${PROJECT}" reset -q --hard
  rm -f "${PROJECT}/orchestrator/.circuit_breaker.json"
  wipe_test "git%20stash%20-a%20-q"
  assert_output --regexp "repaired: the breaker file .* was deleted while the loop ran; restored"
}

@test "fault 36: an agent runs chmod -R 777 . or chmod 500 on the state folders: reset with a warning, never a refusal" {
  export GENESIS_SANDBOX=off  # what Genesis does without the box (in it, the state folders are read-only)
  fast_loop_env "1:Builder=bash:chmod%20-R%20777%20.,2:Builder=bash:chmod%20500%20.git/genesis%20.git/genesis/heartbeats,*:*=idle"
  run -0 "${LOOP}" --project "${PROJECT}" --max-iterations 3
  assert_output --regexp "repaired: ${STATE}/heartbeats had mode 777; reset to 700"
  assert_output --regexp "repaired: ${STATE} had mode 500; reset to 700"
  refute_output --partial ": stuck:"
  run -0 genesis --project "${PROJECT}" report
  assert_output --partial "3 iterations · 6 phases ·"
  refute_output --partial "abnormal"
  run stat -c %a "${STATE}" "${STATE}/heartbeats"
  assert_output $'700\n700'
}

@test "fault 37: an agent edits genesis.conf mid-run: reported, and only the next start applies it" {
  # Iteration 1's Builder loosens its own supervision; iteration 2's Builder hangs.
  local edit="printf%20%27HEARTBEAT_STALE=86400\\nAUTO_COMMIT=false\\n%27%20>orchestrator/genesis.conf"
  fast_loop_env "1:Builder=bash:${edit}+edit,2:Builder=hang,*:*=idle"
  run -0 "${LOOP}" --project "${PROJECT}" --max-iterations 2
  assert_output --partial "orchestrator/genesis.conf changed during the run; the loop keeps the settings it started with"
  assert_output --regexp "Builder: stuck: no heartbeat for [0-9.]+s \(stale after 4s\)"
  run -0 git -C "${PROJECT}" log --format=%s
  assert_output --partial "genesis: Builder, iteration 1 (finished)"
  # The next start reads the edited file: the 86400 s window is in force.
  run -0 env -u HEARTBEAT_STALE genesis --project "${PROJECT}" config show
  assert_output --regexp "HEARTBEAT_STALE +86400 +\[file\]"
}

@test "fault 29: the agent signals the watcher (pkill -f run-phase): the night goes on" {
  [[ $(uname) == Linux ]] || skip "only Linux tells a signal's sender"
  export GENESIS_SANDBOX=off  # without the box (in it, the agent cannot see its watcher: tests/scenarios/test_box_faults.py)
  # Only this test's watcher: the pattern names the project. gen[e]sis: it must not match the
  # agent's own command line, which quotes it.
  fast_loop_env "1:Builder=bash:pkill%20-TERM%20-f%20%27bin/gen[e]sis%20--project%20${PROJECT}%20.*run-phase%27+work,*:*=idle"
  run -0 "${LOOP}" --project "${PROJECT}" --max-iterations 2
  assert_output --regexp "signal .*SIGTERM.* from pid [0-9]+ .*ignored"
  assert_output --partial "Builder: finished"
  assert_output --partial -- "--- iteration 2 ---"
  run -0 git -C "${PROJECT}" log --format=%s
  assert_output --partial "Builder: iteration 1"
}

@test "fault 29: the agent SIGKILLs its watcher: a failed phase, reaped, and the night goes on" {
  export GENESIS_SANDBOX=off  # without the box (in it, the agent cannot see its watcher)
  fast_loop_env "1:Builder=bash:pkill%20-KILL%20-f%20%27bin/gen[e]sis%20--project%20${PROJECT}%20.*run-phase.*Builder%27+hang,*:*=idle"
  run -0 "${LOOP}" --project "${PROJECT}" --max-iterations 2
  assert_output --partial "Builder: the watcher died of signal 9; the phase counts as failed"
  assert_output --partial -- "--- iteration 2 ---"
  run -0 marked_count; assert_output "0"
}

# Common setup for the bats suites: a hermetic environment, a real git project, the repo's tools.
# shellcheck disable=SC2034  # HOOK, LOOP, SPAWN are used by the .bats files

REPO_ROOT="$(cd "${BATS_TEST_DIRNAME}/../.." && pwd)"
LIBS="${BATS_LIB_DIR:-${REPO_ROOT}/.tools/bats/node_modules}"
load "${LIBS}/bats-support/load"
load "${LIBS}/bats-assert/load"

HOOK="${REPO_ROOT}/hooks/genesis-heartbeat.sh"
LOOP="${REPO_ROOT}/start-multi-agent-loop.sh"
PY="${REPO_ROOT}/.venv/bin/python"
SPAWN="${REPO_ROOT}/tests/helpers/spawn.py"

# Unset what a test must not inherit: the caller's Genesis settings, agent CLI config folders,
# API keys and XDG folders would point what the test runs at the developer's own files. The
# same list as tests/helpers/hermetic.py (tests/test_hermetic.py checks that they agree).
hermetic_env() {
  local name
  while IFS= read -r name; do
    case "${name}" in
      GENESIS_* | HEARTBEAT_* | AGENT_MAX* | CB_* | REAP_* | PHASE_* | AUTO_* | ITERATION_PAUSE* | KILL_GRACE* | \
        XDG_* | CLAUDE* | ANTHROPIC_* | CODEX_* | OPENAI_* | GEMINI_* | GOOGLE_* | QWEN_* | OPENCODE* | \
        COPILOT_* | AIDER_* | \
        CLOUDSDK_CONFIG | GH_CONFIG_DIR | GH_TOKEN | GH_HOST | GITHUB_TOKEN | \
        GIT_DIR | GIT_WORK_TREE | GIT_INDEX_FILE | GIT_CONFIG_GLOBAL | OLDPWD)
        unset "${name}"
        ;;
    esac
  done < <(compgen -e)
}

common_setup() {
  hermetic_env
  export HOME="${BATS_TEST_TMPDIR}/home"
  mkdir -p "${HOME}"
  export PATH="${REPO_ROOT}/.venv/bin:${PATH}"
  export NO_COLOR=1
  export GENESIS_NOTIFY_DESKTOP=false  # no desktop pop-up for each test loop's end on a developer's machine
  # The test's folder is its TMPDIR: the agent's box gives the agent a private /tmp with TMPDIR
  # bound back in, so what a test shares with its agents there stays in reach (as tests/conftest.py).
  export TMPDIR="${BATS_TEST_TMPDIR}"
}

# A real git project with one commit.
make_project() {
  PROJECT="${BATS_TEST_TMPDIR}/project"
  mkdir -p "${PROJECT}"
  git -C "${PROJECT}" init -q
  git -C "${PROJECT}" config user.name "Test"
  git -C "${PROJECT}" config user.email "test@example.invalid"
  echo "hello" >"${PROJECT}/README.md"
  git -C "${PROJECT}" add -A
  git -C "${PROJECT}" commit -qm init
}

# Fast time knobs for loop tests, and the simulated Claude Code as the agent. Phases and
# triggers stay the shipped defaults: in a project without TASKS.md the Builder and the
# Planner run every iteration and the Criticizer is skipped.
fast_loop_env() {
  export HEARTBEAT_CHECK_INTERVAL=0.2 HEARTBEAT_STALE=4s AGENT_MAX_RUNTIME=60s
  export KILL_GRACE_SECONDS=1 ITERATION_PAUSE_SECONDS=0 PHASE_RETRY_DELAY_SECONDS=0 REAP_PORTS=""
  export GENESIS_AGENT_CMD="${PY} -m genesis.demo.simagent --script '${1:-*:*=idle}'"
}

# The agent log of iteration $1, phase $2, in the project's latest run (fails if none).
agent_log() {
  local log
  log="$(find "${PROJECT}/orchestrator/logs" -name "iter-$(printf %04d "$1")-$2.log" 2>/dev/null | sort | tail -n 1)"
  [[ -n ${log} ]] && printf '%s\n' "${log}"
}

# True once the agent log of iteration $1, phase $2 contains the fixed string $3.
log_has() {
  local log
  log="$(agent_log "$1" "$2")" && grep -qF -- "$3" "${log}"
}

# How many processes carry this project's loop marker (must be 0 after any stop).
marked_count() {
  "${PY}" -c 'import sys; from genesis.procs.proctree import marked; print(len(marked({"GENESIS_PROJECT_DIR": sys.argv[1]})))' \
    "$(cd "${PROJECT}" && pwd)"
}

free_port() {
  "${PY}" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Wait up to $1 seconds for a command to succeed.
wait_until() {
  local limit="$1" i=0
  shift
  until "$@"; do
    i=$((i + 1))
    ((i > limit * 10)) && return 1
    sleep 0.1
  done
}

#!/usr/bin/env bash
# run-tests.sh - install the test dependencies and run every test: pytest, then bats.
#
# Usage: ./run-tests.sh [--quick] [PYTEST_ARGS...]
#
# Installs Genesis and pytest, and shellcheck from PyPI, into .venv/ (git ignores it), and
# the programs the tests drive into .tools/ with tests/install-tools.sh (see there: bats,
# the pinned agent CLIs, Chromium and tmux; whatever could not be installed has its tests
# skipped, with the reason shown). Extra arguments go to pytest.
#
#   --quick   the unit tests only, in about a minute: no tests/e2e (the real agent CLIs),
#             no tests/scenarios (whole loops), no test marked whole (a loop, a fleet, a
#             browser elsewhere) or temporal (the dev server) and, of the bats suites, only the hook's
#             (tests/bats/hook.bats). Installs bats but no agent CLI, Chromium or tmux:
#             the unit tests that need one are skipped with the reason where it is missing.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")"
quick=false
if [[ ${1:-} == --quick ]]; then
  quick=true
  shift
fi

# The programs the tests drive install while pip installs Genesis: neither needs the other.
tools=(tests/install-tools.sh)
if [[ ${quick} == true ]]; then
  tools+=(--quick)
fi
# In a process group of its own, so that if pip fails, the exit ends npm and apt with it.
set -m
"${tools[@]}" &
tools_pid=$!
set +m
trap 'kill -- "-${tools_pid}" 2>/dev/null || true' EXIT
if [[ ! -x .venv/bin/python ]]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
# Genesis's bytecode, and the tests' helpers', compiled up front: every loop step, `genesis`
# call, stub and simulated agent the tests start is a new Python process, and where
# PYTHONDONTWRITEBYTECODE is set (many containers set it) each would compile what it imports
# from source again, over a minute of the suite's time on 2 cores. A module changed since is
# recompiled in memory; one that does not compile is the tests' to report.
.venv/bin/python -m compileall -q genesis tests >/dev/null || true
if [[ ${quick} == true ]]; then
  lane=(--ignore=tests/e2e --ignore=tests/scenarios -m "not whole and not temporal and not heavy")
  bats_suites=(tests/bats/hook.bats)
else
  lane=()
  bats_suites=(tests/bats)
fi
# The test modules, rewritten by pytest for its assertions, once here while the tools install,
# not by each of the workers at its start (tests/conftest.py keeps them); a run of chosen tests
# leaves it to pytest. A module that does not import is the run's to report.
if (($# == 0)); then
  .venv/bin/python -m pytest --collect-only -q -p no:cacheprovider ${lane[@]+"${lane[@]}"} >/dev/null 2>&1 || true
fi
wait "${tools_pid}"

export PATH="${PWD}/.venv/bin:${PATH}"
status=0
tally="$(mktemp)"
tap="$(mktemp)"
tap_err="$(mktemp)"
# bats runs beside pytest: both spend most of their time waiting on real loops, agents and
# windows, not on the CPU. Its report is printed after pytest's. Started with job control
# on: a background job of a script otherwise ignores SIGINT, and so would every loop the
# fault tests interrupt.
set -m
.tools/bats/node_modules/bats/bin/bats "${bats_suites[@]}" >"${tap}" 2>"${tap_err}" &
bats_pid=$!
set +m
# Its own process group: on Ctrl-C (or any exit) it is ended with us.
trap 'kill -- "-${bats_pid}" 2>/dev/null || true; rm -f "${tally}" "${tap}" "${tap_err}"' EXIT
# Four workers by default, on 2 cores: most of the longest tests wait on real loops and windows,
# not on the CPU, and they start first (tests/conftest.py, LONGEST_FIRST), so the short files fill
# the cores meanwhile (GENESIS_TEST_WORKERS; 0 runs them in one process). Every test
# makes its own projects, ports, tmux servers and process trees; a file's tests stay in one
# worker, one after the other, and no two files mark their agents with the same run id,
# so no watcher's sweep or reaper of one worker can take the other's processes for its own.
# (--dist loadfile is in pyproject.toml's pytest options.)
# In a whole run the tests marked heavy (the multi-machine Temporal scenarios, and the 50-child
# fleet, which loads both cores on its own) run after all the others: no test that waits on a
# window of its own runs beside them.
split=()
if [[ ${quick} == false ]] && (($# == 0)); then
  split=(-m "not heavy")
fi
# The slowest tests are named at the end (--durations): where the suite's time goes.
GENESIS_FAULT_TALLY="${tally}" .venv/bin/python -m pytest -n "${GENESIS_TEST_WORKERS:-4}" --durations=25 \
  ${lane[@]+"${lane[@]}"} ${split[@]+"${split[@]}"} "$@" || status=$?
wait "${bats_pid}" || status=$?
if ((${#split[@]} > 0)); then
  # The heavy Temporal scenarios (a dev server and two machines each) three at a time: more
  # do not finish sooner (docs/maintainers/testing.md); the files with the most of them first.
  # Then the 50-child fleet alone. Each collects only the folder its tests live in
  # (tests/conftest.py, HEAVY_HOMES, refuses a heavy test elsewhere).
  GENESIS_FAULT_TALLY="${tally}" .venv/bin/python -m pytest -n 3 --loadscope-reorder -m "heavy and temporal" \
    --durations=10 tests/temporal || status=$?
  GENESIS_FAULT_TALLY="${tally}" .venv/bin/python -m pytest -n 0 -m "heavy and not temporal" tests/scenarios ||
    status=$?
fi
cat "${tap}"
cat "${tap_err}" >&2
# The fault suite's tally (pytest and bats together), then the total over every test: only
# for a whole run, where every fault's tests ran.
if [[ ${quick} == false ]] && (($# == 0)); then
  .venv/bin/python tests/fault_tally.py "${tally}" "${tap}" || status=$?
fi
exit "${status}"

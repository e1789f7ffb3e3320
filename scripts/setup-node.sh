#!/usr/bin/env bash
# Installs the npm packages the tests run, exactly as tests/mcp/package-lock.json pins them, into
# tests/mcp/node_modules: the MCP "everything" reference server that the capabilities' `mcp`
# binding is tested against, and the MCP Inspector whose CLI mode is tested against Parley's
# `/mcp`. Installs Debian's nodejs and npm when npm is missing.
#
# Idempotent: node_modules is reused while the lock file's hash matches the one stored at the
# last install.
#
# Usage: scripts/setup-node.sh [--force]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="$ROOT/tests/mcp"
STAMP="$DIR/node_modules/.parley-lock.sha256"

log() { printf 'setup-node: %s\n' "$*" >&2; }

if ! command -v npm >/dev/null 2>&1; then
    log "npm not found; installing Debian's nodejs and npm"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq nodejs npm >/dev/null
fi

want="$(sha256sum "$DIR/package-lock.json" | cut -d' ' -f1)"
server="$DIR/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
inspector="$DIR/node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js"
if [[ "${1:-}" != "--force" && -f "$STAMP" && -f "$server" && -f "$inspector" && "$(cat "$STAMP")" == "$want" ]]; then
    log "tests/mcp/node_modules is up to date (lock $(cut -c1-12 <<<"$want"))"
    exit 0
fi

log "installing tests/mcp's pinned npm packages (node $(node --version))"
(cd "$DIR" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error)
# Fail now, not in the tests, if a package is not where the tests look for it.
test -f "$server"
test -f "$inspector"
echo "$want" >"$STAMP"
log "done: $DIR/node_modules"

#!/usr/bin/env bash
# Creates (or reuses) the Python virtual environment at <repo>/.venv used by the interop
# tests (tests/interop: the NLIP reference SDK; tests/agentconnect: AgentConnect, the ANP
# reference implementation) and by the HTTP benchmark's reference-server baseline.
#
# Idempotent: an existing .venv whose stored requirements hash matches
# tests/interop/requirements.txt (and the same Python) is reused as is; otherwise it is
# rebuilt from scratch. Installs Debian's python3-venv when `python3 -m venv` is missing.
#
# Usage: scripts/setup-python.sh [--force]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
REQ="$ROOT/tests/interop/requirements.txt"
STAMP="$VENV/.parley-requirements.sha256"
PYTHON="${PYTHON:-python3}"

log() { printf 'setup-python: %s\n' "$*" >&2; }

if ! command -v "$PYTHON" >/dev/null 2>&1; then
    log "$PYTHON not found; installing Debian's python3"
    apt-get update -qq && apt-get install -y -qq python3 python3-venv >/dev/null
    PYTHON=python3
fi

py_version="$("$PYTHON" -c 'import sys; print(".".join(map(str, sys.version_info[:3])))')"
want="$( { sha256sum "$REQ" | cut -d' ' -f1; echo "python $py_version"; } | sha256sum | cut -d' ' -f1)"

force=0
[[ "${1:-}" == "--force" ]] && force=1

if [[ $force -eq 0 && -x "$VENV/bin/python" && -f "$STAMP" && "$(cat "$STAMP")" == "$want" ]]; then
    log ".venv is up to date (python $py_version, requirements $(sha256sum "$REQ" | cut -c1-12))"
    exit 0
fi

if [[ -e "$VENV" ]]; then
    log "rebuilding .venv (requirements or Python changed)"
    rm -rf "$VENV"
fi

if ! "$PYTHON" -m venv "$VENV" 2>/dev/null; then
    rm -rf "$VENV"
    log "python3 -m venv failed; installing Debian's python3-venv"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
    # Debian's venv module belongs to Debian's interpreter.
    PYTHON=/usr/bin/python3
    py_version="$("$PYTHON" -c 'import sys; print(".".join(map(str, sys.version_info[:3])))')"
    want="$( { sha256sum "$REQ" | cut -d' ' -f1; echo "python $py_version"; } | sha256sum | cut -d' ' -f1)"
    "$PYTHON" -m venv "$VENV"
fi

log "installing pinned requirements into .venv (python $py_version)"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --requirement "$REQ"
# Fail now, not in the tests, if something is missing.
"$VENV/bin/python" -c 'import nlip_sdk.nlip, nlip_server.echo, uvicorn, pytest, httpx, openai, websockets, agent_connect.meta_protocol, mcp.server.mcpserver'

echo "$want" >"$STAMP"
log "done: $VENV"

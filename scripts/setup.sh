#!/usr/bin/env bash
# Everything a fresh machine needs before Parley's whole test suite runs: the check that the
# committed guest runtimes are what their sources build (toolchain bits + a reproducible build,
# scripts/setup-guest.sh), the Python environment for the interoperability tests, the MCP test
# server and the benchmark baseline, the npm packages of the MCP tests (scripts/setup-node.sh),
# and a running PostgreSQL. Building and running Parley needs none of it, only the Rust
# toolchain. Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ "${PARLEY_SKIP_GUEST:-0}" != 1 ]]; then
  scripts/setup-guest.sh
fi
if [[ "${PARLEY_SKIP_PYTHON:-0}" != 1 ]]; then
  scripts/setup-python.sh
fi
if [[ "${PARLEY_SKIP_NODE:-0}" != 1 ]]; then
  scripts/setup-node.sh
fi
if [[ "${PARLEY_SKIP_POSTGRES:-0}" != 1 ]]; then
  scripts/ensure-postgres.sh
fi

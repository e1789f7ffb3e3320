#!/usr/bin/env bash
# Everything a fresh machine needs before Parley builds and its tests run: the sandbox's
# JavaScript runtime (toolchain bits + a reproducible build), the Python environment for
# the interoperability tests and the benchmark baseline, and a running PostgreSQL.
# Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup-guest.sh
if [[ "${PARLEY_SKIP_PYTHON:-0}" != 1 ]]; then
  scripts/setup-python.sh
fi
if [[ "${PARLEY_SKIP_POSTGRES:-0}" != 1 ]]; then
  scripts/ensure-postgres.sh
fi

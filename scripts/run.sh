#!/usr/bin/env bash
# Sets up, builds and starts Parley on its embedded default (SQLite under ./data) with the
# example capabilities, listening on 127.0.0.1:8080 (NLIP) and 127.0.0.1:8081 (uploads).
# Extra arguments go to `parley serve` (see `parley serve --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
PARLEY_SKIP_PYTHON=1 PARLEY_SKIP_POSTGRES=1 scripts/setup.sh
exec cargo run --release --locked -p parley -- serve --capabilities examples/capabilities.toml "$@"

#!/usr/bin/env bash
# Builds and starts Parley on its embedded default (SQLite under ./data) with the example
# capabilities, listening on 127.0.0.1:8080 (NLIP) and 127.0.0.1:8081 (uploads). Needs only the
# Rust toolchain: the sandbox's guest runtimes are committed (sandbox/runtimes/), so nothing is set
# up first, and a second run rebuilds nothing. Extra arguments go to `parley serve` (see
# `parley serve --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
exec cargo run --release --locked -p parley -- serve --capabilities examples/capabilities.toml "$@"

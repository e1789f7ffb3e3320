#!/usr/bin/env bash
# The whole test suite, exactly as CI runs it (.ci/run calls this): setup, formatting,
# lints, the runtime's reproducibility, and every test of the workspace (unit, property,
# integration over real sockets, SQLite and PostgreSQL, Python SDK interop), then the two-agent
# story as processes and through docker compose.
set -euo pipefail
cd "$(dirname "$0")/.."

# Incremental state roughly doubles the target directory and buys nothing in a one-shot run.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
df -h . | sed 's/^/disk: /'
avail_kib=$(df -Pk . | awk 'NR==2 {print $4}')
if [ "${avail_kib:-0}" -lt 4194304 ]; then
  echo "warning: $((avail_kib / 1024)) MiB free here; a full build and test run needs about 3 GiB" >&2
fi

scripts/setup.sh
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo test"
cargo test --workspace --locked
echo "== the two-agent story, as processes (examples/two-agents.sh)"
examples/two-agents.sh
# The same story through docker compose, exactly as a user runs it. No container registry is
# reachable here, so the base images are local stand-ins built from Debian's packages, and the
# image builds from crates vendored by this machine's cargo. Fails without Docker.
echo "== the two-agent story through docker compose (scripts/compose-story.sh)"
scripts/docker-base-images.sh
scripts/compose-story.sh --offline
df -h . | sed 's/^/disk: /'
du -sh target 2>/dev/null | sed 's/^/target: /' || true

#!/usr/bin/env bash
# Runs every fuzz target under fuzz/ for a bounded time, one after the other, and reports each
# one's executions and findings. Not part of CI: a run takes minutes and its result depends on
# the time given.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     (default 60 s, every target)
#
# cargo-fuzz needs nightly compiler flags; RUSTC_BOOTSTRAP=1 lets the pinned stable toolchain
# accept them. The targets build without a sanitizer by default (the crates under test forbid
# unsafe code; the findings sought are panics, hangs and memory blow-ups), which doubles the
# executions per second; FUZZ_SANITIZER=address turns AddressSanitizer on.
#
# Each target's new inputs go to fuzz/target/fuzz-corpus/<target> (not committed), read
# together with the seeds committed in fuzz/corpus/<target>. A crash, timeout or out-of-memory
# input is written to fuzz/artifacts/<target>/; minimise it with
# `RUSTC_BOOTSTRAP=1 cargo fuzz tmin --sanitizer none <target> <file>` (in fuzz/), fix the bug,
# and add the input as a regression test of the crate's own test suite.
#
# Exit status: 0 when no target found anything, 1 on a finding, 2 on a setup error.
set -euo pipefail

# The cargo-fuzz release this script is written against (installed when missing).
CARGO_FUZZ_VERSION=0.13.2

SECONDS_PER_TARGET=${1:-60}
shift || true
ALL_TARGETS=(nlip_json nlip_cbor protocol_doc meta_message anp_frame anp_rpc)
TARGETS=("${@:-${ALL_TARGETS[@]}}")
SANITIZER=${FUZZ_SANITIZER:-none}

if ! [[ $SECONDS_PER_TARGET =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: $0 [SECONDS_PER_TARGET] [TARGET...]  (seconds: a positive integer)" >&2
    exit 2
fi

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT/fuzz"
export RUSTC_BOOTSTRAP=1

if ! cargo fuzz --version 2>/dev/null | grep -q "$CARGO_FUZZ_VERSION"; then
    echo "installing cargo-fuzz $CARGO_FUZZ_VERSION"
    cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked
fi

# The longest input per target: the documents a peer may send are the largest.
max_len() {
    case $1 in
        protocol_doc) echo 16384 ;;
        *) echo 4096 ;;
    esac
}

echo "building the fuzz targets (sanitizer: $SANITIZER)"
cargo fuzz build --sanitizer "$SANITIZER" 2>&1 | tail -n 1

mkdir -p target/fuzz-logs
findings=0
printf '%-14s %12s %8s %8s  %s\n' target executions seconds corpus result
for target in "${TARGETS[@]}"; do
    log=target/fuzz-logs/$target.log
    mkdir -p "target/fuzz-corpus/$target" "artifacts/$target"
    started=$(date +%s)
    status=0
    # One process, one job: libFuzzer's -jobs would fork workers that log to files of their own.
    cargo fuzz run --sanitizer "$SANITIZER" "$target" \
        "target/fuzz-corpus/$target" "corpus/$target" -- \
        -max_total_time="$SECONDS_PER_TARGET" -rss_limit_mb=2048 \
        -max_len="$(max_len "$target")" -timeout=10 -print_final_stats=1 \
        >"$log" 2>&1 || status=$?
    elapsed=$(($(date +%s) - started))
    # libFuzzer's final statistics (-print_final_stats), else its last status line (`#N ...`).
    runs=$(grep -oE 'stat::number_of_executed_(units|runs): *[0-9]+' "$log" \
        | grep -oE '[0-9]+$' | tail -n 1 || true)
    if [[ -z $runs ]]; then
        runs=$(grep -oE '^#[0-9]+' "$log" | tail -n 1 | tr -d '#' || true)
    fi
    corpus=$(find "target/fuzz-corpus/$target" -type f | wc -l)
    artifact=$(grep -o "Test unit written to .*" "$log" | tail -n 1 \
        | sed 's/Test unit written to //' || true)
    # A run that ends by its time limit prints `#N DONE` and `Done N runs in S second(s)`.
    if [[ $status -eq 0 ]] && grep -qE '^(#[0-9]+[[:space:]]+DONE|Done [0-9]+ runs)' "$log"; then
        result="no finding"
    else
        findings=$((findings + 1))
        result="FINDING (exit $status) ${artifact:-see $log}"
    fi
    printf '%-14s %12s %8s %8s  %s\n' "$target" "${runs:-?}" "$elapsed" "$corpus" "$result"
done

if [[ $findings -gt 0 ]]; then
    echo "$findings target(s) found something; logs in fuzz/target/fuzz-logs/" >&2
    exit 1
fi

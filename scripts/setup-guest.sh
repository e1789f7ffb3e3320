#!/usr/bin/env bash
# Builds the sandbox's JavaScript runtime guest (sandbox/guest: QuickJS through rquickjs, for
# wasm32-wasip1) reproducibly, verifies its sha256 against sandbox/guest/runtime.sha256, and installs it
# as sandbox/guest/target/parley-runtime.wasm, where the parley-sandbox crate embeds it from.
#
# Idempotent: installs only what is missing (Debian: clang lld llvm wasi-libc; rustup: the
# wasm32-wasip1 target), and a second run is an incremental no-op build plus the hash check.
#
# Usage: scripts/setup-guest.sh [--update-hash] [--check-reproducible]
#   --update-hash          record the freshly built runtime's hash (after changing the guest or the
#                          toolchain) instead of failing on a mismatch
#   --check-reproducible   also build a second time in a fresh target directory and require the two
#                          runtimes to be byte-identical (what CI runs)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
GUEST=$ROOT/sandbox/guest
HASH_FILE=$GUEST/runtime.sha256
WASM_NAME=parley_js_runtime.wasm

update_hash=0
check_reproducible=0
for arg in "$@"; do
  case "$arg" in
    --update-hash) update_hash=1 ;;
    --check-reproducible) check_reproducible=1 ;;
    -h | --help)
      sed -n '2,15p' "$0"
      exit 0
      ;;
    *)
      echo "setup-guest: unknown argument: $arg" >&2
      exit 2
      ;;
  esac
done

say() { echo "setup-guest: $*" >&2; }

# --- toolchain -------------------------------------------------------------------------------------
missing=()
for pkg in clang lld llvm wasi-libc; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done
if ((${#missing[@]})); then
  sudo=""
  if [[ "$(id -u)" != 0 ]]; then sudo=sudo; fi
  say "installing ${missing[*]}"
  $sudo apt-get update
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends "${missing[@]}"
fi

if ! command -v cargo >/dev/null || ! command -v rustup >/dev/null; then
  say "cargo and rustup are required (the repository's Rust toolchain)"
  exit 1
fi
if ! rustup target list --installed | grep -qx wasm32-wasip1; then
  say "adding the wasm32-wasip1 target"
  if ! rustup target add wasm32-wasip1; then
    say "rustup could not add wasm32-wasip1 (it downloads the target's std from the Rust release"
    say "servers); install it on the machine image or from a mirror, then rerun this script"
    exit 1
  fi
fi

# --- build -----------------------------------------------------------------------------------------
CARGO_HOME_DIR=${CARGO_HOME:-$HOME/.cargo}

# Builds the guest into target directory $1 and prints the path of the produced runtime.
# Absolute paths (the target directory, cargo's registry, the checkout) are remapped in both the C and
# the Rust parts, so the output does not depend on where the repository or cargo's home live.
build_into() {
  local target_dir=$1
  (
    cd "$GUEST"
    export CFLAGS_wasm32_wasip1="-isystem /usr/include/wasm32-wasi \
-ffile-prefix-map=$target_dir=/target -ffile-prefix-map=$CARGO_HOME_DIR=/cargo \
-ffile-prefix-map=$GUEST=/guest"
    # Keep the guest's own rustflags (stack size) and add the remapping on top: cargo merges arrays.
    cargo build --release --locked --quiet \
      --target-dir "$target_dir" \
      --config "target.wasm32-wasip1.rustflags=['--remap-path-prefix=$CARGO_HOME_DIR=/cargo','--remap-path-prefix=$GUEST=/guest','--remap-path-prefix=$target_dir=/target']" >&2
  ) || return 1 # errexit does not reach into `$(build_into ...)`: without this a failed build went on with a stale runtime
  echo "$target_dir/wasm32-wasip1/release/$WASM_NAME"
}

say "building the runtime guest (rustc $(rustc --version | cut -d' ' -f2), $(clang --version | head -1))"
built=$(build_into "$GUEST/target") || exit 1
hash=$(sha256sum "$built" | cut -d' ' -f1)
say "built $built ($(stat -c %s "$built") bytes, sha256 $hash)"

if ((check_reproducible)); then
  scratch=$(mktemp -d)
  trap 'rm -rf "$scratch"' EXIT
  say "second build in $scratch to check reproducibility"
  second=$(build_into "$scratch") || exit 1
  second_hash=$(sha256sum "$second" | cut -d' ' -f1)
  if [[ "$second_hash" != "$hash" ]]; then
    say "NOT reproducible: second build has sha256 $second_hash"
    exit 1
  fi
  say "reproducible: both builds have sha256 $hash"
fi

if ((update_hash)); then
  {
    echo "$hash  parley-runtime.wasm"
    echo "# rustc $(rustc --version | cut -d' ' -f2), $(clang --version | head -1)"
  } >"$HASH_FILE"
  say "recorded the new hash in ${HASH_FILE#"$ROOT"/}"
else
  expected=$(grep -v '^#' "$HASH_FILE" 2>/dev/null | head -1 | cut -d' ' -f1 || true)
  if [[ "$hash" != "$expected" ]]; then
    say "sha256 mismatch: built $hash, ${HASH_FILE#"$ROOT"/} says ${expected:-nothing}"
    say "recorded toolchain: $(grep '^#' "$HASH_FILE" 2>/dev/null || echo unknown)"
    say "if you changed the guest or the toolchain on purpose, rerun with --update-hash and commit it"
    exit 1
  fi
  say "sha256 matches ${HASH_FILE#"$ROOT"/}"
fi

cp "$built" "$GUEST/target/parley-runtime.wasm.tmp"
mv "$GUEST/target/parley-runtime.wasm.tmp" "$GUEST/target/parley-runtime.wasm"
say "installed sandbox/guest/target/parley-runtime.wasm"

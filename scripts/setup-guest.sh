#!/usr/bin/env bash
# Builds the sandbox's guest runtimes for wasm32-wasip1 reproducibly: the JavaScript runtime
# (sandbox/guest: QuickJS through rquickjs) and the mapping runtime (sandbox/mapping-guest: the
# built-in reasoner's mappings, crate parley-mapping). Verifies each one's sha256 against its
# runtime.sha256 and installs it in its target directory (parley-runtime.wasm,
# parley-mapping-runtime.wasm), where the parley-sandbox crate embeds them from.
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

# The guests are built from a copy of their sources at this fixed path, whatever the checkout's
# path. Cargo's crate metadata (and so every symbol name in the wasm) hashes the absolute path of a
# path dependency outside the building workspace (guest-abi, parley-mapping), which no path
# remapping reaches: built in place, the runtimes' hashes would depend on where the repository is.
STAGE=${TMPDIR:-/tmp}/parley-guest-build
GUEST_SOURCES=(sandbox/guest sandbox/mapping-guest sandbox/guest-abi negotiator/mapping)

# Copies the guests' sources (not their target directories) to $STAGE, keeping the layout.
stage_sources() {
  rm -rf "$STAGE/src"
  mkdir -p "$STAGE/src"
  tar -C "$ROOT" --exclude=./*/target --exclude=target -cf - "${GUEST_SOURCES[@]}" | tar -C "$STAGE/src" -xpf -
}

# Builds guest directory $1 (a checkout path) into target directory $2 and prints the path of the
# produced runtime ($3, the cdylib's file name). Absolute paths (the target directory, cargo's
# registry, the staged sources) are remapped in both the C and the Rust parts.
build_into() {
  local guest=$STAGE/src/${1#"$ROOT"/} target_dir=$2 wasm_name=$3
  (
    cd "$guest"
    export CFLAGS_wasm32_wasip1="-isystem /usr/include/wasm32-wasi \
-ffile-prefix-map=$target_dir=/target -ffile-prefix-map=$CARGO_HOME_DIR=/cargo \
-ffile-prefix-map=$guest=/guest"
    # Keep the guest's own rustflags (stack size) and add the remapping on top: cargo merges arrays.
    cargo build --release --locked --quiet \
      --target-dir "$target_dir" \
      --config "target.wasm32-wasip1.rustflags=['--remap-path-prefix=$CARGO_HOME_DIR=/cargo','--remap-path-prefix=$STAGE/src=/parley','--remap-path-prefix=$guest=/guest','--remap-path-prefix=$target_dir=/target']" >&2
  ) || return 1 # errexit does not reach into `$(build_into ...)`: without this a failed build went on with a stale runtime
  echo "$target_dir/wasm32-wasip1/release/$wasm_name"
}

# Builds, checks and installs one guest: $1 its directory, $2 the cdylib's file name, $3 the name it
# is installed under in its target directory (where build.rs embeds it from), $4 what it is.
build_guest() {
  local guest=$1 wasm_name=$2 installed=$3 what=$4
  local hash_file=$guest/runtime.sha256
  say "building the $what guest (rustc $(rustc --version | cut -d' ' -f2), $(clang --version | head -1))"
  local built hash
  built=$(build_into "$guest" "$guest/target" "$wasm_name") || exit 1
  hash=$(sha256sum "$built" | cut -d' ' -f1)
  say "built $built ($(stat -c %s "$built") bytes, sha256 $hash)"

  if ((check_reproducible)); then
    local scratch second second_hash
    scratch=$(mktemp -d)
    say "second build in $scratch to check reproducibility"
    second=$(build_into "$guest" "$scratch" "$wasm_name") || {
      rm -rf "$scratch"
      exit 1
    }
    second_hash=$(sha256sum "$second" | cut -d' ' -f1)
    rm -rf "$scratch"
    if [[ "$second_hash" != "$hash" ]]; then
      say "NOT reproducible: second build has sha256 $second_hash"
      exit 1
    fi
    say "reproducible: both builds have sha256 $hash"
  fi

  if ((update_hash)); then
    {
      echo "$hash  $installed"
      echo "# rustc $(rustc --version | cut -d' ' -f2), $(clang --version | head -1)"
    } >"$hash_file"
    say "recorded the new hash in ${hash_file#"$ROOT"/}"
  else
    local expected
    expected=$(grep -v '^#' "$hash_file" 2>/dev/null | head -1 | cut -d' ' -f1 || true)
    if [[ "$hash" != "$expected" ]]; then
      say "sha256 mismatch: built $hash, ${hash_file#"$ROOT"/} says ${expected:-nothing}"
      say "recorded toolchain: $(grep '^#' "$hash_file" 2>/dev/null || echo unknown)"
      say "if you changed the guest or the toolchain on purpose, rerun with --update-hash and commit it"
      exit 1
    fi
    say "sha256 matches ${hash_file#"$ROOT"/}"
  fi

  cp "$built" "$guest/target/$installed.tmp"
  mv "$guest/target/$installed.tmp" "$guest/target/$installed"
  say "installed ${guest#"$ROOT"/}/target/$installed"
}

# One build at a time uses the stage (two checkouts on one machine, say).
mkdir -p "$STAGE"
exec 9>"$STAGE/lock"
flock 9
stage_sources
build_guest "$ROOT/sandbox/guest" parley_js_runtime.wasm parley-runtime.wasm "JavaScript runtime"
build_guest "$ROOT/sandbox/mapping-guest" parley_mapping_runtime.wasm parley-mapping-runtime.wasm "mapping runtime"

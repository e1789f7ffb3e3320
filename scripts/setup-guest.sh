#!/usr/bin/env bash
# Rebuilds the sandbox's guest runtimes for wasm32-wasip1 reproducibly and compares them with the
# committed ones in sandbox/runtimes/, which the parley-sandbox crate embeds: the JavaScript runtime
# (sandbox/guest: QuickJS through rquickjs, parley-runtime.wasm) and the mapping runtime
# (sandbox/mapping-guest: the built-in reasoner's mappings, crate parley-mapping,
# parley-mapping-runtime.wasm). `cargo build` does not need this script: only changing a guest,
# guest-abi or parley-mapping does.
#
# By default (what CI runs, through scripts/setup.sh) it fails when a fresh build differs from the
# committed bytes, or a committed runtime from its committed hash; it changes no committed file.
# Installs only what is missing (Debian: clang lld llvm wasi-libc; rustup: the wasm32-wasip1
# target of the toolchain rust-toolchain.toml pins).
#
# Usage: scripts/setup-guest.sh [--update]
#   --update   write the fresh runtimes and their hashes to sandbox/runtimes/ (after changing a
#              guest, guest-abi, parley-mapping or the toolchain), then commit them; files whose
#              bytes are unchanged are left untouched
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
RUNTIMES=$ROOT/sandbox/runtimes

update=0
for arg in "$@"; do
  case "$arg" in
    --update) update=1 ;;
    -h | --help)
      sed -n '2,17p' "$0"
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
# rust-toolchain.toml goes along, so the copy builds with the pinned toolchain.
STAGE=${TMPDIR:-/tmp}/parley-guest-build
GUEST_SOURCES=(rust-toolchain.toml sandbox/guest sandbox/mapping-guest sandbox/guest-abi negotiator/mapping)

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
  ) || return 1 # errexit does not reach into `$(build_into ...)`
  echo "$target_dir/wasm32-wasip1/release/$wasm_name"
}

sha256() { sha256sum "$1" | cut -d' ' -f1; }

# The hash a committed hash file records (its first line that is not a comment).
recorded_hash() { grep -v '^#' "$1" 2>/dev/null | head -1 | cut -d' ' -f1 || true; }

# Writes $2 to $1 only when the bytes differ, so an unchanged file keeps its modification time
# (build.rs reruns, and parley-sandbox rebuilds, when a runtime's mtime changes).
write_if_changed() {
  local target=$1 source=$2
  if [[ -f "$target" ]] && cmp -s "$source" "$target"; then
    return 0
  fi
  cp "$source" "$target.tmp"
  mv "$target.tmp" "$target"
  say "wrote ${target#"$ROOT"/}"
}

# Builds one guest and compares it with (or, with --update, writes it to) the committed runtime:
# $1 the guest's directory, $2 the cdylib's file name, $3 the committed runtime's file name, $4
# what it is.
build_guest() {
  local guest=$1 wasm_name=$2 name=$3 what=$4
  local committed=$RUNTIMES/$name hash_file=$RUNTIMES/$name.sha256
  local toolchain built hash
  toolchain="rustc $(rustc --version | cut -d' ' -f2), $(clang --version | head -1)"
  say "building the $what guest ($toolchain)"
  built=$(build_into "$guest" "$guest/target" "$wasm_name") || exit 1
  hash=$(sha256 "$built")
  say "built $(stat -c %s "$built") bytes, sha256 $hash"

  if ((update)); then
    local record
    record=$(mktemp)
    printf '%s  %s\n# %s\n' "$hash" "$name" "$toolchain" >"$record"
    write_if_changed "$committed" "$built"
    # The hash file records the toolchain too: rewritten only when the hash changes.
    if [[ "$(recorded_hash "$hash_file")" != "$hash" ]]; then
      write_if_changed "$hash_file" "$record"
    fi
    rm -f "$record"
    return 0
  fi

  local committed_hash recorded
  committed_hash=$(sha256 "$committed" 2>/dev/null || echo missing)
  recorded=$(recorded_hash "$hash_file")
  if [[ "$committed_hash" != "$recorded" ]]; then
    say "sandbox/runtimes/$name (sha256 $committed_hash) does not match its hash file ($recorded)"
    exit 1
  fi
  if [[ "$hash" != "$committed_hash" ]]; then
    say "the fresh build differs from the committed sandbox/runtimes/$name:"
    say "  fresh     $hash ($toolchain)"
    say "  committed $committed_hash ($(grep '^#' "$hash_file" | head -1 | sed 's/^# *//'))"
    say "if you changed the guest or the toolchain on purpose, rerun with --update and commit"
    say "sandbox/runtimes/; otherwise the build is not reproducible here (compare the toolchains)"
    exit 1
  fi
  say "identical to the committed sandbox/runtimes/$name"
}

# One build at a time uses the stage (two checkouts on one machine, say).
mkdir -p "$STAGE"
exec 9>"$STAGE/lock"
flock 9
stage_sources
build_guest "$ROOT/sandbox/guest" parley_js_runtime.wasm parley-runtime.wasm "JavaScript runtime"
build_guest "$ROOT/sandbox/mapping-guest" parley_mapping_runtime.wasm parley-mapping-runtime.wasm "mapping runtime"

#!/usr/bin/env bash
# Builds local stand-ins for the public base images the Dockerfile and docker-compose.yml name, for
# a machine that reaches no container registry (CI's). They carry the same names, so the Dockerfile
# and the compose file run exactly as a user runs them:
#   debian:bookworm-slim   a Debian bookworm root file system made by debootstrap (minbase), imported
#   rust:1.95.0-bookworm   that, plus gcc and libc6-dev from Debian and this machine's Rust 1.95.0
#                          toolchain, laid out as the official image (docker/standins/rust.Dockerfile)
#   postgres:16            that, plus Debian's PostgreSQL and an entry point of our own honouring what
#                          the compose file uses (docker/standins/postgres.Dockerfile)
# An image that is there already is kept, whether a stand-in or pulled from a registry; --rebuild
# replaces the stand-ins. The names follow RUNTIME_IMAGE, RUST_IMAGE and POSTGRES_IMAGE when set.
#
# Installs what it needs (Debian: docker.io, docker-compose, debootstrap) and starts dockerd when no
# engine answers.
#
# Usage: scripts/docker-base-images.sh [--rebuild]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DOCKER_SAY=docker-base-images
# shellcheck source=scripts/docker-lib.sh
. scripts/docker-lib.sh

rebuild=0
for arg in "$@"; do
  case "$arg" in
    --rebuild) rebuild=1 ;;
    -h | --help)
      sed -n '2,17p' "$0"
      exit 0
      ;;
    *) docker_fail "unknown argument: $arg" ;;
  esac
done

DEBIAN_IMAGE=${RUNTIME_IMAGE:-debian:bookworm-slim}
RUST_IMAGE=${RUST_IMAGE:-rust:1.95.0-bookworm}
POSTGRES_IMAGE=${POSTGRES_IMAGE:-postgres:16}
RUST_VERSION=1.95.0
SUITE=bookworm
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SECURITY_MIRROR=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}

# --- what this script needs ----------------------------------------------------------------------
apt_install() {
  local missing=() pkg
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  ((${#missing[@]})) || return 0
  [[ "$(id -u)" == 0 ]] || docker_fail "needs ${missing[*]} (Debian packages); install them as root"
  docker_say "installing ${missing[*]}"
  apt-get update -q >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
}

if ! command -v dockerd >/dev/null || ! { docker compose version || command -v docker-compose; } >/dev/null 2>&1; then
  apt_install docker.io docker-compose
fi
docker_ensure_engine
docker_use_buildkit

# True when image $1 is there and --rebuild does not ask to replace it.
keep() {
  if docker image inspect "$1" >/dev/null 2>&1; then
    if ((rebuild == 0)); then
      docker_say "$1 is there: kept"
      return 0
    fi
    docker_say "$1: rebuilding the stand-in"
  fi
  return 1
}

WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/parley-base-images.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# --- debian:bookworm-slim ------------------------------------------------------------------------
# Slimmed as Debian's own container images are: no documentation, manuals or translations, now or
# from later installs, and no package lists or downloaded packages left behind.
debian_image() {
  keep "$DEBIAN_IMAGE" && return 0
  apt_install debootstrap
  local root=$WORK/rootfs
  docker_say "debootstrap $SUITE (minbase) from $MIRROR"
  debootstrap --variant=minbase "$SUITE" "$root" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 || {
    tail -30 "$WORK/debootstrap.log" >&2
    docker_fail "debootstrap failed"
  }
  rm -f "$root/etc/apt/sources.list"
  cat >"$root/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: $SUITE $SUITE-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $SECURITY_MIRROR
Suites: $SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  cat >"$root/etc/dpkg/dpkg.cfg.d/docker-slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
EOF
  cat >"$root/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
  find "$root/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
  rm -rf "$root"/usr/share/{man,info}/* "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* \
    "$root"/var/log/* "$root"/tmp/*
  find "$root/usr/share/locale" -mindepth 1 -maxdepth 1 -not -name locale.alias -exec rm -rf {} +
  docker_say "importing $DEBIAN_IMAGE ($(du -sh "$root" | cut -f1))"
  tar --numeric-owner -C "$root" -cf - . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["bash"]' \
    - "$DEBIAN_IMAGE" >/dev/null
  rm -rf "$root"
}

# --- rust:1.95.0-bookworm ------------------------------------------------------------------------
rust_image() {
  keep "$RUST_IMAGE" && return 0
  local sysroot triple=x86_64-unknown-linux-gnu ctx=$WORK/rust proxy
  sysroot=$(rustc "+$RUST_VERSION" --print sysroot 2>/dev/null || rustc --print sysroot 2>/dev/null) ||
    docker_fail "this machine has no Rust toolchain"
  sysroot=$(readlink -f "$sysroot")
  "$sysroot/bin/rustc" --version | grep -q "^rustc $RUST_VERSION " ||
    docker_fail "$sysroot is not Rust $RUST_VERSION: $("$sysroot/bin/rustc" --version)"
  local toolchain=$ctx/rustup/toolchains/$RUST_VERSION-$triple
  mkdir -p "$toolchain" "$ctx/cargo/bin"
  docker_say "copying the Rust $RUST_VERSION toolchain from $sysroot"
  tar -C "$sysroot" --exclude=./share/doc -cf - . | tar -C "$toolchain" -xf -
  cat >"$ctx/rustup/settings.toml" <<EOF
version = "12"
default_toolchain = "$RUST_VERSION-$triple"
profile = "minimal"
EOF
  cp "$(readlink -f "$(command -v rustup)")" "$ctx/cargo/bin/rustup"
  for proxy in cargo cargo-clippy cargo-fmt clippy-driver rust-gdb rust-gdbgui rust-lldb rustc rustdoc rustfmt; do
    ln -s rustup "$ctx/cargo/bin/$proxy"
  done
  docker_say "building $RUST_IMAGE"
  docker build -q --build-arg "BASE_IMAGE=$DEBIAN_IMAGE" --build-arg "RUST_VERSION=$RUST_VERSION" \
    -f "$ROOT/docker/standins/rust.Dockerfile" -t "$RUST_IMAGE" "$ctx" >/dev/null
  rm -rf "$ctx"
}

# --- postgres:16 ---------------------------------------------------------------------------------
postgres_image() {
  keep "$POSTGRES_IMAGE" && return 0
  docker_say "building $POSTGRES_IMAGE (Debian's PostgreSQL)"
  docker build -q --build-arg "BASE_IMAGE=$DEBIAN_IMAGE" \
    -f "$ROOT/docker/standins/postgres.Dockerfile" -t "$POSTGRES_IMAGE" "$ROOT/docker/standins" >/dev/null
}

timed() {
  local start=$SECONDS
  "$@"
  docker_say "$1: $((SECONDS - start)) s"
}
timed debian_image
timed rust_image
timed postgres_image
docker image ls --format '{{.Repository}}:{{.Tag}}  {{.Size}}' | grep -E "^(${DEBIAN_IMAGE}|${RUST_IMAGE}|${POSTGRES_IMAGE})  " >&2 || true

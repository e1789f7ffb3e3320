# shellcheck shell=bash
# Shared by the Docker scripts (sourced, not run): a Docker engine that answers, a docker client
# that builds with BuildKit, and the compose command.
#
# The Dockerfile's cache mounts need BuildKit: Docker 23 and later build with it by default (the
# buildx plugin); the 20.10 client Debian ships has it built in and uses it with DOCKER_BUILDKIT=1.
# A newer client without the plugin cannot, so when one shadows a capable client further down the
# PATH, the capable one is put first for this script and the compose it runs.

docker_say() { echo "${DOCKER_SAY:-docker}: $*" >&2; }
docker_fail() {
  docker_say "$*"
  exit 1
}

# Starts dockerd when a client is installed but no engine answers (a machine without an init
# system, as CI's is), then waits until `docker info` answers. Fails without Docker.
docker_ensure_engine() {
  command -v docker >/dev/null || docker_fail "no docker client on PATH: install Docker (Debian: apt-get install docker.io docker-compose)"
  if docker info >/dev/null 2>&1; then return 0; fi
  command -v dockerd >/dev/null || docker_fail "no Docker engine answers and there is no dockerd here to start"
  [[ "$(id -u)" == 0 ]] || docker_fail "no Docker engine answers; start it (only root may start dockerd here)"
  local log=${PARLEY_DOCKERD_LOG:-/var/log/parley-dockerd.log}
  docker_say "starting dockerd (log: $log)"
  nohup dockerd >"$log" 2>&1 &
  local i
  for i in $(seq 1 60); do
    if docker info >/dev/null 2>&1; then
      docker_say "dockerd answers after ${i}s"
      return 0
    fi
    sleep 1
  done
  tail -20 "$log" >&2 || true
  docker_fail "dockerd did not answer within 60 s"
}

# True when client $1 builds with BuildKit: it has the buildx plugin, or it is older than 23 (whose
# builder is built in).
docker_client_has_buildkit() {
  local client=$1 version
  if "$client" buildx version >/dev/null 2>&1; then return 0; fi
  version=$("$client" version --format '{{.Client.Version}}' 2>/dev/null) || return 1
  [[ "${version%%.*}" =~ ^[0-9]+$ ]] && ((${version%%.*} < 23))
}

# Makes `docker` (for this script and the compose it runs) a client that builds with BuildKit and
# turns BuildKit on for compose's builds. Fails when no client on the PATH can.
docker_use_buildkit() {
  local client first
  first=$(command -v docker)
  export DOCKER_BUILDKIT=1 COMPOSE_DOCKER_CLI_BUILD=1
  if docker_client_has_buildkit "$first"; then return 0; fi
  while read -r client; do
    if [[ "$client" != "$first" ]] && docker_client_has_buildkit "$client"; then
      local shim
      shim=$(mktemp -d)
      ln -s "$client" "$shim/docker"
      export PATH="$shim:$PATH"
      docker_say "using $client to build (BuildKit; $first has no buildx plugin)"
      return 0
    fi
  done < <(type -ap docker | awk '!seen[$0]++')
  docker_fail "no docker client here builds with BuildKit: install the buildx plugin (Debian: docker-buildx)"
}

# Sets COMPOSE (an array, for the scripts that source this) to the compose command: the `docker compose` plugin, else the docker-compose program.
docker_find_compose() {
  # shellcheck disable=SC2034
  if docker compose version >/dev/null 2>&1; then
    COMPOSE=(docker compose)
  elif command -v docker-compose >/dev/null; then
    COMPOSE=(docker-compose)
  else
    docker_fail "no compose here: install the compose plugin or docker-compose"
  fi
}

#!/usr/bin/env bash
# The two-agent story, for real: builds the image, brings up docker-compose.yml (PostgreSQL, a
# provider serving examples/capabilities.toml, a requester, seed 003's weather network), waits
# until all four are healthy, then runs the story from inside the requester's container and
# checks every step:
#   1. the provider's published port answers /health on 127.0.0.1
#   2. a natural-language hello from the requester to the provider
#   3. the negotiation of examples/protocols/product-info.md (hash, rounds, transcript)
#   4. structured calls through the agreed protocol: a product that exists, and one that does not
#   5. the requester restarted; its next call is answered at 0-RTT from the agreement kept in its
#      own PostgreSQL database (the provider counts no new negotiation)
#   6. a request no protocol fits, answered through the natural-language fallback
#   7. seed 003: a QUERY answered by a RESPONSE and an INFORM by an ACKNOWLEDGE, each protocol
#      negotiated with the weather network first; the note read back from its log
#   8. the secure deployment (docker/secure.yml over the same stack, secrets from
#      scripts/secure-secrets.sh): the provider speaks TLS only, an anonymous requester may talk
#      but not negotiate, and with its API key (a compose secret) it negotiates over https://
# (the steps are scripts/story-lib.sh's, shared with the process story, examples/two-agents.sh)
# then tears the stack down with its volumes. Fails (exit 1) on the first step that does not hold,
# and on a machine without Docker; starts dockerd when it is installed but not running.
#
# Usage: scripts/compose-story.sh [--keep] [--offline]
#   --keep     leave the stack running afterwards (docker compose -p parley-story down -v ends it)
#   --offline  build from the workspace's crates vendored into the build context by this machine's
#              cargo, for an engine whose builds reach no crate registry (see CARGO_VENDOR_DIR in
#              the Dockerfile)
# The compose project is parley-story (COMPOSE_PROJECT_NAME overrides it); the published ports
# follow PROVIDER_PORT, PROVIDER_UPLOAD_PORT, REQUESTER_PORT, REQUESTER_UPLOAD_PORT, STATIONS_PORT
# and STATIONS_UPLOAD_PORT.
set -euo pipefail
cd "$(dirname "$0")/.."
DOCKER_SAY=compose-story
# shellcheck source=scripts/docker-lib.sh
. scripts/docker-lib.sh

keep=0
offline=0
for arg in "$@"; do
  case "$arg" in
    --keep) keep=1 ;;
    --offline) offline=1 ;;
    -h | --help)
      sed -n '2,26p' "$0"
      exit 0
      ;;
    *) docker_fail "unknown argument: $arg" ;;
  esac
done

export COMPOSE_PROJECT_NAME=${COMPOSE_PROJECT_NAME:-parley-story}
PROVIDER_PORT=${PROVIDER_PORT:-8080}
STATIONS_UPLOAD_PORT=${STATIONS_UPLOAD_PORT:-7081}
# Where --offline vendors the crates: inside the build context, outside the build's target directory.
VENDOR=target/docker-vendor
# The secure deployment's secrets: made fresh for each run, never committed.
SECRETS_DIR=docker/secrets
# How long the stack may take to become healthy, in seconds.
HEALTH_TIMEOUT=${HEALTH_TIMEOUT:-240}

docker_ensure_engine
docker_use_buildkit
docker_find_compose
command -v curl >/dev/null || docker_fail "curl is needed to probe the published port"
compose() { "${COMPOSE[@]}" "$@"; }
# Runs the CLI in the requester's container, as the requester's operator would.
requester() { compose exec -T requester parley "$@"; }

# shellcheck source=scripts/story-lib.sh
. scripts/story-lib.sh

finish() {
  local code=$?
  if ((code != 0)); then
    echo >&2
    docker_say "the story failed; the stack as it stood:"
    compose ps >&2 || true
    compose logs --no-color --tail=40 >&2 || true
  fi
  if ((keep)); then
    docker_say "the stack keeps running (project $COMPOSE_PROJECT_NAME): ${COMPOSE[*]} -p $COMPOSE_PROJECT_NAME down -v ends it"
  else
    compose down -v --remove-orphans >/dev/null 2>&1 || docker_say "compose down failed"
  fi
  rm -rf "$VENDOR"
  if ((${#timings[@]})); then
    echo
    echo "timings:"
    printf '  %s\n' "${timings[@]}"
  fi
  exit "$code"
}
trap finish EXIT

# Waits until every service of the project reports healthy (compose v1 has no `up --wait`).
wait_healthy() {
  local deadline=$((SECONDS + HEALTH_TIMEOUT)) service id status pending
  while true; do
    pending=()
    for service in postgres provider requester stations; do
      id=$(compose ps -q "$service" 2>/dev/null || true)
      status=$([[ -n "$id" ]] && docker inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{else}}{{.State.Status}}{{end}}' "$id" 2>/dev/null || echo missing)
      [[ "$status" == healthy ]] || pending+=("$service:$status")
    done
    ((${#pending[@]} == 0)) && return 0
    ((SECONDS < deadline)) || fail_step "not healthy in time: ${pending[*]}"
    sleep 2
  done
}

# --- the stack -----------------------------------------------------------------------------------
step "build the image (${COMPOSE[*]} build)"
compose down -v --remove-orphans >/dev/null 2>&1 || true
build_args=()
if ((offline)); then
  command -v cargo >/dev/null || docker_fail "--offline vendors the crates with cargo, and there is none here"
  echo "   vendoring the workspace's crates into $VENDOR (cargo vendor --locked)"
  rm -rf "$VENDOR"
  cargo vendor --locked --quiet "$VENDOR" >/dev/null
  build_args=(--build-arg "CARGO_VENDOR_DIR=$VENDOR")
fi
build_log=$(mktemp)
if ! BUILDKIT_PROGRESS=plain compose build "${build_args[@]}" >"$build_log" 2>&1; then
  tail -60 "$build_log" | show
  fail_step "the image did not build (log: $build_log)"
fi
grep -E 'Finished|naming to' "$build_log" | sort -u | show
rm -f "$build_log"
rm -rf "$VENDOR"
image=${PARLEY_IMAGE:-parley:local}
echo "   $image: $(docker image inspect -f '{{.Size}}' "$image" | awk '{ printf "%.1f MB", $1 / 1e6 }')"
phase_done build

step "bring the stack up and wait until PostgreSQL, provider, requester and weather network are healthy"
compose up -d --no-build 2>&1 | show
wait_healthy
compose ps | show
phase_done up

# --- the story -----------------------------------------------------------------------------------
PROVIDER=http://provider:8080
PROVIDER_LOCAL=http://127.0.0.1:$PROVIDER_PORT
PROTOCOLS=/etc/parley/examples/protocols
STATIONS=http://stations:8080
STATIONS_LOG_LOCAL=http://127.0.0.1:$STATIONS_UPLOAD_PORT
SEED003=/etc/parley/examples/seed003
EXPECT_STORE=postgres
restart_requester() {
  run compose restart requester
  wait_healthy
}
story_steps
phase_done story

# Runs a command that must fail (any exit code but 0), keeping its output in $out.
fails() {
  echo "   \$ $*"
  local code=0
  out=$("$@" 2>&1) || code=$?
  printf '%s\n' "$out" | show
  ((code != 0)) || fail_step "it succeeded; it should have failed"
}

step "the secure deployment: TLS, the requester's key as a compose secret, anonymous peers talk only"
scripts/secure-secrets.sh --force "$SECRETS_DIR" | show
COMPOSE+=(-f docker-compose.yml -f docker/secure.yml)
compose up -d --no-build provider requester 2>&1 | show
wait_healthy
SECURE=https://provider:8080
fails requester send http://provider:8080/nlip "hello"
ok "plaintext is refused"
run requester send "$SECURE" "What can you do?"
ok "an anonymous peer talks over TLS, the private CA trusted through PARLEY_CA_CERT"
fails requester negotiate "$SECURE" --protocol "$PROTOCOLS/product-info.md"
expect "forbidden|may not negotiate"
ok "an anonymous peer may not negotiate"
secure_negotiate() {
  compose exec -T requester sh -c \
    'exec parley negotiate "$1" --token "$(cat /run/secrets/requester_token)" --protocol "$2"' \
    - "$SECURE" "$PROTOCOLS/product-info.md"
}
run secure_negotiate
expect '^status +agreed' 
ok "with its key the requester negotiates"
phase_done secure

echo
echo "the two-agent story held: hello, negotiation, structured calls, 0-RTT after a restart, natural-language fallback, seed 003's QUERY and INFORM"

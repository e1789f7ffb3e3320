#!/usr/bin/env bash
# The two-agent story as plain processes, on the embedded SQLite store: a provider serving
# examples/capabilities.toml and a requester agent with no capabilities, plus seed 003's weather
# network (examples/seed003, its notes logged to its own upload end-point), each with its own data
# directory, then the story's steps (scripts/story-lib.sh, the same as scripts/compose-story.sh
# runs against docker compose): a natural-language hello, the negotiation of
# examples/protocols/product-info.md, structured calls, 0-RTT after the requester restarts, a
# request no protocol fits answered through the natural-language fallback, and seed 003's QUERY
# and INFORM, each negotiated and answered (RESPONSE, ACKNOWLEDGE) by the weather network.
#
# Usage: examples/two-agents.sh [--keep]
#   --keep   leave the agents running afterwards (their PIDs and data directory are printed)
# Environment: PARLEY_BIN (a built `parley`; default: built here with cargo, PARLEY_PROFILE=release
# for an optimised build), PROVIDER_PORT [18080], REQUESTER_PORT [19080] and STATIONS_PORT
# [17080] (each agent also takes the next port for uploads).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

keep=0
for arg in "$@"; do
  case "$arg" in
    --keep) keep=1 ;;
    -h | --help)
      sed -n '2,16p' "$0"
      exit 0
      ;;
    *)
      echo "two-agents: unknown argument: $arg" >&2
      exit 2
      ;;
  esac
done

say() { echo "two-agents: $*" >&2; }
command -v curl >/dev/null || {
  say "curl is needed to probe the agents"
  exit 1
}

if [[ -z "${PARLEY_BIN:-}" ]]; then
  profile=${PARLEY_PROFILE:-dev}
  say "building parley (cargo build --profile $profile)"
  cargo build --locked --quiet -p parley --profile "$profile"
  dir=$([[ "$profile" == dev ]] && echo debug || echo "$profile")
  PARLEY_BIN=$ROOT/target/$dir/parley
fi
[[ -x "$PARLEY_BIN" ]] || {
  say "no parley binary at $PARLEY_BIN"
  exit 1
}

PROVIDER_PORT=${PROVIDER_PORT:-18080}
REQUESTER_PORT=${REQUESTER_PORT:-19080}
STATIONS_PORT=${STATIONS_PORT:-17080}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/parley-two-agents.XXXXXX")
provider_pid=""
requester_pid=""
stations_pid=""

# shellcheck source=scripts/story-lib.sh
. scripts/story-lib.sh

# Starts one agent in the background: NAME PORT [serve flags…]; its log is $WORK/NAME.log.
start_agent() {
  local name=$1 port=$2
  shift 2
  mkdir -p "$WORK/$name"
  "$PARLEY_BIN" serve --listen "127.0.0.1:$port" --upload-listen "127.0.0.1:$((port + 1))" \
    --data-dir "$WORK/$name" --agent-id "$name" "$@" >>"$WORK/$name.log" 2>&1 &
  echo $!
}

# Waits until the agent on PORT is ready (the sandbox warmed up, the store reachable).
wait_ready() {
  local name=$1 port=$2 pid=$3 i
  for i in $(seq 1 120); do
    if curl -fsS "http://127.0.0.1:$port/health/ready" >/dev/null 2>&1; then return 0; fi
    if ! kill -0 "$pid" 2>/dev/null; then
      tail -20 "$WORK/$name.log" >&2
      fail_step "the $name exited before it was ready"
    fi
    sleep 0.5
  done
  tail -20 "$WORK/$name.log" >&2
  fail_step "the $name was not ready within 60 s"
}

stop() {
  local pid=$1
  [[ -n "$pid" ]] || return 0
  kill "$pid" 2>/dev/null || return 0
  wait "$pid" 2>/dev/null || true
}

finish() {
  local code=$?
  if ((code != 0)); then
    for name in provider requester stations; do
      echo "-- $name log (last 30 lines)" >&2
      tail -30 "$WORK/$name.log" >&2 || true
    done
  fi
  if ((keep && code == 0)); then
    say "agents keep running: provider pid $provider_pid on :$PROVIDER_PORT, requester pid $requester_pid on :$REQUESTER_PORT, weather network pid $stations_pid on :$STATIONS_PORT; data in $WORK"
  else
    stop "$stations_pid"
    stop "$requester_pid"
    stop "$provider_pid"
    rm -rf "$WORK"
  fi
  exit "$code"
}
trap finish EXIT

step "start the provider (:$PROVIDER_PORT, examples/capabilities.toml), the requester (:$REQUESTER_PORT) and the weather network (:$STATIONS_PORT, examples/seed003)"
# The story's requester is anonymous to the provider and the weather network: both let anonymous
# peers negotiate and call (the default lets them only talk).
provider_pid=$(start_agent provider "$PROVIDER_PORT" --capabilities "$ROOT/examples/capabilities.toml" \
  --anonymous-access all)
requester_pid=$(start_agent requester "$REQUESTER_PORT")
# The weather network logs the notes it is told to its own upload end-point.
stations_pid=$(STATION_LOG_URL=http://127.0.0.1:$((STATIONS_PORT + 1)) start_agent stations \
  "$STATIONS_PORT" --capabilities "$ROOT/examples/seed003/capabilities.toml" --anonymous-access all)
wait_ready provider "$PROVIDER_PORT" "$provider_pid"
wait_ready requester "$REQUESTER_PORT" "$requester_pid"
wait_ready stations "$STATIONS_PORT" "$stations_pid"
ok "the agents are ready; data in $WORK"
phase_done up

PROVIDER=http://127.0.0.1:$PROVIDER_PORT
PROVIDER_LOCAL=$PROVIDER
PROTOCOLS=$ROOT/examples/protocols
STATIONS=http://127.0.0.1:$STATIONS_PORT
STATIONS_LOG_LOCAL=http://127.0.0.1:$((STATIONS_PORT + 1))
SEED003=$ROOT/examples/seed003
EXPECT_STORE=sqlite
# The requester's operator runs the CLI on the requester agent's own store.
requester() { PARLEY_DATA_DIR=$WORK/requester "$PARLEY_BIN" "$@"; }
restart_requester() {
  echo "   restarting the requester (pid $requester_pid)"
  stop "$requester_pid"
  requester_pid=$(start_agent requester "$REQUESTER_PORT")
  wait_ready requester "$REQUESTER_PORT" "$requester_pid"
}
story_steps
phase_done story

echo
echo "the two-agent story held: hello, negotiation, structured calls, 0-RTT after a restart, natural-language fallback, seed 003's QUERY and INFORM"
echo
echo "timings:"
printf '  %s\n' "${timings[@]}"

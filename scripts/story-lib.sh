# shellcheck shell=bash
# The two-agent story's steps, shared by the two ways it runs (sourced, not run):
# scripts/compose-story.sh (docker compose) and examples/two-agents.sh (plain processes).
#
# The runner defines, before calling `story_steps`:
#   PROVIDER            the provider's NLIP URL as the requester reaches it (a base URL, no path)
#   PROVIDER_LOCAL      the provider's base URL from this machine, for /health and /metrics
#   PROTOCOLS           the directory of examples/protocols as the requester's CLI sees it
#   STATIONS            the seed-003 weather network's NLIP URL as the requester reaches it
#   STATIONS_LOG_LOCAL  the weather network's log (its upload end-point) from this machine
#   SEED003             the directory of examples/seed003 as the requester's CLI sees it
#   EXPECT_STORE        the store the provider's /health must name (postgres, sqlite)
#   requester ARGS…     runs the `parley` CLI as the requester's operator would
#   restart_requester   restarts the requester agent, keeping its store
phase_start=$SECONDS
timings=()
phase_done() {
  timings+=("$(printf '%-8s %4d s' "$1" $((SECONDS - phase_start)))")
  phase_start=$SECONDS
}
step() { printf '\n== %s\n' "$*"; }
show() { sed 's/^/   | /'; }
ok() { echo "   ok: $*"; }
fail_step() {
  echo "   FAILED: $*" >&2
  exit 1
}
# Runs a command, shows what it printed (stdout and stderr) and keeps it in $out; fails the step
# when the command fails, unless the exit code is the one given with --status.
out=""
run() {
  local want=0
  if [[ "$1" == --status ]]; then
    want=$2
    shift 2
  fi
  echo "   \$ $*"
  local code=0
  out=$("$@" 2>&1) || code=$?
  printf '%s\n' "$out" | show
  ((code == want)) || fail_step "exit code $code, expected $want"
}
expect() { grep -qE -- "$1" <<<"$out" || fail_step "expected /$1/ in the output"; }
reject() { if grep -qE -- "$1" <<<"$out"; then fail_step "did not expect /$1/ in the output"; fi; }


# The provider's metric summed over its labels.
metric() {
  curl -fsS "$PROVIDER_LOCAL/metrics" |
    awk -v name="$1" '$1 ~ "^"name"([{]|$)" { sum += $2 } END { print sum + 0 }'
}

# The story: each step prints what it ran and what came back, and fails on the first that does
# not hold.
story_steps() {
  step "1. the provider answers on $PROVIDER_LOCAL"
  run curl -fsS "$PROVIDER_LOCAL/health"
  expect '"status":"ok"'
  expect "\"store\":\"$EXPECT_STORE"
  ok "healthy, on $EXPECT_STORE"

  step "2. a natural-language hello from the requester to the provider"
  run requester send "$PROVIDER" "What can you do?"
  expect 'getProductInfo'
  ok "the provider described its capabilities"

  step "3. the requester negotiates product-info.md with the provider"
  run requester negotiate "$PROVIDER" --protocol "$PROTOCOLS/product-info.md"
  expect '^status +agreed'
  hash=$(sed -n 's/^hash *\([0-9a-f]\{64\}\)$/\1/p' <<<"$out")
  [[ -n "$hash" ]] || fail_step "no protocol hash in the output"
  ok "agreed protocol $hash in $(sed -n 's/^rounds *//p' <<<"$out") round(s)"
  run requester protocols list
  expect "^$hash +requester "
  ok "the agreement is in the requester's store"

  step "4. structured calls through the agreed protocol (by a hash prefix, as people type it)"
  run story_call story-1 P12345
  expect '"code": 200'
  expect '"productId": "P12345"'
  reject 'negotiated it again|fell back'
  ok "P12345 found"
  run story_call story-2 P99999
  expect '"code": 404'
  expect '"productInfo": null'
  ok "P99999 not found"

  step "5. the requester restarts; its next call is answered at 0-RTT from its stored agreement"
  local before after
  before=$(metric parley_negotiations_total)
  restart_requester
  run story_call story-3 P12345
  expect '"code": 200'
  reject 'negotiated it again|fell back'
  after=$(metric parley_negotiations_total)
  ((after == before)) || fail_step "the provider counted $((after - before)) new negotiation(s)"
  ok "answered through the stored agreement; the provider's negotiations stay at $after"
  run requester negotiate "$PROVIDER" --protocol "$PROTOCOLS/product-info.md"
  expect '^status +known to the provider \(0-RTT'
  expect '^rounds +0$'
  ok "a new hello finds the protocol known: 0-RTT, no rounds"

  step "6. a request no protocol fits (order tracking with carrier and tracking number), answered in natural language"
  run requester call "$PROVIDER" --protocol "$PROTOCOLS/order-tracking.md" \
    --json '{"messageId":"story-4","type":"REQUEST","action":"trackOrder","orderId":"O-1001"}'
  expect 'fell back to natural language'
  expect 'shipped'
  ok "the provider could not agree to the protocol; its reasoner answered the request instead"
  run --status 1 requester call "$PROVIDER" --protocol "$PROTOCOLS/order-tracking.md" --no-fallback \
    --json '{"messageId":"story-5","type":"REQUEST","action":"trackOrder","orderId":"O-1001"}'
  ok "with --no-fallback the same request is an error"

  step "7. seed 003 with the weather network: a QUERY answered by a RESPONSE, an INFORM by an ACKNOWLEDGE"
  run requester call "$STATIONS" --protocol "$SEED003/protocols/station-reading.md" \
    --json "$(seed003_message QUERY story-q1 '{"stationId":"WS-101"}')"
  expect '"type": "RESPONSE"'
  expect '"reply_to": "story-q1"'
  expect '"name": "Bergen Harbour"'
  reject 'fell back'
  ok "the query was answered through the negotiated station-reading protocol, linked by reply_to"
  local note="Anemometer on the mast iced up; wind readings unreliable until it thaws."
  run requester call "$STATIONS" --protocol "$SEED003/protocols/station-note.md" \
    --json "$(seed003_message INFORM story-i1 "{\"stationId\":\"WS-103\",\"note\":\"$note\"}")"
  expect '"type": "ACKNOWLEDGE"'
  expect '"reply_to": "story-i1"'
  reject 'fell back'
  local record
  record=$(sed -n 's/^ *"id": "\([0-9a-f]\{64\}\)",\{0,1\}$/\1/p' <<<"$out")
  [[ -n "$record" ]] || fail_step "no record id in the acknowledgement"
  run curl -fsS "$STATIONS_LOG_LOCAL/uploads/$record"
  expect "$note"
  ok "the note is in the network's log as ${record:0:12}…"
}

# A seed-003 message of TYPE with id ID and BODY (JSON) from the requester to the weather network.
seed003_message() {
  printf '{"header":{"version":"1.0","sender":"requester","receiver":"stations","type":"%s","id":"%s","timestamp":"%s","content_type":"application/json","conversation_id":"story"},"body":%s}' \
    "$1" "$2" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$3"
}

# One call of the product protocol by the first 12 hex digits of its hash.
story_call() {
  requester call "$PROVIDER" --protocol "${hash:0:12}" \
    --json "{\"messageId\":\"$1\",\"type\":\"REQUEST\",\"action\":\"getProductInfo\",\"productId\":\"$2\"}"
}

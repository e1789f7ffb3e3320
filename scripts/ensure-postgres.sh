#!/usr/bin/env bash
# Makes sure the local PostgreSQL the tests use (127.0.0.1:5432, trust auth) is running.
# Does nothing when PARLEY_TEST_PG_URL points elsewhere.
set -euo pipefail
if [[ -n "${PARLEY_TEST_PG_URL:-}" ]]; then exit 0; fi
ready() { command -v pg_isready >/dev/null && pg_isready -h 127.0.0.1 -p 5432 -q; }
if ready; then exit 0; fi
if [[ -d /etc/postgresql ]] && command -v pg_ctlcluster >/dev/null; then
  echo "starting PostgreSQL"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n 1)" main start || true
  for _ in $(seq 1 30); do ready && exit 0; sleep 1; done
fi
echo "PostgreSQL is not reachable at 127.0.0.1:5432; the PostgreSQL tests will fail." >&2
echo "Start it, or set PARLEY_TEST_PG_URL to a server where the tests may create databases." >&2
exit 1

#!/bin/bash
# Entry point of the postgres stand-in image (docker/standins/postgres.Dockerfile).
#
# `postgres [ARGS]` (the default command): on the first start, when PGDATA holds no cluster, creates
# one whose superuser (POSTGRES_USER, default postgres) has the password POSTGRES_PASSWORD, runs
# /docker-entrypoint-initdb.d/*.sql and *.sh against it with the server listening on its Unix socket
# only, then serves on every address, port 5432, password-checked (scram-sha-256) from the network
# and trusted on the container's own Unix socket. Any other command runs as given.
set -euo pipefail

if [[ "${1:-postgres}" != postgres ]]; then exec "$@"; fi
[[ $# -gt 0 ]] && shift

if [[ "$(id -u)" == 0 ]]; then
  mkdir -p "$PGDATA" /var/run/postgresql
  chown -R postgres:postgres "$PGDATA" /var/run/postgresql
  chmod 700 "$PGDATA"
  exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" postgres "$@"
fi

user=${POSTGRES_USER:-postgres}
if [[ ! -s "$PGDATA/PG_VERSION" ]]; then
  if [[ -z "${POSTGRES_PASSWORD:-}" ]]; then
    echo "postgres: set POSTGRES_PASSWORD (the superuser's password for connections over the network)" >&2
    exit 1
  fi
  pwfile=$(mktemp)
  printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
  initdb -D "$PGDATA" --username="$user" --pwfile="$pwfile" --auth-local=trust --auth-host=scram-sha-256
  rm -f "$pwfile"
  echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"

  pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start
  for f in /docker-entrypoint-initdb.d/*; do
    case "$f" in
      *.sql)
        echo "postgres: running $f"
        psql -v ON_ERROR_STOP=1 --username="$user" --dbname=postgres -f "$f"
        ;;
      *.sh)
        echo "postgres: running $f"
        # shellcheck disable=SC1090
        . "$f"
        ;;
    esac
  done
  pg_ctl -D "$PGDATA" -m fast -w stop
  echo "postgres: initialised $PGDATA"
fi

exec postgres -D "$PGDATA" -c listen_addresses='*' "$@"

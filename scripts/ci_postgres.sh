#!/usr/bin/env bash
# Start a PostgreSQL server on loopback for the tests of `ngptune sweep --storage postgresql://...`
# (several sweep workers sharing one Optuna study). Idempotent: installs Debian's postgresql when
# it is missing, creates the cluster, the role and the database when they are missing, starts the
# cluster when it is down. Progress goes to stderr; the last line on stdout is the database URL:
#
#   postgresql+psycopg2://ngptune:ngptune@127.0.0.1:5432/ngptune_test
#
# Needs root (apt-get, runuser). Used by .ci/run; locally: URL="$(bash scripts/ci_postgres.sh | tail -n 1)".
set -euo pipefail

PG_USER="${NGPTUNE_PG_USER:-ngptune}"
PG_PASSWORD="${NGPTUNE_PG_PASSWORD:-ngptune}"
PG_DB="${NGPTUNE_PG_DB:-ngptune_test}"
PG_PORT="${NGPTUNE_PG_PORT:-5432}"

log() { echo "ci_postgres: $*" >&2; }

if ! command -v pg_ctlcluster >/dev/null 2>&1; then
  log "installing postgresql (Debian package)"
  apt-get update -q >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >&2
fi

# The newest installed major version (Debian 12: 15).
PG_VERSION="$(ls /usr/lib/postgresql | sort -n | tail -n 1)"
if [ -z "$PG_VERSION" ]; then
  log "no PostgreSQL server binaries under /usr/lib/postgresql"
  exit 1
fi

if ! pg_lsclusters -h | awk -v v="$PG_VERSION" '$1 == v && $2 == "main"' | grep -q .; then
  log "creating cluster $PG_VERSION/main on port $PG_PORT"
  pg_createcluster "$PG_VERSION" main --port "$PG_PORT" >&2
fi

status="$(pg_lsclusters -h | awk -v v="$PG_VERSION" '$1 == v && $2 == "main" {print $4}')"
port="$(pg_lsclusters -h | awk -v v="$PG_VERSION" '$1 == v && $2 == "main" {print $3}')"
if [ "$status" != "online" ]; then
  log "starting cluster $PG_VERSION/main (port $port)"
  pg_ctlcluster "$PG_VERSION" main start >&2
fi

# Wait until the server accepts connections (a few seconds at most on a fresh start).
for _ in $(seq 1 60); do
  if runuser -u postgres -- pg_isready -q -h 127.0.0.1 -p "$port"; then
    break
  fi
  sleep 0.5
done
runuser -u postgres -- pg_isready -h 127.0.0.1 -p "$port" >&2

psql_admin() { runuser -u postgres -- psql -p "$port" -v ON_ERROR_STOP=1 -tAq "$@"; }

if [ "$(psql_admin -c "select 1 from pg_roles where rolname = '$PG_USER'")" != "1" ]; then
  log "creating role $PG_USER"
  psql_admin -c "create user \"$PG_USER\" password '$PG_PASSWORD' superuser" >&2
fi
if [ "$(psql_admin -c "select 1 from pg_database where datname = '$PG_DB'")" != "1" ]; then
  log "creating database $PG_DB"
  runuser -u postgres -- createdb -p "$port" -O "$PG_USER" "$PG_DB" >&2
fi

echo "postgresql+psycopg2://$PG_USER:$PG_PASSWORD@127.0.0.1:$port/$PG_DB"

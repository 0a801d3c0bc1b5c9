#!/bin/sh
# Creates Temporal's two databases on PostgreSQL if they are missing and brings their
# schemas to the version this admin-tools image ships. Safe to run again: it is how the
# schema is upgraded when the images' version is raised (see docs/operations.md).
set -eu
: "${POSTGRES_SEEDS:?}" "${POSTGRES_USER:?}" "${SQL_PASSWORD:?}"
PORT=${DB_PORT:-5432}
SCHEMA=/etc/temporal/schema/postgresql/v12

until nc -z -w 5 "$POSTGRES_SEEDS" "$PORT"; do
  echo "waiting for PostgreSQL at $POSTGRES_SEEDS:$PORT"
  sleep 2
done

sql() {
  temporal-sql-tool --plugin postgres12 --ep "$POSTGRES_SEEDS" -p "$PORT" -u "$POSTGRES_USER" "$@"
}
for db in temporal:temporal temporal_visibility:visibility; do
  name=${db%%:*}
  dir=${db##*:}
  # `create` fails once the database exists; `setup-schema -v 0.0` is a no-op then.
  sql --db "$name" create || echo "database $name exists"
  sql --db "$name" setup-schema -v 0.0
  sql --db "$name" update-schema -d "$SCHEMA/$dir/versioned"
done
echo "Temporal schemas are up to date"

#!/bin/sh
# One-shot job of docker-compose.yml: create (or upgrade) the Temporal schemas in PostgreSQL.
# On a re-run with an existing volume, create and setup-schema find their work done (their errors are expected and
# dropped); update-schema is idempotent and is the step whose failure means something is really wrong.
set -eu
schemas=/etc/temporal/schema/postgresql/v12
sqltool() { temporal-sql-tool --plugin postgres12 --ep "$POSTGRES_SEEDS" -p "$DB_PORT" -u "$POSTGRES_USER" "$@"; }
for db in temporal temporal_visibility; do
  case $db in temporal) dir=$schemas/temporal/versioned ;; *) dir=$schemas/visibility/versioned ;; esac
  sqltool --db "$db" create >/dev/null 2>&1 || echo "database $db exists"
  sqltool --db "$db" setup-schema -v 0.0 >/dev/null 2>&1 || echo "schema of $db exists"
  sqltool --db "$db" update-schema -d "$dir"
done
echo "Temporal schemas ready"

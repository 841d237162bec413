#!/bin/sh
# Creates Temporal's two PostgreSQL databases (temporal, temporal_visibility)
# and brings their schemas to the versions this admin-tools image ships.
# docker-compose.yml runs it in the temporal-schema service, the way
# upstream's compose files set up temporalio/server (the deprecated
# auto-setup image did this inside the server). Every step is idempotent,
# so it also runs on every `docker compose up`; any failure exits non-zero
# and the server never starts.
set -eu

: "${POSTGRES_SEEDS:?set POSTGRES_SEEDS to the PostgreSQL host}"
: "${POSTGRES_USER:?set POSTGRES_USER}"
: "${SQL_PASSWORD:?set SQL_PASSWORD to the PostgreSQL password}"
port=${DB_PORT:-5432}
schema=/etc/temporal/schema/postgresql/v12

sql() {
	temporal-sql-tool --plugin postgres12 --ep "$POSTGRES_SEEDS" -p "$port" -u "$POSTGRES_USER" "$@"
}

for db in temporal temporal_visibility; do
	case $db in
	temporal) dir=$schema/temporal/versioned ;;
	*) dir=$schema/visibility/versioned ;;
	esac
	echo "temporal-schema: database $db"
	sql --db "$db" create
	sql --db "$db" setup-schema -v 0.0
	sql --db "$db" update-schema -d "$dir"
done
echo "temporal-schema: done"

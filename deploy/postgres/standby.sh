#!/usr/bin/env bash
# The `replica` profile's PostgreSQL (docker-compose.yml, service postgres-replica): a hot standby of the compose
# `postgres` service, made with pg_basebackup from the same image, then streaming its WAL.
#
# - as root: own PGDATA and the socket folder, then run again as user postgres (as the image's entrypoint does);
# - on an empty PGDATA: wait for the primary, make its replication slot (RAGVPS_REPLICA_SLOT) if missing, so the
#   primary keeps the WAL the standby has not read yet (bounded there by max_slot_wal_keep_size), then
#   `pg_basebackup -R`: a copy of the primary, with standby.signal and primary_conninfo written;
# - then exec the command (`postgres -c config_file=... -c hba_file=...`): the server starts in recovery and
#   answers reads. A standby whose data is already there just starts and catches up from the slot.
#
# Rebuild a standby that fell too far behind: `docker compose --profile replica rm -sfv postgres-replica`,
# `docker volume rm ragvps_pgdata-replica`, then `up` again (deploy/README.md, "A read replica").
set -Eeuo pipefail

if [ "$(id -u)" = '0' ]; then
    mkdir -p "$PGDATA" /var/run/postgresql
    chown postgres:postgres "$PGDATA" /var/run/postgresql
    chmod 700 "$PGDATA"
    chmod 3777 /var/run/postgresql
    exec setpriv --reuid=postgres --regid=postgres --init-groups bash "$BASH_SOURCE" "$@"
fi

primary=${RAGVPS_PRIMARY_HOST:-postgres}
slot=${RAGVPS_REPLICA_SLOT:-ragvps_replica}
user=${POSTGRES_USER:-postgres}
db=${POSTGRES_DB:-$user}
export PGPASSWORD="${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD in .env (see .env.example)}"

if [ ! -s "$PGDATA/PG_VERSION" ]; then
    echo "standby: waiting for the primary at $primary:5432"
    until pg_isready -q -h "$primary" -U "$user" -d "$db"; do
        sleep 2
    done
    psql -h "$primary" -U "$user" -d "$db" -v ON_ERROR_STOP=1 --no-psqlrc -qAt -v slot="$slot" <<'SQL'
SELECT pg_create_physical_replication_slot(:'slot')
WHERE NOT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = :'slot');
SQL
    echo "standby: pg_basebackup from $primary (slot $slot)"
    rm -rf "${PGDATA:?}"/*
    pg_basebackup -h "$primary" -U "$user" -D "$PGDATA" -S "$slot" -R -X stream -c fast
    echo "standby: copy complete; starting in recovery"
fi

exec "$@"

#!/usr/bin/env bash
# The official postgres image's entrypoint behaviour, for the smoke test's stand-in image (deploy/smoke.sh):
# - as root: own PGDATA and the socket folder, then run again as user postgres;
# - on an empty PGDATA: initdb with POSTGRES_USER and POSTGRES_PASSWORD (required), password logins over
#   TCP (scram-sha-256), POSTGRES_DB created, /docker-entrypoint-initdb.d/*.sh|*.sql run, all on a
#   temporary server that listens on the Unix socket only (so a TCP healthcheck is not fooled by it);
# - then exec the command (`postgres -c config_file=... ...`), so signals reach the server.
set -Eeuo pipefail

if [ "${1:0:1}" = '-' ]; then
    set -- postgres "$@"
fi

if [ "$1" = 'postgres' ] && [ "$(id -u)" = '0' ]; then
    mkdir -p "$PGDATA" /var/run/postgresql
    chown postgres:postgres "$PGDATA" /var/run/postgresql
    chmod 700 "$PGDATA"
    chmod 3777 /var/run/postgresql
    exec setpriv --reuid=postgres --regid=postgres --init-groups "$BASH_SOURCE" "$@"
fi

if [ "$1" = 'postgres' ] && [ ! -s "$PGDATA/PG_VERSION" ]; then
    if [ -z "${POSTGRES_PASSWORD:-}" ]; then
        echo "error: database is uninitialized and POSTGRES_PASSWORD is not set" >&2
        exit 1
    fi
    user="${POSTGRES_USER:-postgres}"
    db="${POSTGRES_DB:-$user}"
    initdb --username="$user" --pwfile=<(printf '%s\n' "$POSTGRES_PASSWORD") --encoding=UTF8 \
        --locale=C.UTF-8 --auth-local=trust --auth-host=scram-sha-256 ${POSTGRES_INITDB_ARGS:-}
    printf '\nhost all all all scram-sha-256\n' >> "$PGDATA/pg_hba.conf"
    pg_ctl -D "$PGDATA" -o "-c listen_addresses='' -p 5432" -w start
    psql=(psql -v ON_ERROR_STOP=1 --username "$user" --no-password --no-psqlrc)
    if [ "$db" != 'postgres' ]; then
        "${psql[@]}" --dbname postgres --set db="$db" <<<'CREATE DATABASE :"db";'
    fi
    for f in /docker-entrypoint-initdb.d/*; do
        case "$f" in
            *.sh) echo "running $f"; . "$f" ;;
            *.sql) echo "running $f"; "${psql[@]}" --dbname "$db" -f "$f" ;;
            *.sql.gz) echo "running $f"; gunzip -c "$f" | "${psql[@]}" --dbname "$db" ;;
            *) [ -e "$f" ] && echo "ignoring $f" ;;
        esac
    done
    pg_ctl -D "$PGDATA" -m fast -w stop
    echo "PostgreSQL init process complete; ready for start up."
fi

exec "$@"

#!/usr/bin/env bash
# The smoke test's own dockerd: its own socket and exec root under /run/ragvps-smoke, its data root (with the
# images deploy/smoke.sh builds) under the smoke cache, so it never touches a system Docker. Used by
# deploy/smoke.sh and by the tests' PostgreSQL 17 leg (`python -m pytest --pg container`, run by .ci/run).
#
#   bash deploy/smoke/dockerd.sh start   # stops one a previous run left, starts it, prints its DOCKER_HOST
#   bash deploy/smoke/dockerd.sh stop    # by its pid; waits up to 30 s, then kills it
#
# Exits 3 with one line on stderr when no dockerd can run here (not root, not installed, or it does not start).
# RAGVPS_SMOKE_CACHE as in deploy/smoke.sh (default /var/cache/ragvps-smoke).
set -euo pipefail

CACHE=${RAGVPS_SMOKE_CACHE:-/var/cache/ragvps-smoke}
RUN_DIR=/run/ragvps-smoke
PIDFILE=$RUN_DIR/dockerd.pid
SOCKET=unix://$RUN_DIR/docker.sock

cannot() { echo "dockerd: cannot run here: $*" >&2; exit 3; }

stop() {
    local pid
    [ -s "$PIDFILE" ] && pid=$(cat "$PIDFILE") || return 0
    kill -0 "$pid" 2>/dev/null || { rm -f "$PIDFILE"; return 0; }
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$PIDFILE"
}

start() {
    [ "$(id -u)" -eq 0 ] || cannot "dockerd needs root"
    command -v dockerd >/dev/null || cannot "no dockerd installed (deploy/smoke.sh installs docker.io)"
    mkdir -p "$CACHE" "$RUN_DIR"
    if [ -s "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
        echo "dockerd: stopping the one a previous run left (pid $(cat "$PIDFILE"))" >&2
        stop
    fi
    setsid dockerd --data-root "$CACHE/docker" --exec-root "$RUN_DIR/exec" --pidfile "$PIDFILE" \
        --host "$SOCKET" >"$CACHE/dockerd.log" 2>&1 </dev/null &
    local pid=$!
    for _ in $(seq 1 60); do
        DOCKER_HOST=$SOCKET docker info >/dev/null 2>&1 && { echo "$SOCKET"; return 0; }
        kill -0 "$pid" 2>/dev/null || { tail -n 20 "$CACHE/dockerd.log" >&2; cannot "dockerd exited (log: $CACHE/dockerd.log)"; }
        sleep 0.5
    done
    tail -n 20 "$CACHE/dockerd.log" >&2
    kill "$pid" 2>/dev/null || true
    cannot "dockerd did not answer within 30 s (log: $CACHE/dockerd.log)"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    *) echo "usage: bash deploy/smoke/dockerd.sh start|stop" >&2; exit 2 ;;
esac

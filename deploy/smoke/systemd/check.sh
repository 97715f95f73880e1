# Sourced by deploy/smoke.sh (which defines say, die, quiet, py, CACHE, WORK, KEY, QUESTION, top): the
# units of deploy/systemd/ run by a real systemd, PID 1 of a container (CAP_SYS_ADMIN) on the host's network,
# against the running compose stack (through the smoke dockerd's socket).
#
# The units are installed as written except for their paths: /opt/ragvps becomes the checkout copy
# ($WORK, where the stack runs; the reindex unit's compose call needs the host's path for the bind
# mounts), and /opt/ragvps/venv/bin/ragvps the app image's ragvps (/opt/python/bin/ragvps).

SYSTEMD_BOX=ragvps-smoke-systemd

in_box() { docker exec "$SYSTEMD_BOX" "$@"; }
in_box_stdin() { docker exec -i "$SYSTEMD_BOX" "$@"; }

systemd_check() {
    local ctx="$CACHE/build/systemd" sock_gid state
    mkdir -p "$ctx"
    cp "$WORK/deploy/smoke/systemd/Dockerfile" "$ctx/"
    cp "$(command -v docker)" "$ctx/docker"
    local plugin
    for plugin in /usr/local/lib/docker/cli-plugins /usr/local/libexec/docker/cli-plugins \
                  /usr/lib/docker/cli-plugins /usr/libexec/docker/cli-plugins; do
        [ -x "$plugin/docker-compose" ] && { cp "$plugin/docker-compose" "$ctx/"; break; }
    done
    [ -x "$ctx/docker-compose" ] || die "no docker-compose plugin found to copy into the systemd container"
    quiet env DOCKER_BUILDKIT=0 docker build -t ragvps-smoke/systemd "$ctx"
    docker rm -f -v "$SYSTEMD_BOX" >/dev/null 2>&1 || true
    # Not --privileged: this machine's dockerd may not grant every capability (runc: "unable to apply
    # caps"). systemd needs CAP_SYS_ADMIN (its mounts and the units' namespaces) and the cgroup tree.
    quiet docker run -d --name "$SYSTEMD_BOX" --cap-add SYS_ADMIN --security-opt seccomp=unconfined --network host \
        --tmpfs /run --tmpfs /run/lock --tmpfs /tmp -v /sys/fs/cgroup:/sys/fs/cgroup \
        -v "$RUN_DIR/docker.sock:/var/run/docker.sock" -v "$WORK:$WORK" ragvps-smoke/systemd
    for _ in $(seq 1 90); do  # (--wait needs systemd's socket, which is not there in the first moments)
        state=$(in_box systemctl is-system-running 2>/dev/null || true)
        case "$state" in running|degraded) break ;; esac
        sleep 1
    done
    case "$state" in
        running|degraded) say "  systemd $(in_box systemctl --version | head -n 1 | cut -d' ' -f2) is up ($state)" ;;
        *) docker logs "$SYSTEMD_BOX" 2>&1 | tail -n 20 >&2; die "systemd did not come up in the container (state '$state')" ;;
    esac
    in_box systemctl --failed --no-pager >>"$LOG" 2>&1 || true

    # The host's side of deploy/README.md: the ragvps user owns the checkout and may use docker.
    sock_gid=$(stat -c %g "$RUN_DIR/docker.sock")
    quiet in_box sh -c "getent group docker >/dev/null || groupadd -g $sock_gid docker"
    quiet in_box chown -R ragvps:ragvps "$WORK"
    for unit in ragvps-reindex.service ragvps-reindex.timer ragvps-serve.service; do
        sed -e 's#/opt/ragvps/venv/bin/ragvps#/opt/python/bin/ragvps#g' -e "s#/opt/ragvps#$WORK#g" \
            "$WORK/deploy/systemd/$unit" | in_box_stdin sh -c "cat > /etc/systemd/system/$unit"
    done
    quiet in_box systemctl daemon-reload

    # The timer: enabled, next run at 03:00-03:30 UTC.
    quiet in_box systemctl enable --now ragvps-reindex.timer
    in_box systemctl list-timers ragvps-reindex.timer --no-pager >>"$LOG" 2>&1
    local next
    next=$(in_box systemctl show ragvps-reindex.timer -p NextElapseUSecRealtime --value)
    [[ "$next" =~ \ 03:([0-2][0-9]|30):[0-9]{2}\  ]] || die "the timer's next run is '$next', not 03:00-03:30"
    say "  timer enabled, next run: $next"

    # The service, started as the timer would: a oneshot run of the reindex, as user ragvps.
    quiet in_box systemctl start ragvps-reindex.service
    [ "$(in_box systemctl show ragvps-reindex.service -p Result --value)" = success ] \
        || die "ragvps-reindex.service did not succeed"
    in_box journalctl -u ragvps-reindex.service --no-pager >>"$LOG" 2>&1
    in_box journalctl -u ragvps-reindex.service --no-pager | grep -q "docker compose\|reindex\|Finished" \
        || die "the reindex run left nothing in the journal"
    # A run still holding the lock makes the next one exit at once instead of queueing.
    docker exec -d "$SYSTEMD_BOX" flock /run/lock/ragvps-reindex.lock sleep 20
    sleep 2
    if in_box timeout 30 systemctl start ragvps-reindex.service >>"$LOG" 2>&1; then
        die "ragvps-reindex.service ran although another run held the lock"
    fi
    [ "$(in_box systemctl show ragvps-reindex.service -p ExecMainStatus --value)" = 1 ] \
        || die "ragvps-reindex.service under a held lock did not exit 1"
    say "  reindex service: ran as ragvps (success); under a held lock exited 1 at once"

    # The serve unit on 127.0.0.1:8765 (the compose serve service stopped to free the port), with the
    # settings file and key file of docs/serve.md; its database and Ollama are the compose stack's.
    quiet docker compose stop serve
    local password serve_key
    password=$(sed -n 's/^POSTGRES_PASSWORD=//p' .env)
    serve_key=$(openssl rand -hex 32)
    in_box_stdin sh -c "install -d -m 750 /etc/ragvps && install -d -o ragvps -g ragvps /var/lib/ragvps
        printf '%s\n' '$serve_key' > /etc/ragvps/api-keys && chmod 600 /etc/ragvps/api-keys
        cat > /etc/ragvps/ragvps.env" <<EOF
RAGVPS_DATABASE_URL=postgresql://ragvps@127.0.0.1:5432/ragvps
PGPASSWORD=$password
RAGVPS_EMBEDDER=ollama
RAGVPS_OLLAMA_URL=http://127.0.0.1:11434
RAGVPS_EMBED_MODEL=nomic-embed-text:v1.5
RAGVPS_DATA_DIR=/var/lib/ragvps
EOF
    # systemd 252 in this container hands over no credential at all (a service's $CREDENTIALS_DIRECTORY is
    # empty, even for a SetCredential= literal), so LoadCredential= cannot be checked here: a drop-in of
    # this test only gives the same key file to ragvps by path. Everything else is the unit as written.
    in_box sh -c "install -d -m 755 /etc/ragvps-smoke
        install -o ragvps -m 400 /etc/ragvps/api-keys /etc/ragvps-smoke/api-keys
        mkdir -p /etc/systemd/system/ragvps-serve.service.d
        printf '[Service]\nLoadCredential=\nEnvironment=RAGVPS_API_KEY_FILE=/etc/ragvps-smoke/api-keys\n' \
            > /etc/systemd/system/ragvps-serve.service.d/smoke.conf && systemctl daemon-reload"
    quiet in_box systemctl start ragvps-serve.service
    local ok=0
    for _ in $(seq 1 90); do
        curl -fsS http://127.0.0.1:8765/health >/dev/null 2>&1 && { ok=1; break; }
        sleep 1
    done
    if [ "$ok" != 1 ]; then
        in_box journalctl -u ragvps-serve.service --no-pager | tail -n 20 >&2
        die "ragvps-serve.service did not answer /health within 90 s"
    fi
    curl -fsS http://127.0.0.1:8765/search -H "Authorization: Bearer $serve_key" \
        -H 'Content-Type: application/json' -d "{\"query\": \"$QUESTION\"}" | py '
import json, sys
r = json.load(sys.stdin)
assert r["hits"] and r["hits"][0]["path"] == sys.argv[1], r["hits"][:1]
' "$top" || die "ragvps-serve.service: /search with the key file's key did not find the top hit"
    [ "$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8765/search -H 'Content-Type: application/json' \
        -d '{"query": "x"}')" = 401 ] || die "ragvps-serve.service answered /search without a key"
    in_box systemctl show ragvps-serve.service -p MainPID -p User -p MemoryMax >>"$LOG"
    quiet in_box systemctl stop ragvps-serve.service
    say "  serve service: /health, /search with the key, 401 without; stopped"
    docker rm -f -v "$SYSTEMD_BOX" >/dev/null
    quiet docker compose start serve
}

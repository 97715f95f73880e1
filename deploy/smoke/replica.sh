# Sourced by deploy/smoke.sh (which defines say, die, quiet, py, CACHE, WORK, KEY, QUESTION, top, url): the compose
# profile `replica` started on the running stack, then checked as docs/scale-out.md says it behaves:
# - the standby is a hot standby of the primary, streaming, with the same knowledge bases;
# - HAProxy on 127.0.0.1:8766 answers searches through either server, and goes on when one server stops;
# - an upload through the balancer is a job either server shows, done, then searchable;
# - the primary stopped for 30 s while a client searches through the balancer every 0.25 s: no search fails (the
#   servers read from the standby: the setting database_replica_urls), a write gets 503; the primary started
#   again, writes work again without a restart.

REPLICA_URL=postgresql://ragvps@postgres-replica:5432/ragvps
LB=http://127.0.0.1:8766

lb_search() {
    curl -fsS "$LB/search" -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
        -d "{\"query\": \"$1\"}"
}

healthy() { [ "$(docker inspect -f '{{.State.Health.Status}}' "$(docker compose ps -q "$1")")" = healthy ]; }

wait_healthy() {
    local name=$1 seconds=$2
    for _ in $(seq 1 "$seconds"); do
        healthy "$name" && return 0
        sleep 1
    done
    die "$name is not healthy $seconds s after it was started"
}

replica_check() {
    grep -q '^RAGVPS_DATABASE_REPLICA_URLS=' .env || printf 'RAGVPS_DATABASE_REPLICA_URLS=%s\n' "$REPLICA_URL" >>.env
    docker tag ragvps-smoke/debian:bookworm-minbase debian:bookworm-slim  # the balancer's base (stand-in)
    quiet docker compose --profile replica build balancer
    quiet timeout 600 docker compose --profile replica up -d --wait
    say "  postgres-replica, serve-2 and balancer healthy; serve recreated with the replica setting"

    local recovery streaming kbs_primary kbs_standby
    recovery=$(docker compose exec -T postgres-replica psql -U ragvps -d ragvps -tAc 'SELECT pg_is_in_recovery()')
    [ "$recovery" = t ] || die "postgres-replica is not in recovery (pg_is_in_recovery: '$recovery')"
    streaming=$(docker compose exec -T postgres psql -U ragvps -d ragvps -tAc \
        "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'")
    [ "$streaming" = 1 ] || die "the primary streams to $streaming standbys, not 1"
    kbs_primary=$(docker compose exec -T postgres psql -U ragvps -d ragvps -tAc 'SELECT string_agg(name, $$,$$ ORDER BY name) FROM ragvps.knowledge_bases')
    kbs_standby=$(docker compose exec -T postgres-replica psql -U ragvps -d ragvps -tAc 'SELECT string_agg(name, $$,$$ ORDER BY name) FROM ragvps.knowledge_bases')
    [ "$kbs_primary" = "$kbs_standby" ] || die "the standby has knowledge bases '$kbs_standby', the primary '$kbs_primary'"
    say "  the standby streams from the primary, in recovery, with the knowledge bases $kbs_standby"

    lb_search "$QUESTION" | py '
import json, sys
r = json.load(sys.stdin)
assert r["hits"] and r["hits"][0]["path"] == sys.argv[1], (r["hits"][:1], sys.argv[1])
' "$top" || die "/search through the balancer did not find the top hit"
    quiet docker compose stop serve
    for _ in $(seq 1 20); do
        lb_search "$QUESTION" >/dev/null || die "/search through the balancer failed while serve was stopped"
    done
    quiet docker compose start serve
    wait_healthy serve 120
    say "  the balancer answered 20 searches with serve stopped (serve-2 alone), and has both again"

    local job
    job=$(curl -fsS "$LB/kb/default/documents" -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
        -d '[{"path": "smoke/replica-note", "text": "The lighthouse keeper rings the fog bell at dawn."}]' \
        | py 'import json,sys; print(json.load(sys.stdin)["job"])') || die "an upload through the balancer failed"
    local state=""
    for _ in $(seq 1 120); do
        state=$(curl -fsS "$LB/jobs/$job" -H "Authorization: Bearer $KEY" | py 'import json,sys; print(json.load(sys.stdin)["state"])')
        case "$state" in done|failed|cancelled) break ;; esac
        sleep 1
    done
    [ "$state" = done ] || die "the upload's job through the balancer is '$state', not done"
    lb_search "who rings the fog bell?" | py '
import json, sys
assert any(h["path"] == "smoke/replica-note.txt" for h in json.load(sys.stdin)["hits"]), "the upload is not found"
' || die "the upload through the balancer is not searchable"
    say "  an upload through the balancer: job $job done, searchable"

    # The primary stopped for 30 s under a paced search load through the balancer.
    local client_log="$CACHE/logs/replica-searches.log" stop_flag="$CACHE/replica-searches.stop" write_status
    rm -f "$stop_flag"
    python3 - "$LB" "$KEY" "$QUESTION" "$stop_flag" >"$client_log" 2>&1 <<'PY' &
import json, os, sys, time, urllib.error, urllib.request
lb, key, question, stop = sys.argv[1:5]
ok, failed, end = 0, [], time.monotonic() + 240  # bounded: at most 240 s, one search every 0.25 s
while time.monotonic() < end and not os.path.exists(stop):
    request = urllib.request.Request(lb + "/search", json.dumps({"query": question}).encode(),
                                     {"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            ok += bool(json.load(r)["hits"])
    except (urllib.error.URLError, OSError, ValueError) as exc:
        failed.append(f"{time.strftime('%H:%M:%S')} {getattr(exc, 'code', '')} {exc}")
    time.sleep(0.25)
print(json.dumps({"ok": ok, "failed": failed}))
PY
    local client=$!
    sleep 3
    quiet docker compose stop postgres
    say "  primary stopped; searching through the balancer for 30 s"
    sleep 5
    write_status=$(curl -s -o "$CACHE/logs/replica-write.json" -w '%{http_code}' "$LB/kb/default/documents" \
        -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
        -d '[{"path": "smoke/while-down", "text": "written while the primary is down"}]')
    local health
    health=$(curl -s "$LB/health" | py 'import json,sys; h = json.load(sys.stdin); print(h.get("status"), "-", h.get("degraded"))')
    sleep 25
    quiet docker compose start postgres
    wait_healthy postgres 120
    sleep 5
    touch "$stop_flag"
    wait "$client" || die "the search client failed: $(tail -n 5 "$client_log")"
    say "  during the stop: a write answered $write_status ($(head -c 200 "$CACHE/logs/replica-write.json")); /health said $health"
    py '
import json, sys
r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
ok, failed = r["ok"], r["failed"]
print(f"  searches across the primary stop: {ok} answered, {len(failed)} failed", file=sys.stderr)
assert r["ok"] > 100, r
assert not r["failed"], r["failed"][:5]
' "$client_log" || die "searches failed while the primary was stopped (log: $client_log)"
    [ "$write_status" = 503 ] || die "a write while the primary was down answered $write_status, not 503"
    [ "${health%% *}" = degraded ] || die "/health while the primary was down said '$health', not degraded"
    job=""
    for _ in $(seq 1 30); do  # the servers' pools find the primary again within their own retry
        job=$(curl -fsS "$LB/kb/default/documents" -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
            -d '[{"path": "smoke/after", "text": "written after the primary came back"}]' 2>/dev/null \
            | py 'import json,sys; print(json.load(sys.stdin)["job"])' 2>/dev/null) && break
        sleep 1
    done
    [ -n "$job" ] || die "no write succeeded within 30 s of the primary coming back"
    say "  the primary back: a write queued job $job, no restart"
}

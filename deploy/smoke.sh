#!/usr/bin/env bash
# `docker compose up -d --wait`, started for real: the whole VPS stack of docker-compose.yml on this machine, with the
# steps of deploy/README.md, then checks of what a user sees. Run as root:  bash deploy/smoke.sh
#
# It installs docker.io, Compose v2 and debootstrap where missing, starts a dockerd of its own (its own
# socket and data under the cache folder; stopped by its pid at the end), builds stand-ins for the images
# no registry can give here (deploy/smoke/), and runs the unmodified compose file on a copy of this
# checkout. On failure it names the step, shows the containers' last log lines and exits 1; where no
# dockerd can run (not root, no apt-get to install it, or it does not start) it says so and exits 3.
#
#   RAGVPS_SMOKE_CACHE   folder it owns: debootstrap output, the dockerd data, the checkout copy
#                        (default /var/cache/ragvps-smoke; `rm -rf` it for a run from scratch)
#   RAGVPS_SMOKE_MIRROR  Debian mirror for debootstrap and the Compose package (default: apt's own)
#   RAGVPS_SMOKE_CA_DIR  certificate authorities copied into the images (default /usr/local/share/ca-certificates)
#   RAGVPS_SMOKE_REPLICA 0 leaves out the leg of the compose profile `replica` (deploy/smoke/replica.sh)
set -Eeuo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${RAGVPS_SMOKE_CACHE:-/var/cache/ragvps-smoke}
CA_DIR=${RAGVPS_SMOKE_CA_DIR:-/usr/local/share/ca-certificates}
RUN_DIR=/run/ragvps-smoke
WORK=$CACHE/work/ragvps            # the checkout copy: /opt/ragvps on a VPS
LOG=$CACHE/smoke.log
STEP="start"
STARTED=$SECONDS
DOCKERD_STARTED=0
STACK_UP=0
QUESTION="what happens when I run ingest twice?"

if [ "$(id -u)" -ne 0 ]; then
    echo "smoke: cannot run here: dockerd needs root" >&2
    exit 3
fi
mkdir -p "$CACHE" "$RUN_DIR"
: >"$LOG"

say() { printf '%s\n' "$*" | tee -a "$LOG" >&2; }
step() { STEP=$1; say "smoke [$((SECONDS - STARTED)) s] $STEP"; }
die() { say "smoke: $*"; exit 1; }
cannot() { say "smoke: cannot run here: $*"; exit 3; }
# Run a command with its output in the log only; on failure show its last lines.
quiet() {
    if ! "$@" >>"$LOG" 2>&1; then
        tail -n 25 "$LOG" >&2
        die "command failed: $*"
    fi
}
py() { python3 -c "$@"; }
# Background jobs with a log each; wait_jobs fails naming the jobs that failed, with their last lines.
JOBS=()
job() {
    local name=$1
    shift
    mkdir -p "$CACHE/logs"
    say "  $name (log: $CACHE/logs/$name.log)"
    ( "$@" ) >"$CACHE/logs/$name.log" 2>&1 &
    JOBS+=("$name:$!")
}
wait_jobs() {
    local entry failed=()
    for entry in "${JOBS[@]}"; do
        wait "${entry#*:}" || failed+=("${entry%%:*}")
    done
    JOBS=()
    for entry in "${failed[@]}"; do
        say "  --- last lines of $entry:"
        tail -n 25 "$CACHE/logs/$entry.log" >&2
    done
    [ "${#failed[@]}" -eq 0 ] || die "failed: ${failed[*]}"
}

finish() {
    local rc=$?
    trap - EXIT
    set +e
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 3 ]; then
        say "smoke: FAILED at step '$STEP' (exit $rc, after $((SECONDS - STARTED)) s); log: $LOG"
        if [ "$STACK_UP" = 1 ]; then
            (cd "$WORK" && docker compose ps -a && docker compose logs --no-color --tail 30) >&2 2>&1
        fi
    fi
    if [ "$STACK_UP" = 1 ]; then
        docker rm -f -v ragvps-smoke-systemd >>"$LOG" 2>&1
        (cd "$WORK" && docker compose --profile replica down -v --remove-orphans) >>"$LOG" 2>&1
    fi
    stop_dockerd
    [ "$rc" -eq 0 ] && say "smoke: passed in $((SECONDS - STARTED)) s"
    exit "$rc"
}
trap finish EXIT

stop_dockerd() {
    [ "$DOCKERD_STARTED" = 1 ] || return 0
    bash "$REPO/deploy/smoke/dockerd.sh" stop
    DOCKERD_STARTED=0
}

# --- install what is missing ------------------------------------------------------------------------------

debian_mirror() {
    local m
    m=$(grep -rhoE '^(deb|URIs:) +(\[[^]]*\] +)?https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null \
        | grep -oE 'https?://[^ ]+' | head -n 1)
    printf '%s\n' "${RAGVPS_SMOKE_MIRROR:-${m:-http://deb.debian.org/debian}}"
}

compose_is_v2() { docker compose version 2>/dev/null | grep -qE 'version v?2\.'; }

# Compose v2 from Debian trixie's `docker-compose` package (built by Debian from source, fetched by apt
# and checked against the archive's signed index); bookworm has only Compose v1. See deploy/README.md.
install_compose() {
    local apt="$CACHE/apt" mirror
    mirror=$(debian_mirror)
    mkdir -p "$apt/lists/partial" "$apt/archives/partial"
    printf 'deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] %s trixie main\n' "$mirror" >"$apt/sources.list"
    local opts=(-o "Dir::Etc::SourceList=$apt/sources.list" -o Dir::Etc::SourceParts=/nonexistent
                -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt" -o "Dir::Cache::archives=$apt/archives"
                -o APT::Sandbox::User=root)
    quiet apt-get "${opts[@]}" update
    (cd "$apt/archives" && quiet apt-get "${opts[@]}" download docker-compose)
    quiet dpkg -i "$apt"/archives/docker-compose_2.*_*.deb
}

step "preflight: root, apt, free ports"
command -v dockerd >/dev/null || command -v apt-get >/dev/null || cannot "no dockerd, and no apt-get to install docker.io"
command -v python3 >/dev/null || die "needs python3 (to read JSON answers)"
for port in 5432 11434 8765 8766; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        die "port 127.0.0.1:$port is in use; the compose file publishes it: stop what listens there"
    fi
done

step "install docker.io, Compose v2, debootstrap (where missing)"
missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v curl >/dev/null || missing+=(curl)
command -v openssl >/dev/null || missing+=(openssl)
if [ "${#missing[@]}" -gt 0 ]; then
    quiet apt-get update
    DEBIAN_FRONTEND=noninteractive quiet apt-get install -y --no-install-recommends "${missing[@]}"
fi
compose_is_v2 || install_compose
compose_is_v2 || die "docker compose is not Compose v2 after installing it: $(docker compose version 2>&1 | head -n 1)"
say "  $(docker --version); $(docker compose version); $(dockerd --version)"

step "start dockerd (data under $CACHE/docker; deploy/smoke/dockerd.sh)"
DOCKERD_STARTED=1
rc=0; DOCKER_HOST=$(bash "$REPO/deploy/smoke/dockerd.sh" start 2>"$CACHE/dockerd.start") || rc=$?
cat "$CACHE/dockerd.start" >>"$LOG"
[ "$rc" -ne 3 ] || cannot "$(tail -n 1 "$CACHE/dockerd.start" | sed 's/^dockerd: cannot run here: //')"
[ "$rc" -eq 0 ] || { cat "$CACHE/dockerd.start" >&2; die "deploy/smoke/dockerd.sh start failed (exit $rc)"; }
export DOCKER_HOST

step "base images: debootstrap minbase bookworm and trixie, in parallel (cached in $CACHE/rootfs)"
base_image() {
    local suite=$1 image="ragvps-smoke/debian:$1-minbase" dir="$CACHE/rootfs/$1.dir"
    docker image inspect "$image" >/dev/null 2>&1 && return 0
    if [ ! -s "$CACHE/rootfs/$suite.tar" ]; then
        rm -rf "$dir"
        debootstrap --variant=minbase "$suite" "$dir" "$(debian_mirror)"
        tar -C "$dir" -cf "$CACHE/rootfs/$suite.tar.part" .
        mv "$CACHE/rootfs/$suite.tar.part" "$CACHE/rootfs/$suite.tar"
        rm -rf "$dir"
    fi
    docker import "$CACHE/rootfs/$suite.tar" "$image"
}
mkdir -p "$CACHE/rootfs"
job "debootstrap-bookworm" base_image bookworm
job "debootstrap-trixie" base_image trixie
wait_jobs

step "copy the checkout to $WORK (as /opt/ragvps on a VPS)"
rm -rf "$WORK"
mkdir -p "$WORK"
if git -C "$REPO" rev-parse --git-dir >/dev/null 2>&1; then
    (cd "$REPO" && git ls-files -z --cached --others --exclude-standard | xargs -0 -r sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh \
        | tar --null -T - -cf -) | tar -C "$WORK" -xf -
else
    (cd "$REPO" && tar --exclude=./.env -cf - .) | tar -C "$WORK" -xf -
fi
cd "$WORK"

step "configure .env (deploy/README.md, set-up step 3 and 'The server')"
cp .env.example .env
chmod 600 .env
sed -i "s/^POSTGRES_PASSWORD=.*/POSTGRES_PASSWORD=$(openssl rand -hex 24)/" .env
sed -i "s/^RAGVPS_API_KEYS=.*/RAGVPS_API_KEYS=$(openssl rand -hex 32)/" .env
chmod -R o+rX docs
KEY=$(sed -n 's/^RAGVPS_API_KEYS=//p' .env | cut -d, -f1)
config=$(docker compose config --format json)
image_of() { py 'import json,sys; print(json.load(sys.stdin)["services"][sys.argv[1]]["image"])' "$1" <<<"$config"; }
PG_IMAGE=$(image_of postgres)
OLLAMA_IMAGE=$(image_of ollama)
PY_IMAGE=$(awk 'toupper($1) == "FROM" {print $2}' deploy/Dockerfile | sort -u)
[ "$(wc -l <<<"$PY_IMAGE")" -eq 1 ] || die "deploy/Dockerfile starts from more than one image: $PY_IMAGE"
[ "$(image_of ollama-pull)" = "$OLLAMA_IMAGE" ] || die "ollama-pull and ollama use different images"

step "images, in parallel: stand-ins for $PY_IMAGE, $PG_IMAGE, $OLLAMA_IMAGE (deploy/smoke/); docker compose build"
build_ctx="$CACHE/build"
rm -rf "$build_ctx"
cp -r deploy/smoke "$build_ctx"
mkdir -p "$build_ctx/python/ca-certificates"
find "$CA_DIR" -maxdepth 2 -name '*.crt' -exec cp {} "$build_ctx/python/ca-certificates/" \; 2>/dev/null || true
# The stand-ins need nothing of BuildKit (and the docker client may lack buildx); compose builds
# deploy/Dockerfile with BuildKit, which reads deploy/Dockerfile.dockerignore.
postgres_image() { DOCKER_BUILDKIT=0 docker build -t ragvps-smoke/postgres:17-trixie -t "$PG_IMAGE" "$build_ctx/postgres"; }
python_images() {
    DOCKER_BUILDKIT=0 docker build -t ragvps-smoke/python:3.11-bookworm -t "$PY_IMAGE" "$build_ctx/python"
    DOCKER_BUILDKIT=0 docker build -t ragvps-smoke/ollama:stand-in -t "$OLLAMA_IMAGE" "$build_ctx/ollama"
    docker compose build  # deploy/Dockerfile, pip install from PyPI
}
job "build-postgres" postgres_image
job "build-python-ollama-ragvps" python_images
wait_jobs

step "docker compose up -d --wait"
STACK_UP=1
quiet docker compose --profile replica down -v --remove-orphans
docker volume prune -f >>"$LOG" 2>&1  # what an interrupted run left in this private daemon
before_up=$({ docker ps -aq; docker volume ls -q; } | sort)
up_start=$SECONDS
quiet timeout 600 docker compose up -d --wait
say "  up and healthy in $((SECONDS - up_start)) s"

step "services: postgres, ollama, serve healthy; ollama-pull exited 0; the one-shot ragvps not started; doctor"
docker compose ps -a >>"$LOG"
docker compose ps -a --format json | py '
import json, sys
text = sys.stdin.read().strip()
rows = json.loads(text) if text.startswith("[") else [json.loads(line) for line in text.splitlines()]
state = {r["Service"]: r for r in rows}
want = {"postgres": "healthy", "ollama": "healthy", "serve": "healthy", "ollama-pull": 0}
bad = []
for name, expected in want.items():
    r = state.get(name, {})
    run, health, code = r.get("State"), r.get("Health") or "no healthcheck", r.get("ExitCode")
    if expected == "healthy" and (run, health) != ("running", "healthy"):
        bad.append(f"{name}: {run}, {health}")
    elif expected == 0 and (run, code) != ("exited", 0):
        bad.append(f"{name}: {run}, exit {code}")
if set(state) - set(want):
    bad.append(f"up started more than the long-running services and the pull: {sorted(set(state) - set(want))}")
sys.exit("; ".join(bad) or None)
'
quiet docker compose run --rm ragvps doctor

step "ingest /docs in the app container (README set-up step 5)"
quiet docker compose run --rm ragvps ingest /docs
quiet docker compose run --rm ragvps query "how do I rotate the logs?"
quiet docker compose run --rm ragvps stats
chunks=$(docker compose run --rm -T ragvps stats --json | py 'import json,sys; print(json.load(sys.stdin)["rows"]["chunks"])')
[ "$chunks" -gt 0 ] || die "no chunks after the ingest"
say "  $chunks chunks"

step "query and ask in the app container"
top_hit() { docker compose run --rm -T ragvps query "$QUESTION" --json | py 'import json,sys; print(json.load(sys.stdin)[0]["path"])'; }
top=$(top_hit)
say "  top hit for '$QUESTION': $top"
[ -n "$top" ] || die "query found nothing"
docker compose run --rm -T ragvps ask "$QUESTION" --json | py '
import json, sys
a = json.load(sys.stdin)
# The stand-in vectors are hashed words, not a model: a refusal (answered false) is a fair answer too.
assert a["answer"].strip(), "empty answer"
assert a["answered"] is False or a["sources"], "answered without sources"
print("  answered:", a["answered"], "with", len(a["sources"]), "sources:", a["answer"][:90].replace("\n", " "),
      file=sys.stderr)
'

step "serve: /health, /search and /ask on 127.0.0.1:8765 with the key from .env"
url=http://127.0.0.1:8765
curl -fsS "$url/health" | py '
import json, sys
h = json.load(sys.stdin)
assert h["status"] == "ok" and h["ready"] and not h["empty"] and h["chunks"] > 0, h
'
status=$(curl -s -o /dev/null -w '%{http_code}' "$url/search" -H 'Content-Type: application/json' -d '{"query": "x"}')
[ "$status" = 401 ] || die "/search without a key answered $status, not 401"
curl -fsS "$url/search" -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
    -d "{\"query\": \"$QUESTION\"}" | py '
import json, sys
r = json.load(sys.stdin)
assert r["hits"] and r["hits"][0]["path"] == sys.argv[1], (r["hits"][:1], sys.argv[1])
' "$top"
curl -fsS "$url/ask" -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
    -d "{\"question\": \"$QUESTION\"}" | py '
import json, sys
a = json.load(sys.stdin)
assert a["answer"].strip() and (a["answered"] is False or a["sources"]), a
'

step "reindex with the systemd unit's command, restart postgres, check nothing was lost"
reindex=$(sed -n 's/^ExecStart=//p' deploy/systemd/ragvps-reindex.service)
mkdir -p /run/lock
quiet bash -c "$reindex"
quiet docker compose restart postgres
for _ in $(seq 1 60); do
    health=$(docker inspect -f '{{.State.Health.Status}}' "$(docker compose ps -q postgres)")
    [ "$health" = healthy ] && break
    sleep 2
done
[ "$health" = healthy ] || die "postgres is '$health' 120 s after the restart"
after=$(docker compose run --rm -T ragvps stats --json | py 'import json,sys; print(json.load(sys.stdin)["rows"]["chunks"])')
[ "$after" = "$chunks" ] || die "$chunks chunks before the reindex and restart, $after after"
[ "$(top_hit)" = "$top" ] || die "the top hit changed after the reindex and restart"
for _ in $(seq 1 30); do
    curl -fsS "$url/search" -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
        -d "{\"query\": \"$QUESTION\"}" >/dev/null 2>&1 && break
    sleep 1
done
curl -fsS "$url/search" -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
    -d "{\"query\": \"$QUESTION\"}" >/dev/null || die "the server does not answer /search after the postgres restart"
say "  $after chunks, same top hit, the server answers again"

step "upgrade and backup as deploy/README.md says (build, up --wait again, ALTER EXTENSION, pg_dump)"
quiet docker compose build ragvps
quiet timeout 600 docker compose up -d --wait
quiet docker compose exec postgres psql -U ragvps -d ragvps -c 'ALTER EXTENSION vector UPDATE'
docker compose exec -T postgres pg_dump -U ragvps -Fc ragvps >"$CACHE/ragvps.dump" || die "pg_dump failed"
tables=$(docker compose exec -T postgres pg_restore -l <"$CACHE/ragvps.dump" | grep -c ' TABLE ' || true)
[ "$tables" -gt 0 ] || die "the dump lists no tables"
rm -f "$CACHE/ragvps.dump"
say "  the dump lists $tables tables"

step "ingest again: nothing to embed"
docker compose run --rm -T ragvps ingest /docs --json | py '
import json, sys
r = json.load(sys.stdin)
assert r["embedded"] == 0 and r["stored"] == 0, r
'

step "a bundle: export from the embedded database on the host, import into the compose postgres, query it"
HOST_DATA=$CACHE/host-data
rm -rf "$HOST_DATA" "$CACHE/host-docs.ragvps"
host() { (cd "$WORK" && env RAGVPS_DATA_DIR="$HOST_DATA" RAGVPS_DATABASE_URL= RAGVPS_EMBEDDER=local python3 -m ragvps "$@"); }
quiet host ingest docs
quiet host export "$CACHE/host-docs.ragvps"
chmod 644 "$CACHE/host-docs.ragvps"
quiet docker compose run --rm -v "$CACHE/host-docs.ragvps:/tmp/host-docs.ragvps:ro" ragvps import /tmp/host-docs.ragvps --kb host-docs
first() { py 'import json,sys; print(json.load(sys.stdin)[0]["chunk_id"])'; }
want=$(host query "$QUESTION" --mode vector --json | first)
got=$(docker compose run --rm -T ragvps query "$QUESTION" --mode vector --kb host-docs --json | first)
[ "$want" = "$got" ] || die "the imported knowledge base answers $got, the host's $want"
quiet host server stop
say "  the host's knowledge base, imported into the compose postgres, answers with the same top chunk: $got"

step "systemd: deploy/systemd's units run by a real systemd in a container (timer, reindex, lock, serve)"
if [ "${RAGVPS_SMOKE_SYSTEMD:-1}" = 1 ]; then
    . "$WORK/deploy/smoke/systemd/check.sh"
    systemd_check
else
    say "  skipped (RAGVPS_SMOKE_SYSTEMD=0)"
fi

step "replica profile: a hot standby, a second server, HAProxy; the primary stopped while a client searches"
if [ "${RAGVPS_SMOKE_REPLICA:-1}" = 1 ]; then
    . "$WORK/deploy/smoke/replica.sh"
    replica_check
else
    say "  skipped (RAGVPS_SMOKE_REPLICA=0)"
fi

step "docker compose down -v"
quiet docker compose --profile replica down -v --remove-orphans
STACK_UP=0
docker image prune -f >>"$LOG" 2>&1  # the images the rebuilds left untagged, so the cache does not grow
left=$(comm -13 <(printf '%s\n' "$before_up") <({ docker ps -aq; docker volume ls -q; } | sort))
[ -z "$left" ] || die "containers or volumes left behind after down -v: $left"

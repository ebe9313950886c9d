#!/usr/bin/env bash
# Start Debian's docker-registry (distribution 2.8) in the background.
#
#   start-registry.sh PORT DIR [HTPASSWD]
#
# Listens on 127.0.0.1:PORT (plain HTTP; docker treats 127.0.0.0/8 as an
# insecure registry, so push/pull need no TLS), stores blobs under DIR, and,
# when HTPASSWD (a bcrypt file from `htpasswd -Bbn USER PASS`) is given,
# requires basic auth. Writes DIR/config.yml, DIR/registry.log and
# DIR/registry.pid, waits until /v2/ answers, then prints the PID on stdout
# (progress goes to stderr). Stop it with: kill "$(cat DIR/registry.pid)".
set -euo pipefail

log() { printf '[start-registry] %s\n' "$*" >&2; }
die() { printf '[start-registry] ERROR: %s\n' "$*" >&2; exit 1; }

if [ $# -lt 2 ] || [ $# -gt 3 ]; then die "usage: $0 PORT DIR [HTPASSWD]"; fi
PORT="$1"
DIR="$2"
HTPASSWD="${3:-}"
WAIT="${REGISTRY_WAIT:-30}"

case "$PORT" in '' | *[!0-9]*) die "PORT must be a number, got '$PORT'" ;; esac
REGISTRY="$(command -v docker-registry || true)"
[ -n "$REGISTRY" ] || die "docker-registry not found (run .ci/setup-host.sh)"
command -v curl >/dev/null || die "curl not found"

mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd)"
if [ -n "$HTPASSWD" ]; then
    [ -r "$HTPASSWD" ] || die "htpasswd file '$HTPASSWD' is not readable"
    HTPASSWD="$(cd "$(dirname "$HTPASSWD")" && pwd)/$(basename "$HTPASSWD")"
fi

URL="http://127.0.0.1:$PORT/v2/"
status() { curl -s -o /dev/null -m 2 -w '%{http_code}' "$URL" 2>/dev/null || true; }
code="$(status)"
if [ -n "$code" ] && [ "$code" != 000 ]; then
    die "something already answers on 127.0.0.1:$PORT (HTTP $code)"
fi

CONFIG="$DIR/config.yml"
{
    echo "version: 0.1"
    echo "log:"
    echo "  level: info"
    echo "storage:"
    echo "  filesystem:"
    echo "    rootdirectory: $DIR"
    echo "  delete:"
    echo "    enabled: true"
    echo "http:"
    echo "  addr: 127.0.0.1:$PORT"
    echo "  headers:"
    echo "    X-Content-Type-Options: [nosniff]"
    if [ -n "$HTPASSWD" ]; then
        echo "auth:"
        echo "  htpasswd:"
        echo "    realm: imgbuild-test-registry"
        echo "    path: $HTPASSWD"
    fi
} > "$CONFIG"

LOG="$DIR/registry.log"
log "starting $REGISTRY on 127.0.0.1:$PORT (storage $DIR${HTPASSWD:+, htpasswd $HTPASSWD}, log $LOG)"
# Keep stray REGISTRY_* variables from overriding the config file.
for name in $(compgen -e); do
    case "$name" in REGISTRY_*) unset "$name" ;; esac
done
setsid nohup "$REGISTRY" serve "$CONFIG" >> "$LOG" 2>&1 < /dev/null &
PID=$!
echo "$PID" > "$DIR/registry.pid"

for ((i = 0; i < WAIT * 5; i++)); do
    code="$(status)"
    case "$code" in
        200 | 401) break ;;
    esac
    if ! kill -0 "$PID" 2>/dev/null; then
        tail -n 20 "$LOG" >&2 || true
        die "docker-registry exited during start-up; see $LOG"
    fi
    sleep 0.2
done
case "$code" in
    200 | 401) ;;
    *)
        kill "$PID" 2>/dev/null || true
        tail -n 20 "$LOG" >&2 || true
        die "docker-registry did not answer $URL within ${WAIT}s (last HTTP code '$code')"
        ;;
esac
log "ready: $URL answers HTTP $code (pid $PID)"
echo "$PID"

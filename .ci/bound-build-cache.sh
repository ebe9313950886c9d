#!/usr/bin/env bash
# Keep the daemon's BuildKit cache under IMGBUILD_BUILD_CACHE_MAX records (default 1000) by pruning it
# whole when it is over: images stay, only the build cache goes. Why: dockerd 26.1 loads every record at
# start-up, asking containerd about each record's every ancestor layer, and exits with "context deadline
# exceeded" when that outlasts its deadline; the test tiers add thousands of records of deep layer chains a
# day, and at ~5,000 this host's dockerd could not start (CI of 2026-12-05). Run by setup-host.sh once the
# daemon answers and by .ci/run when it ends, so the next start of the daemon finds a bounded cache.
set -euo pipefail
export DOCKER_HOST=unix:///var/run/docker.sock
max="${IMGBUILD_BUILD_CACHE_MAX:-1000}"
records="$(docker system df --format '{{.Type}}={{.TotalCount}}' | sed -n 's/^Build Cache=//p')"
if [ "${records:-0}" -gt "$max" ]; then
    echo "[build-cache] $records BuildKit cache records, over $max: pruning the build cache (images stay)"
    docker builder prune --all --force | tail -n 1
else
    echo "[build-cache] $records BuildKit cache records (at most $max kept)"
fi

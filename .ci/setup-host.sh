#!/usr/bin/env bash
# Prepare a Debian bookworm host (run as root) for imgbuild's docker test tier:
#   - Debian packages: qemu-user-static, binfmt-support, mmdebstrap (+ arch-test),
#     docker-registry (distribution 2.8), apache2-utils, gcc + libc6-dev (a test's
#     static binary), and the engine's
#     dependencies from bookworm (containerd 1.6, runc 1.1, tini, iptables)
#   - the engine: docker.io + docker-cli 26.1 from Debian's next suite (trixie),
#     with the containerd image store (/etc/docker/daemon.json:
#     {"features":{"containerd-snapshotter":true}}), the one engine imgbuild
#     supports: BuildKit uses local bases as they are, an image id is its
#     manifest digest, a push keeps it, digests are reproducible.
#   - a running dockerd on /var/run/docker.sock (log: /var/log/dockerd.log).
#     A dockerd that answers there but is not that engine (bookworm's older
#     docker.io, or the classic image store) is stopped and replaced; its
#     containers stop with it, and its images (overlay2) are not visible in the
#     containerd image store.
#   - the buildx CLI plugin and cosign 2.5, taken from the next suite too
#   - arm64 emulation through binfmt_misc (qemu-aarch64)
# Idempotent: every step checks its state first and skips what is done.
# Network: only the package sources already configured in /etc/apt are used.
set -euo pipefail

log() { printf '[setup-host] %s\n' "$*"; }
die() { printf '[setup-host] ERROR: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "must run as root"
export DEBIAN_FRONTEND=noninteractive
# This script manages the daemon on the default socket, whatever the caller's
# environment points the docker client at.
export DOCKER_HOST=unix:///var/run/docker.sock
unset DOCKER_CONTEXT

NEXT_SUITE="${NEXT_SUITE:-trixie}"
# One engine: Docker 26.1 with the containerd image store.
ENGINE_PREFIX=26.1.
if [ -n "${IMGBUILD_DOCKER_ENGINE:-}" ] && [ "$IMGBUILD_DOCKER_ENGINE" != 26 ]; then
    log "IMGBUILD_DOCKER_ENGINE=$IMGBUILD_DOCKER_ENGINE is no longer read: imgbuild needs Docker 26 with the containerd image store; installing that"
fi
DAEMON_JSON=/etc/docker/daemon.json
PLUGIN_DIRS=(/usr/local/lib/docker/cli-plugins "${HOME:-/root}/.docker/cli-plugins")
if [ -n "${DOCKER_CONFIG:-}" ] && [ "${DOCKER_CONFIG%/}" != "${HOME:-/root}/.docker" ]; then
    PLUGIN_DIRS+=("${DOCKER_CONFIG%/}/cli-plugins")
fi
DOCKERD_LOG=/var/log/dockerd.log
DOCKERD_PIDFILE=/var/run/docker.pid
DOCKERD_WAIT=60
BUILDKIT_STATE=/var/lib/docker/buildkit
PY=/usr/bin/python3

TMP_ROOT="$(mktemp -d /tmp/setup-host.XXXXXX)"
POLICY_CREATED=0
cleanup() {
    rm -rf "$TMP_ROOT"
    if [ "$POLICY_CREATED" = 1 ]; then rm -f /usr/sbin/policy-rc.d; fi
}
trap cleanup EXIT

# ---------------------------------------------------------------- 1. packages
# docker.io 26.1 comes from the next suite (section 2); these are its
# dependencies, all satisfied from bookworm.
ENGINE_DEPS=(containerd runc tini iptables adduser libsystemd0 sysvinit-utils)
PACKAGES=(
    "${ENGINE_DEPS[@]}" qemu-user-static binfmt-support
    mmdebstrap arch-test gpg libdpkg-perl mount uidmap xz-utils
    docker-registry apache2-utils
    ca-certificates curl python3
    # the workflows' jq steps (.github/workflows/images.yml's plan, patches-check.yml's summary), run by tests
    jq
    # tests/docker/test_interrupts.py: a static sleep binary for its test image (gcc -static)
    gcc libc6-dev
)

is_installed() {
    [ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null || true)" = installed ]
}

missing=()
for p in "${PACKAGES[@]}"; do
    is_installed "$p" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    log "apt: installing ${missing[*]}"
    # Keep package scripts from starting services (docker, docker-registry):
    # this script starts what it needs itself.
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
        chmod 0755 /usr/sbin/policy-rc.d
        POLICY_CREATED=1
    fi
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    log "apt: done"
else
    log "apt: all ${#PACKAGES[@]} packages already installed"
fi

# Print the machine's Debian apt sources as one deb822 file, keeping only
# "deb" entries for this release's main suite, renamed to $1.
next_suite_sources() {
    "$PY" - "$1" <<'PYEOF'
import glob, os, re, sys

new = sys.argv[1]
codename = ""
with open("/etc/os-release") as f:
    for line in f:
        if line.startswith("VERSION_CODENAME="):
            codename = line.split("=", 1)[1].strip().strip('"')
if not codename:
    sys.exit("cannot read VERSION_CODENAME from /etc/os-release")

out = []
def add(uris, components, extra):
    para = ["Types: deb", "URIs: " + " ".join(uris), "Suites: " + new,
            "Components: " + " ".join(components)]
    para += extra
    out.append("\n".join(para))

# one-line format
lists = ["/etc/apt/sources.list"] + sorted(glob.glob("/etc/apt/sources.list.d/*.list"))
for path in lists:
    if not os.path.isfile(path):
        continue
    for line in open(path):
        line = line.split("#", 1)[0].strip()
        m = re.match(r"^deb\s+(\[[^\]]*\]\s+)?(\S+)\s+(\S+)\s+(.+)$", line)
        if not m or m.group(3) != codename:
            continue
        extra = []
        for opt in (m.group(1) or "").strip(" []").split():
            k, _, v = opt.partition("=")
            if k == "signed-by":
                extra.append("Signed-By: " + v)
            elif k == "arch":
                extra.append("Architectures: " + v.replace(",", " "))
        add([m.group(2)], m.group(4).split(), extra)

# deb822 format
for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
    text = open(path).read()
    for block in re.split(r"\n\s*\n", text):
        fields, key = {}, None
        for line in block.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            if line[0] in " \t" and key:
                fields[key] += "\n" + line
                continue
            key, _, val = line.partition(":")
            key = key.strip().lower()
            fields[key] = val.strip()
        if "deb" not in fields.get("types", "").split():
            continue
        if fields.get("enabled", "yes").lower() == "no":
            continue
        if codename not in fields.get("suites", "").split():
            continue
        extra = []
        if "signed-by" in fields:
            extra.append("Signed-By: " + fields["signed-by"])
        if "architectures" in fields:
            extra.append("Architectures: " + fields["architectures"])
        add(fields.get("uris", "").split(), fields.get("components", "main").split(), extra)

if not out:
    sys.exit("no Debian '%s' source found in /etc/apt" % codename)
print("\n\n".join(out))
PYEOF
}

# next_suite_download DIR PKG...: download PKGs (no dependencies) from
# $NEXT_SUITE into DIR, through a temporary apt configuration; the machine's
# own apt state is not touched.
NEXT_APT_READY=0
next_suite_download() {
    local dest="$1"; shift
    local A="$TMP_ROOT/apt"
    NEXT_APT_OPTS=(
        -o "Dir::Etc::SourceList=$A/sources.list"
        -o "Dir::Etc::SourceParts=$A/parts"
        -o "Dir::State::Lists=$A/lists"
        -o "Dir::Cache=$A/cache"
        -o "APT::Get::List-Cleanup=0"
        -o "APT::Sandbox::User=root"
    )
    if [ "$NEXT_APT_READY" = 0 ]; then
        mkdir -p "$A/parts" "$A/lists/partial" "$A/cache/archives/partial"
        : > "$A/sources.list"
        next_suite_sources "$NEXT_SUITE" > "$A/parts/next.sources" \
            || die "could not derive $NEXT_SUITE sources from /etc/apt"
        apt-get "${NEXT_APT_OPTS[@]}" update -qq \
            || log "apt: warning: apt-get update for $NEXT_SUITE reported errors; trying anyway"
        NEXT_APT_READY=1
    fi
    mkdir -p "$dest"
    (cd "$dest" && apt-get "${NEXT_APT_OPTS[@]}" download -qq "$@") \
        || die "apt-get download $* from $NEXT_SUITE failed"
}

# ---------------------------------------------------------------- 2. the engine
pkgver() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null || echo '?'; }

if [[ "$(pkgver docker.io)" == 26.1.* ]] && [[ "$(pkgver docker-cli)" == 26.1.* ]] && is_installed docker.io \
    && is_installed docker-cli; then
    log "engine: docker.io $(pkgver docker.io) and docker-cli $(pkgver docker-cli) already installed"
else
    log "engine: installing docker.io and docker-cli 26.1 from suite '$NEXT_SUITE' (was: docker.io $(pkgver docker.io))"
    next_suite_download "$TMP_ROOT/engine" docker.io docker-cli
    if [ ! -e /usr/sbin/policy-rc.d ]; then  # this script starts dockerd itself
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
        chmod 0755 /usr/sbin/policy-rc.d
        POLICY_CREATED=1
    fi
    # docker.io first: docker-cli Breaks bookworm's older docker.io (which still holds /usr/bin/docker).
    for p in docker.io docker-cli; do
        dpkg -i "$TMP_ROOT"/engine/"${p}"_*.deb >/dev/null || die "dpkg -i of $p 26.1 failed"
    done
    [[ "$(pkgver docker.io)" == 26.1.* ]] || die "docker.io is $(pkgver docker.io) after installing 26.1"
    log "engine: docker.io $(pkgver docker.io) installed"
fi
# The containerd image store, merged into any existing daemon.json.
mkdir -p "$(dirname "$DAEMON_JSON")"
"$PY" - "$DAEMON_JSON" <<'PYEOF'
import json, os, sys
path = sys.argv[1]
try:
    with open(path) as f:
        cfg = json.load(f)
except FileNotFoundError:
    cfg = {}
except ValueError as e:
    sys.exit(f"{path}: not valid JSON ({e}); fix or remove it")
feats = cfg.setdefault("features", {})
if feats.get("containerd-snapshotter") is not True:
    feats["containerd-snapshotter"] = True
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)
    print(f"[setup-host] engine: {path}: containerd-snapshotter enabled")
PYEOF

# ---------------------------------------------------------------- 3. dockerd
DOCKER_CLIENTS=(/usr/bin/docker /usr/local/bin/docker)

docker_answers() {
    local c
    for c in "${DOCKER_CLIENTS[@]}"; do
        if [ -x "$c" ] && timeout 10 "$c" info >/dev/null 2>&1; then
            return 0
        fi
    done
    return 1
}

# alive PID: a live process, not a zombie (an exited daemon stays one until reaped).
alive() {
    local state
    state="$(sed -n 's/^State:[[:space:]]*\(.\).*/\1/p' "/proc/$1/status" 2>/dev/null)"
    [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]
}

# pid_is NAME PIDFILE: the pid file names a live (not zombie) process called NAME.
pid_is() {
    local pid
    [ -s "$2" ] || return 1
    pid="$(tr -dc '0-9' < "$2")"
    [ -n "$pid" ] && [ -r "/proc/$pid/comm" ] || return 1
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$1" ] || return 1
    alive "$pid"
}

# server_engine: "VERSION STORE" of the daemon on the default socket (STORE: containerd or classic).
server_engine() {
    local c v store
    for c in "${DOCKER_CLIENTS[@]}"; do
        [ -x "$c" ] || continue
        v="$(timeout 10 "$c" version --format '{{.Server.Version}}' 2>/dev/null)" || continue
        [ -n "$v" ] || continue
        store=classic
        if timeout 10 "$c" info --format '{{range .DriverStatus}}{{index . 1}} {{end}}' 2>/dev/null \
            | grep -q 'io.containerd.snapshotter.v1'; then
            store=containerd
        fi
        echo "$v $store"
        return 0
    done
    return 1
}

engine_ok() {
    local e
    e="$(server_engine)" || return 1
    [[ "$e" == "$ENGINE_PREFIX"* ]] && [[ "$e" == *" containerd" ]]
}

# stop_dockerd: stop the daemon on the default socket and wait until it is gone.
stop_dockerd() {
    local pid="" t0
    if pid_is dockerd "$DOCKERD_PIDFILE"; then
        pid="$(tr -dc '0-9' < "$DOCKERD_PIDFILE")"
        log "dockerd: stopping pid $pid (its containers stop with it)"
        kill -TERM "$pid"
    elif command -v systemctl >/dev/null 2>&1 && systemctl is-active -q docker 2>/dev/null; then
        log "dockerd: stopping the systemd unit docker"
        systemctl stop docker docker.socket
    else
        die "a docker daemon answers on /var/run/docker.sock, but not from $DOCKERD_PIDFILE or systemd; stop it, then run this again"
    fi
    t0=$SECONDS
    while ((SECONDS - t0 < DOCKERD_WAIT)); do
        if { [ -z "$pid" ] || ! alive "$pid"; } && ! docker_answers; then
            log "dockerd: stopped after $((SECONDS - t0))s"
            return 0
        fi
        sleep 1
    done
    die "dockerd${pid:+ (pid $pid)} did not stop within ${DOCKERD_WAIT}s"
}

if docker_answers && ! engine_ok; then
    log "dockerd: running $(server_engine || echo '?'), but this host wants docker $ENGINE_PREFIX* with the containerd image store; replacing it"
    stop_dockerd
fi

# start_dockerd: start a daemon on the default socket (unless one is starting already) and wait until it
# answers; 1 when it exits or does not answer in time (it is stopped then). DOCKERD_MARK: its log's first line.
start_dockerd() {
    local pid="" cpid t0
    if pid_is dockerd "$DOCKERD_PIDFILE"; then
        pid="$(tr -dc '0-9' < "$DOCKERD_PIDFILE")"
        log "dockerd: pid $pid alive but not answering yet; waiting"
    else
        # Stale pid files from a killed daemon would make dockerd (or its
        # managed containerd) refuse to start or talk to the wrong process.
        if [ -e "$DOCKERD_PIDFILE" ]; then
            log "dockerd: removing stale $DOCKERD_PIDFILE"
            rm -f "$DOCKERD_PIDFILE"
        fi
        cpid=/var/run/docker/containerd/containerd.pid
        if [ -e "$cpid" ] && ! pid_is containerd "$cpid"; then
            log "dockerd: removing stale $cpid"
            rm -f "$cpid"
        fi
        DOCKERD="$(command -v /usr/sbin/dockerd dockerd 2>/dev/null | head -n1 || true)"
        [ -n "$DOCKERD" ] || die "dockerd not found (is docker.io installed?)"
        log "dockerd: starting $DOCKERD (log: $DOCKERD_LOG)"
        DOCKERD_MARK="==== $(date -u +%FT%T.%NZ) setup-host.sh starts dockerd"
        printf '\n%s\n' "$DOCKERD_MARK" >> "$DOCKERD_LOG"
        setsid nohup "$DOCKERD" >> "$DOCKERD_LOG" 2>&1 < /dev/null &
        pid=$!
    fi
    t0=$SECONDS
    while ((SECONDS - t0 < DOCKERD_WAIT)); do
        if docker_answers; then
            log "dockerd: up after $((SECONDS - t0))s"
            return 0
        fi
        if ! alive "$pid"; then
            log "dockerd: exited during start-up"
            tail -n 20 "$DOCKERD_LOG" >&2 || true
            return 1
        fi
        sleep 1
    done
    docker_answers && return 0
    log "dockerd: pid $pid did not answer on /var/run/docker.sock within ${DOCKERD_WAIT}s; stopping it"
    tail -n 20 "$DOCKERD_LOG" >&2 || true
    kill -TERM "$pid" 2>/dev/null || true
    t0=$SECONDS
    while alive "$pid" && ((SECONDS - t0 < DOCKERD_WAIT)); do sleep 1; done
    return 1
}

# stalled_in_buildkit_load: the last start got through "Daemon has completed initialization" but never opened
# its API. dockerd 26.1 sets BuildKit up in between, and BuildKit loads every build-cache record at start-up,
# asking containerd about each record's every ancestor layer; with ~5,000 records of deep layer chains that
# outlasted dockerd's deadline, and it exited with "context deadline exceeded" (CI of 2026-12-05, this host).
stalled_in_buildkit_load() {
    local since
    [ -n "${DOCKERD_MARK:-}" ] || return 1
    since="$(awk -v m="$DOCKERD_MARK" '$0 == m {found = 1} found' "$DOCKERD_LOG")"
    grep -q 'Daemon has completed initialization' <<<"$since" && ! grep -q 'API listen on' <<<"$since"
}

# drop_orphaned_leases BEFORE: delete the containerd leases created before BEFORE in BuildKit's namespaces.
# Run once BuildKit's old state was set aside: only that state knew them, and containerd's garbage collector
# frees the snapshots and blobs that nothing else (an image) holds.
drop_orphaned_leases() {
    local ns ids n sock=/var/run/docker/containerd/containerd.sock
    command -v ctr >/dev/null 2>&1 || { log "buildkit: no ctr; the old cache's layers stay on disk"; return 0; }
    for ns in moby moby_history; do
        ids="$(ctr -a "$sock" -n "$ns" leases ls 2>/dev/null | awk -v t="$1" 'NR > 1 && $2 < t {print $1}')"
        [ -n "$ids" ] || continue
        n="$(wc -l <<<"$ids")"
        xargs -r -n 200 ctr -a "$sock" -n "$ns" leases rm <<<"$ids" >/dev/null 2>&1 || true
        log "buildkit: dropped $n leases of the set-aside cache in containerd namespace $ns"
    done
}

if docker_answers; then
    log "dockerd: already running ($(server_engine))"
elif ! start_dockerd; then
    { stalled_in_buildkit_load && [ -d "$BUILDKIT_STATE" ]; } || die "dockerd did not start; see $DOCKERD_LOG"
    aside="$BUILDKIT_STATE.unloadable-$(date -u +%Y%m%dT%H%M%SZ)"
    log "dockerd: stalled loading BuildKit's build cache ($BUILDKIT_STATE, $(du -sh "$BUILDKIT_STATE" | cut -f1));" \
        "moving it to $aside and starting again: the build cache is lost, images stay"
    rm -rf "$BUILDKIT_STATE".unloadable-*  # the last one is kept, for a bug report
    mv "$BUILDKIT_STATE" "$aside"
    before="$(date -u +%FT%TZ)"
    start_dockerd || die "dockerd did not start, even without BuildKit's cache; see $DOCKERD_LOG"
    drop_orphaned_leases "$before"
fi
engine_ok || die "dockerd answers as $(server_engine || echo '?'), not docker $ENGINE_PREFIX* with the containerd image store; see $DOCKERD_LOG and $DAEMON_JSON"
bash "$(dirname "$0")/bound-build-cache.sh"

# ---------------------------------------------------------------- 4. the buildx plugin
PLUGINS=(docker-buildx)

plugins_ok() {
    local d p
    for d in "${PLUGIN_DIRS[@]}"; do
        for p in "${PLUGINS[@]}"; do
            [ -x "$d/$p" ] || return 1
            "$d/$p" docker-cli-plugin-metadata >/dev/null 2>&1 || return 1
        done
    done
}

if plugins_ok; then
    log "plugins: buildx already installed"
else
    log "plugins: fetching docker-buildx from suite '$NEXT_SUITE'"
    A="$TMP_ROOT/plugins"
    next_suite_download "$A/debs" "${PLUGINS[@]}"
    mkdir -p "$A/root"
    for deb in "$A"/debs/*.deb; do
        dpkg -x "$deb" "$A/root"
    done
    for p in "${PLUGINS[@]}"; do
        src="$(find "$A/root" -type f -path "*/cli-plugins/$p" | head -n1)"
        [ -n "$src" ] || die "$p binary not found in the downloaded package"
        for d in "${PLUGIN_DIRS[@]}"; do
            # a temp name, then rename: a docker client running meanwhile sees the old plugin or the new one
            install -D -m 0755 "$src" "$d/.$p.new.$$"
            mv -f "$d/.$p.new.$$" "$d/$p"
        done
    done
    log "plugins: installed into ${PLUGIN_DIRS[*]}"
fi

# Every docker client must see the plugins.
for c in docker "${DOCKER_CLIENTS[@]}"; do
    command -v "$c" >/dev/null 2>&1 || continue
    "$c" buildx version >/dev/null 2>&1 || die "'$c buildx version' fails"
done
log "plugins: 'docker buildx' works"

# cosign (publish --sign/--sbom, smoke --key): trixie's 2.5 needs only libc.
if command -v cosign >/dev/null 2>&1 && cosign version >/dev/null 2>&1; then
    log "cosign: already installed ($(pkgver cosign))"
else
    log "cosign: installing from suite '$NEXT_SUITE'"
    next_suite_download "$TMP_ROOT/cosign" cosign
    dpkg -i "$TMP_ROOT"/cosign/cosign_*.deb >/dev/null || die "dpkg -i of cosign failed"
    log "cosign: $(pkgver cosign) installed"
fi

# ---------------------------------------------------------------- 5. arm64 emulation
BINFMT=/proc/sys/fs/binfmt_misc
if ! mountpoint -q "$BINFMT"; then
    log "binfmt: mounting binfmt_misc on $BINFMT"
    mount -t binfmt_misc binfmt_misc "$BINFMT" || die "cannot mount binfmt_misc"
fi
if [ "$(head -n1 "$BINFMT/qemu-aarch64" 2>/dev/null || true)" = enabled ]; then
    log "binfmt: qemu-aarch64 already enabled"
else
    # The postinst may have run while binfmt_misc was unmounted: import again.
    [ -e /var/lib/binfmts/qemu-aarch64 ] || update-binfmts --import qemu-aarch64
    update-binfmts --enable qemu-aarch64 || die "update-binfmts --enable qemu-aarch64 failed"
    [ "$(head -n1 "$BINFMT/qemu-aarch64" 2>/dev/null || true)" = enabled ] \
        || die "$BINFMT/qemu-aarch64 is not enabled after update-binfmts"
    log "binfmt: qemu-aarch64 enabled"
fi
flags="$(sed -n 's/^flags: //p' "$BINFMT/qemu-aarch64")"
case "$flags" in
    *F*) ;;
    *) die "qemu-aarch64 binfmt lacks the F (fix-binary) flag ('$flags'); containers cannot find the interpreter" ;;
esac

# ---------------------------------------------------------------- 6. summary
first_line() { "$@" 2>&1 | head -n1 || true; }
log "summary:"
printf '  %-22s %s\n' \
    "docker client (PATH)" "$(docker version --format '{{.Client.Version}}' 2>/dev/null || echo '?') ($(command -v docker))" \
    "docker client (deb)" "$(/usr/bin/docker version --format '{{.Client.Version}}' 2>/dev/null || echo '?') (/usr/bin/docker)" \
    "docker server" "$(/usr/bin/docker version --format '{{.Server.Version}} API {{.Server.APIVersion}}' 2>/dev/null || echo '?'), storage $(/usr/bin/docker info --format '{{.Driver}}' 2>/dev/null || echo '?') ($(server_engine | cut -d' ' -f2) image store)" \
    "buildx" "$(first_line docker buildx version)" \
    "qemu-user-static" "$(pkgver qemu-user-static) (binfmt flags: $flags)" \
    "mmdebstrap" "$(first_line mmdebstrap --version)" \
    "docker-registry" "$(pkgver docker-registry)" \
    "cosign" "$(pkgver cosign)" \
    "apache2-utils" "$(pkgver apache2-utils) (htpasswd)"
log "done"

#!/usr/bin/env bash
# An sshd binary for the sparkrun distribution test (tests/docker/
# test_sparkrun_distribution.py, tests/support/sshd.py): the test runs it on a
# loopback port with a config, keys and known_hosts of its own, so nothing
# system-wide is installed or started. Debian's openssh-server (and libwrap0,
# which it links) are unpacked into /opt/imgbuild-sshd, not installed; only
# the `sshd` system user is added.
# Idempotent. The test finds it at $IMGBUILD_SSHD (default below).
set -euo pipefail
DEST=${IMGBUILD_SSHD_ROOT:-/opt/imgbuild-sshd}
# sshd's privilege separation needs its user, as openssh-server's postinst makes it
getent passwd sshd >/dev/null || useradd --system --no-create-home --home-dir /run/sshd --shell /usr/sbin/nologin sshd
if [ -x "$DEST/sshd" ]; then exit 0; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "[setup-sshd] unpacking openssh-server into $DEST"
(cd "$tmp" && apt-get download openssh-server libwrap0 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
mkdir -p "$DEST"
for deb in "$tmp"/*.deb; do dpkg -x "$deb" "$DEST"; done
lib=$(dirname "$(find "$DEST" -name 'libwrap.so.0' | head -1)")
cat > "$DEST/sshd" <<WRAP
#!/bin/sh
# sshd re-executes itself by absolute path; the unpacked libwrap is beside it
LD_LIBRARY_PATH="$lib" exec "$DEST/usr/sbin/sshd" "\$@"
WRAP
chmod +x "$DEST/sshd"
"$DEST/sshd" -V

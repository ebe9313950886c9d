#!/usr/bin/env bash
# Everything a fresh machine needs to build images and run every test tier:
# the host services (docker engine, buildx, qemu/binfmt, mmdebstrap, registry)
# and the Python package with its test extras. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/setup-host.sh
echo "[setup-dev] installing imgbuild and test tools"
python3 -m pip install -q --disable-pip-version-check -e '.[test]'
# CPU PyTorch for the SM12x patch tests (a local file on these machines).
python3 -c 'import torch' 2>/dev/null || python3 -m pip install -q --disable-pip-version-check torch==2.13.0
bash .ci/setup-sparkrun.sh
bash .ci/setup-sshd.sh  # the sparkrun distribution test's node login
echo "[setup-dev] ready"

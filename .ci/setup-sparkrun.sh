#!/usr/bin/env bash
# sparkrun (the DGX Spark launcher) for the recipe tests: its own recipe loader
# checks what `imgbuild recipe` writes. sparkrun 0.4.2 needs Python >= 3.12 and
# pins its dependencies exactly, so it gets a venv of its own instead of the
# project's environment. Idempotent. The tests find it at $IMGBUILD_SPARKRUN_PYTHON
# (default /opt/imgbuild-sparkrun/bin/python).
set -euo pipefail
VENV=${IMGBUILD_SPARKRUN_VENV:-/opt/imgbuild-sparkrun}
if "$VENV/bin/python" -c 'import importlib.metadata as m; assert m.version("sparkrun") == "0.4.2"' 2>/dev/null; then
  exit 0
fi
PY=""
for cand in python3.13 python3.12; do
  if command -v "$cand" >/dev/null && "$cand" -c 'import sys' 2>/dev/null; then PY=$(command -v "$cand"); break; fi
done
if [ -z "$PY" ] && command -v pyenv >/dev/null; then  # pyenv shims need the version named
  v=$(pyenv versions --bare | grep -E '^3\.(1[2-9])' | tail -1 || true)
  [ -n "$v" ] && PY="$(pyenv root)/versions/$v/bin/python3"
fi
if [ -z "$PY" ]; then
  echo "[setup-sparkrun] no Python >= 3.12 found; sparkrun 0.4.2 needs one" >&2
  exit 1
fi
echo "[setup-sparkrun] sparkrun 0.4.2 into $VENV ($PY)"
"$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check sparkrun==0.4.2

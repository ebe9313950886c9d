#!/usr/bin/env bash
# One lease on a lent GPU machine (no network, no imgbuild cache): the GPU tier,
# then the staging bench twice, all output under $OUT (default ./gpu-out).
#
# Here, first:  python3 tests/gpu/collect_sources.py engram-src
# There:        bash benchmarks/gpu_run.sh [engram-src]
# With SRC/baseline/engram.py (the patched engram.py of an earlier commit: collect_sources.py run in a
# checkout of it) the bench times that stager warm beside this one (--baseline).
# Env: BENCH_DIR (tables on a real disk; default /var/tmp/bt), RUNS (bench runs, default 2),
#      BENCH_ARGS (extra arguments for bench_engram_staging.py, e.g. "--steps decode,verify").
set -u
SRC=${1:-engram-src}
OUT=${OUT:-$PWD/gpu-out}
RUNS=${RUNS:-2}
export BENCH_DIR=${BENCH_DIR:-/var/tmp/bt}
mkdir -p "$OUT" "$BENCH_DIR"
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  nproc
  uname -r
  python3 -c 'import sys, torch, triton, numpy; print(sys.version.split()[0], torch.__version__, triton.__version__, numpy.__version__)'
  sha256sum "$SRC"/patched/engram.py "$SRC"/release/engram.py "$SRC"/baseline/engram.py
  df "$BENCH_DIR" | tail -1
  cat /sys/block/*/queue/scheduler 2>/dev/null | head -1
} >"$OUT/machine.txt" 2>&1

start=$(date +%s)
IMGBUILD_GPU_SOURCES="$SRC" python3 -m pytest tests/gpu -m gpu --confcutdir=tests/gpu -p no:cacheprovider -q \
  >"$OUT/gpu-tier.txt" 2>&1
echo "gpu tier rc=$? wall=$(($(date +%s) - start))s" | tee -a "$OUT/gpu-tier.txt"

baseline=()
if [ -f "$SRC/baseline/engram.py" ]; then baseline=(--baseline "$SRC/baseline/engram.py"); fi
gcc -O2 -pthread -o /tmp/disk_floor benchmarks/disk_floor.c
for run in $(seq 1 "$RUNS"); do
  start=$(date +%s)
  # shellcheck disable=SC2086
  python3 benchmarks/bench_engram_staging.py --sources "$SRC" --floor-tool /tmp/disk_floor \
    --json "$OUT/bench$run.json" "${baseline[@]}" ${BENCH_ARGS:-} >"$OUT/bench$run.txt" 2>&1
  echo "bench rc=$? wall=$(($(date +%s) - start))s run $run of $RUNS" | tee -a "$OUT/bench$run.txt"
done

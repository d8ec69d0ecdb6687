#!/usr/bin/env bash
# Measurement runs on a lent GPU machine: each argument is one `benchmarks/compare.py` argument
# list, run in process on the GPU (`--engine inprocess`), all at once (the GPU is far from busy
# with one; see README.md here). Results are packed into $OUT/results.tar.gz (one file: the
# machine returns at most 8), logs into $OUT/measure.log. Data paths are relative to the repo:
# prepare them here with gpu_prepare.sh and carry .whl and the .gpudata folders used.
# A run's own `--workers N` answers its clients N at a time in N processes (`compare.py`).
# MEASURE_TIMEOUT=<seconds> stops every run still going after that long (what finished is kept),
# so the archive is written before the machine's per-command limit.
#   bash benchmarks/gpu_measure.sh \
#     "--methods fedrep --dataset .gpudata/cifar10 --alpha 0.1 --rounds 50 --out runs/dir01" \
#     "--methods fedrep --dataset .gpudata/cifar10 --alpha 0.5 --rounds 50 --out runs/dir05"
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-measure}
mkdir -p "$OUT" runs
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 FLWR_TELEMETRY_ENABLED=0 HF_HUB_OFFLINE=1
nvidia-smi -L 2>/dev/null || echo "no GPU here: the runs use the CPU"
threads=$(( $(nproc) / $# )); [ "$threads" -ge 1 ] || threads=1
i=0
for args in "$@"; do
  i=$((i + 1))
  # shellcheck disable=SC2086  # each argument is a list of compare.py arguments
  timeout "${MEASURE_TIMEOUT:-0}" python3 benchmarks/compare.py --engine inprocess --client-threads "$threads" $args \
    > "runs/run-$i.log" 2>&1 &
done
wait
for log in runs/run-*.log; do echo "== $log"; grep -v INFO "$log" | tail -8; done | tee "$OUT/measure.log"
tar -czf "$OUT/results.tar.gz" --exclude='*.pt' runs

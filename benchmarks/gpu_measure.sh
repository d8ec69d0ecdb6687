#!/usr/bin/env bash
# Measurement runs on a lent GPU machine: each argument is one `pfedgm-paper run` argument list
# (tables, --columns, --methods, --rounds, --set ...), run in process on the GPU (`--engine
# inprocess`), all at once (the GPU is far from busy with one; see README.md here), into one
# results folder, runs/ (`pfedgm-paper render --out runs` tables them). Results are packed into
# $OUT/results.tar.gz (one file: the machine returns at most 8), logs into $OUT/measure.log.
# The presets' offline twins read the datasets: prepare them here with gpu_prepare.sh and carry
# .whl and .gpudata. An argument's own `--workers N` answers its clients N at a time in N
# processes. MEASURE_TIMEOUT=<seconds> stops every run still going after that long (what
# finished is kept), so the archive is written before the machine's per-command limit.
#   bash benchmarks/gpu_measure.sh \
#     "standard --columns cifar10-dir01 --methods fedrep --rounds 50" \
#     "standard --columns cifar10-dir05 --methods fedrep --rounds 50"
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
OUT=${OUT:-/tmp/gpu-measure}
mkdir -p "$OUT" runs
. benchmarks/gpu_site.sh && gpu_site || exit 1
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$repo PYTHONUNBUFFERED=1 FLWR_TELEMETRY_ENABLED=0 HF_HUB_OFFLINE=1
# An offline preset's `shared:<name>` is <ancestor of the working directory>/shared/data/<name>:
# with .gpudata here, the runs work in a folder whose shared/data is .gpudata.
work=$repo
if [ -d .gpudata ]; then
  work=$(mktemp -d) && mkdir "$work/shared" && ln -s "$repo/.gpudata" "$work/shared/data"
fi
nvidia-smi -L 2>/dev/null || echo "no GPU here: the runs use the CPU"
threads=$(( $(nproc) / $# )); [ "$threads" -ge 1 ] || threads=1
i=0
for args in "$@"; do
  i=$((i + 1))
  # shellcheck disable=SC2086  # each argument is a list of pfedgm-paper run arguments
  (cd "$work" && timeout "${MEASURE_TIMEOUT:-0}" python3 -m pfedgm_paper.cli run $args \
    --offline --engine inprocess --set client-threads="$threads" --out "$repo/runs") \
    > "runs/run-$i.log" 2>&1 &
done
wait
for log in runs/run-*.log; do echo "== $log"; grep -v INFO "$log" | tail -8; done | tee "$OUT/measure.log"
tar -czf "$OUT/results.tar.gz" --exclude='*.pt' runs

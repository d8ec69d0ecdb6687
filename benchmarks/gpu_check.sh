#!/usr/bin/env bash
# The project's GPU checks, for a lent GPU machine (about 8 minutes on one H100):
#   1. tests/test_gpu.py: pFedGM's math on CUDA equals the CPU's; every method through the
#      ServerApp and ClientApps with its data and state on the GPU;
#   2. benchmarks.bench_gpu: 100-client pFedGM on CIFAR-10 (q = 0.3, 5 local epochs), samples/s,
#      seconds per round, projected 200-round time; then FedAvg the same way, for the ratio; for
#      each number of ClientApp processes sharing the GPU in $WORKERS (default "1 8"), with the
#      GPU's memory in use and utilization logged by nvidia-smi during each run.
# Prepare here first with benchmarks/gpu_prepare.sh, then run with .whl and .gpudata carried:
#   bash benchmarks/gpu_check.sh          (figures and logs go to $OUT, else /tmp/gpu-check)
# Without a GPU the tests are reported as skipped and the benchmark runs on the CPU.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-check}
mkdir -p "$OUT"
. benchmarks/gpu_site.sh && gpu_site || exit 1
export PYTHONUNBUFFERED=1 FLWR_TELEMETRY_ENABLED=0 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
[ -d .gpudata ] && export PFEDGM_SHARED_DATA=$PWD/.gpudata
DATA=${PFEDGM_SHARED_DATA:-../shared/data}
nvidia-smi -L 2>/dev/null || echo "no nvidia-smi: no GPU here"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"

timeout 240 python3 -m pytest -q -p no:cacheprovider -rs tests/test_gpu.py 2>&1 | tee "$OUT/gpu-tests.log"
for workers in ${WORKERS:-1 8}; do
  for method in pfedgm fedavg; do
    run=$method-w$workers
    nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader,nounits -lms 500 \
      > "$OUT/smi-$run.csv" 2>/dev/null &
    smi=$!
    timeout 200 python3 -m benchmarks.bench_gpu --dataset "$DATA/cifar10" --method $method \
      --rounds 4 --workers "$workers" --json "$OUT/bench-gpu-$run.json" 2>&1 \
      | tee "$OUT/bench-gpu-$run.log" | grep -v INFO
    kill $smi 2>/dev/null
    sort -t, -k1 -n "$OUT/smi-$run.csv" 2>/dev/null | tail -1 | awk -F, '{print "  peak GPU memory in use (all processes) " $1 " MiB"}'
    awk -F, '{s += $2; n++} END {if (n) printf "  mean GPU utilization %.0f%% over %d samples\n", s / n, n}' "$OUT/smi-$run.csv" 2>/dev/null
  done
done
# Through `flwr run` (Flower's simulation engine) where Ray is installed: 8 ClientApps share
# the GPU (client-resources-num-gpus=0.125). A lent machine has no Ray: RAY=1 gpu_prepare.sh
# stages it in two halves for two calls (gpu_site.sh); without them this step is skipped.
if python3 -c "import ray" 2>/dev/null; then
  timeout 600 python3 -m benchmarks.bench_gpu --engine flwr --dataset "$DATA/cifar10" \
    --rounds 4 --workers 8 --json "$OUT/bench-gpu-flwr-w8.json" 2>&1 \
    | tee "$OUT/bench-gpu-flwr-w8.log" | grep -v INFO
else
  echo "no Ray here: the flwr-run figure is skipped"
fi

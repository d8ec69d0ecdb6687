#!/usr/bin/env bash
# The project's GPU checks, for a lent GPU machine (about 8 minutes on one H100):
#   1. tests/test_gpu.py: pFedGM's math on CUDA equals the CPU's; every method through the
#      ServerApp and ClientApps with its data and state on the GPU;
#   2. benchmarks/bench_gpu.py: 100-client pFedGM on CIFAR-10 (q = 0.3, 5 local epochs), samples/s,
#      seconds per round, projected 200-round time; then FedAvg the same way, for the ratio.
# Prepare here first with benchmarks/gpu_prepare.sh, then run with .whl and .gpudata carried:
#   bash benchmarks/gpu_check.sh          (figures and logs go to $OUT, else /tmp/gpu-check)
# Without a GPU the tests are reported as skipped and the benchmark runs on the CPU.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-check}
mkdir -p "$OUT"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi
export PYTHONUNBUFFERED=1 FLWR_TELEMETRY_ENABLED=0 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
[ -d .gpudata ] && export PFEDGM_SHARED_DATA=$PWD/.gpudata
DATA=${PFEDGM_SHARED_DATA:-../shared/data}
nvidia-smi -L 2>/dev/null || echo "no nvidia-smi: no GPU here"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"

timeout 240 python3 -m pytest -q -p no:cacheprovider -rs tests/test_gpu.py 2>&1 | tee "$OUT/gpu-tests.log"
for method in pfedgm fedavg; do
  timeout 200 python3 benchmarks/bench_gpu.py --dataset "$DATA/cifar10" --method $method \
    --rounds 4 --json "$OUT/bench-gpu-$method.json" 2>&1 | tee "$OUT/bench-gpu-$method.log" | grep -v INFO
done

#!/usr/bin/env bash
# Run here, before `gpu_check.sh` on a lent GPU machine (no network there, torch but no Flower):
# puts into the repo's ignored folders what that machine lacks, to be carried with the tree:
#   .whl/      the app's wheels that its image does not hold (Python 3.12, x86-64)
#   .gpudata/  CIFAR-10 from ../shared/data, re-compressed (zstd) to fit the transfer limit
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || printf '/.whl/\n/.gpudata/\n' >> .git/info/exclude
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .whl flwr==1.42.0 flwr-datasets==0.6.1 datasets==4.8.5 dill==0.4.1 multiprocess==0.70.19 \
  cryptography==50.0.2 cffi==2.1.1 pycparser==3.12 pycryptodome==3.24.1 grpcio==1.85.3 \
  grpcio-health-checking==1.81.1 protobuf==6.33.6 iterators==0.0.2 fsspec==2026.2.0
mkdir -p .gpudata/cifar10
python3 - <<'PY'
import pyarrow.parquet as pq
for split in ("train", "test"):
    table = pq.read_table(f"../shared/data/cifar10/{split}.parquet")
    pq.write_table(table, f".gpudata/cifar10/{split}.parquet", compression="zstd")
PY
du -sh .whl .gpudata

#!/usr/bin/env bash
# Run here, before `gpu_check.sh` / `gpu_measure.sh` on a lent GPU machine (no network there,
# torch but no Flower): puts into the repo's ignored folders what that machine lacks, to be
# carried with the tree (64 MiB in all: .whl is 17 MiB, CIFAR-10 24, CIFAR-100 29,
# TinyImageNet 39):
#   .whl/              the app's wheels that its image does not hold (Python 3.12, x86-64)
#   .gpudata/<name>/   each dataset named (default cifar10) from ../shared/data, re-compressed
#                      (zstd); .gpudata/frost too (the frost textures of CIFAR-10S)
#   .ray-a/, .ray-b/   with RAY=1: Ray's wheel (for `flwr run` there) in two halves of 35 MiB,
#                      and the needs of Ray the image lacks; carry .ray-a alone in one call and
#                      .ray-b in the next, while the machine is warm, then .whl and .gpudata
#                      (benchmarks/README.md, GPU)
#   bash benchmarks/gpu_prepare.sh cifar10 cifar100
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || printf '/.whl/\n/.gpudata/\n' >> .git/info/exclude
# wheels for the lent machine's Python 3.12 on x86-64: wheels DIR NAME==VERSION...
wheels() {
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$@"
}
wheels .whl flwr==1.42.0 flwr-datasets==0.6.1 datasets==4.8.5 dill==0.4.1 multiprocess==0.70.19 \
  cryptography==50.0.2 cffi==2.1.1 pycparser==3.12 pycryptodome==3.24.1 grpcio==1.85.3 \
  grpcio-health-checking==1.81.1 protobuf==6.33.6 iterators==0.0.2 fsspec==2026.2.0
if [ "${RAY:-0}" = 1 ]; then
  grep -qx '/.ray-a/' .git/info/exclude || printf '/.ray-a/\n/.ray-b/\n' >> .git/info/exclude
  rm -rf .ray-a .ray-b && mkdir .ray-a .ray-b
  wheels .ray-b ray==2.55.1 jsonschema==4.26.0 jsonschema-specifications==2025.9.1 \
    referencing==0.37.0 rpds-py==2026.9.1
  wheel=$(ls .ray-b/ray-*.whl) && half=$(( $(stat -c %s "$wheel") / 2 ))
  head -c "$half" "$wheel" > ".ray-a/$(basename "$wheel").0"
  tail -c +"$((half + 1))" "$wheel" > ".ray-b/$(basename "$wheel").1" && rm "$wheel"
fi
mkdir -p .gpudata && cp -r ../shared/data/frost .gpudata/
python3 - "${@:-cifar10}" <<'PY'
import os, sys
import pyarrow.parquet as pq
for name in sys.argv[1:]:
    os.makedirs(f".gpudata/{name}", exist_ok=True)
    for split in ("train", "test"):
        table = pq.read_table(f"../shared/data/{name}/{split}.parquet")
        pq.write_table(table, f".gpudata/{name}/{split}.parquet", compression="zstd")
PY
du -sh .whl .gpudata/* .ray-? 2>/dev/null || true

#!/usr/bin/env bash
# The paper's protocol at its own length: 100 clients, q = 0.3, 5 local epochs, batch 50,
# seed 0, 200 rounds, personalized accuracy every 25 rounds, on CIFAR-100 and CIFAR-10 at
# Dir(0.1) and Dir(0.5). pFedGM and pFedFDA first on every cell, then FedAvgFT and FedPAC.
# Resumable: a finished method is skipped, a stopped one continues from its checkpoint.
#   benchmarks/protocol200.sh /abs/results/protocol200 [workers]
set -euo pipefail
out=${1:?give the results folder}
workers=${2:-2}
here=$(cd "$(dirname "$0")" && pwd)
data=$(cd "$here/../.." && pwd)/shared/data
for methods in pfedgm,pfedfda fedavgft,fedpac; do
  for cell in cifar100:0.1 cifar100:0.5 cifar10:0.1 cifar10:0.5; do
    dataset=${cell%%:*} alpha=${cell##*:}
    python "$here/compare.py" --engine inprocess --workers "$workers" --client-threads 1 \
      --methods "$methods" --clients 100 --rounds 200 --dataset "$data/$dataset" \
      --alpha "$alpha" --set eval-every=25 --out "$out/$dataset-$alpha"
  done
done

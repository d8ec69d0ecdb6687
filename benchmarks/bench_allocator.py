"""The allocator setting (`training.keep_freed_memory`) against glibc's default, A-B-B-A.

    python -m benchmarks.bench_allocator [--batches 300] [--repeats 2]

Each measurement is a fresh process (`mallopt` is process-wide) training the CIFAR CNN on one
thread with the app's step (batch 50, SGD) on synthetic data: samples/s and minor page faults
per batch after a warm-up, default (A) and kept (B) in the order A B B A, `--repeats` times.
Prints every measurement, each setting's mean and the ratio kept / default. The setting earns
its place only where the ratio lies beyond the machine's run-to-run drift.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = """
import json, resource, sys, time
import torch
from pfedgm_app.learning.models import build_model
from pfedgm_app.learning.training import keep_freed_memory, make_sgd, supervised_step
kept = sys.argv[1] == "kept"
if kept:
    assert keep_freed_memory()
torch.set_num_threads(1)
torch.manual_seed(0)
model = build_model((3, 32, 32), lambda d: torch.nn.Linear(d, 10))
opt = make_sgd(model.parameters(), 0.01, 0.5, 5e-4)
step = supervised_step(model)
x, y = torch.randn(50, 3, 32, 32), torch.randint(0, 10, (50,))
def batches(n):
    for _ in range(n):
        opt.zero_grad(set_to_none=True)
        step(x, y).backward()
        opt.step()
batches(30)  # warm-up: the allocator's pools and the kernels' first calls
faults, start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter()
n = int(sys.argv[2])
batches(n)
seconds = time.perf_counter() - start
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
print(json.dumps({"samples_per_s": 50 * n / seconds, "faults_per_batch": faults / n}))
"""


def measure(setting: str, batches: int) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, setting, str(batches)],
                         capture_output=True, text=True, check=True)  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    results: dict[str, list[dict]] = {"default": [], "kept": []}
    for _ in range(args.repeats):
        for setting in ("default", "kept", "kept", "default"):
            r = measure(setting, args.batches)
            results[setting].append(r)
            print(f"{setting:8s} {r['samples_per_s']:8.0f} samples/s "
                  f"{r['faults_per_batch']:8.1f} page faults/batch", flush=True)  # fmt: skip
    mean = {k: sum(r["samples_per_s"] for r in v) / len(v) for k, v in results.items()}
    print(f"mean: default {mean['default']:.0f}, kept {mean['kept']:.0f} samples/s; "
          f"kept / default = {mean['kept'] / mean['default']:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()

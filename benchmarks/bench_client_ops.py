"""Where a pFedGM client round spends more than FedAvg's, op by op, without Flower.

One client round of each on the same in-memory data (CIFAR CNN, 500 images, 5 local epochs,
batch 50, one thread), profiled with `torch.profiler`: prints the two totals (self CPU time of
every op), their ratio, and the ops whose time differs most. pFedGM's extra work falls in two
parts: the prototype pass of Algorithm 1 (a forward pass over the client's data at the round's
start: its convolutions and the pools outside autograd, `aten::maximum`) and the head's small
operations per step (Eq. LossH's logits, R_c, the prototype update, Eq. cov_approx, the
round's meters). A-B-B-A wall times of the bare rounds come first, for the ratio without the
profiler's overhead.

    python -m benchmarks.bench_client_ops            # 500 images, 20 rows of ops
    python -m benchmarks.bench_client_ops --images 2000 --rows 40
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

from pfedgm_app.learning.gaussian import GaussianHead
from pfedgm_app.learning.models import build_generator, build_model
from pfedgm_app.learning.phases import train_round
from pfedgm_app.learning.training import make_sgd, run_epochs, supervised_step


def rounds(images: int):
    """(FedAvg's round, pFedGM's round): callables training one client round in place."""
    torch.manual_seed(0)
    x, y = torch.randn(images, 3, 32, 32), torch.randint(0, 10, (images,))
    model = build_model((3, 32, 32), lambda dim: nn.Linear(dim, 10))
    opt = make_sgd(model.parameters(), 0.01, 0.5, 5e-4)
    generator, head = build_generator((3, 32, 32)), GaussianHead(10, 128)

    def fedavg() -> None:
        run_epochs(supervised_step(model), x, y, opt, 5, 50, torch.Generator().manual_seed(0))

    def pfedgm() -> None:
        train_round(generator, head, (x, y), rng=torch.Generator().manual_seed(0))

    return fedavg, pfedgm


def seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def op_times(fn) -> dict[str, float]:
    """Self CPU seconds per op name over one call of `fn`."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return {e.key: e.self_cpu_time_total / 1e6 for e in prof.key_averages()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=500)
    parser.add_argument("--rows", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3, help="A-B-B-A passes")
    args = parser.parse_args()
    torch.set_num_threads(1)
    fedavg, pfedgm = rounds(args.images)
    fedavg(), pfedgm()  # warm-up: first calls, allocator
    walls: dict[str, list[float]] = {"fedavg": [], "pfedgm": []}
    abba = [("fedavg", fedavg), ("pfedgm", pfedgm), ("pfedgm", pfedgm), ("fedavg", fedavg)]
    for _ in range(args.repeats):
        for name, fn in abba:
            walls[name].append(seconds(fn))
    a, b = (statistics.median(walls[k]) for k in ("fedavg", "pfedgm"))
    print(
        f"a client round, one thread, medians of {2 * args.repeats} (A-B-B-A): "
        f"FedAvg {a:.3f} s, pFedGM {b:.3f} s, ratio {b / a:.3f}"
    )
    ops_a, ops_b = op_times(fedavg), op_times(pfedgm)
    total_a, total_b = sum(ops_a.values()), sum(ops_b.values())
    print(
        f"profiled self CPU: FedAvg {total_a:.3f} s, pFedGM {total_b:.3f} s, "
        f"ratio {total_b / total_a:.3f}"
    )
    extra = {k: ops_b.get(k, 0.0) - ops_a.get(k, 0.0) for k in ops_a.keys() | ops_b.keys()}
    print(f"{'op':60s} {'pFedGM - FedAvg':>16s} {'share of FedAvg':>16s}")
    for key in sorted(extra, key=extra.get, reverse=True)[: args.rows]:
        print(f"{key[:60]:60s} {extra[key] * 1e3:13.1f} ms {extra[key] / total_a:15.1%}")


if __name__ == "__main__":
    main()

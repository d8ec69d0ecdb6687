"""pFedGM on one GPU: a short simulation of the paper's CIFAR-10 protocol, projected to 200 rounds.

Runs the app's ServerApp and ClientApps without Ray (`pfedgm_app.paper.inprocess`: a lent GPU
machine has torch but not Ray, so Flower's simulation engine cannot run there) over `--clients`
partitions with q = `--fraction`, `--local-epochs` epochs, batch 50, on `--device`; with
`--workers N`, N ClientApp processes share the device (as `client-resources-num-gpus` = 1/N
would under Ray), else the clients train one after the other in this process. Prints:

- client samples/s (sample-passes over the seconds spent in the ClientApps' train handlers, so
  per ClientApp process) and samples/s in all (sample-passes per round over its wall seconds);
- seconds per round (mean over the rounds after the first, which also decodes each client's
  images, builds the partition and starts the worker processes) and the projected 200-round
  time: this run's whole wall time (start-up, first round, Phase 2 included) plus the rounds
  it did not run at seconds per round;
- Phase 2 seconds for all clients, and peak GPU memory.

    python -m benchmarks.bench_gpu --dataset ../shared/data/cifar10      # 100 clients, 4 rounds
    python -m benchmarks.bench_gpu --workers 8 ...                        # 8 ClientApps at once
    python -m benchmarks.bench_gpu --device cpu --clients 10 --rounds 2  # the same on the CPU
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from pfedgm_app.paper.inprocess import run_inprocess

ROOT = Path(__file__).resolve().parents[1]

PAPER_ROUNDS = 200


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--dataset", default=str(ROOT.parent / "shared" / "data" / "cifar10"))
    ap.add_argument("--method", default="pfedgm")
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--fraction", type=float, default=0.3)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--local-epochs", type=int, default=5)
    ap.add_argument("--alpha", type=float, default=0.5)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--workers", type=int, default=1, help="ClientApp processes at once")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()

    cuda = torch.cuda.is_available() and args.device != "cpu"
    name = torch.cuda.get_device_name() if cuda else f"CPU ({torch.get_num_threads()} threads)"
    overrides = {
        "method": args.method,
        "dataset": args.dataset,
        "num-server-rounds": args.rounds,
        "fraction-train": args.fraction,
        "local-epochs": args.local_epochs,
        "dirichlet-alpha": args.alpha,
        "device": args.device,
        "output-dir": tempfile.mkdtemp(prefix="bench-gpu-"),
    }
    print(f"{args.method} on {name}: {args.clients} clients, q={args.fraction}, "
          f"{args.local_epochs} local epochs, {args.rounds} rounds, {args.workers} "
          "ClientApp process(es)", flush=True)  # fmt: skip
    started = time.perf_counter()
    summary, grid = run_inprocess(overrides, args.clients, workers=args.workers)
    wall = time.perf_counter() - started

    later = grid.rounds[1:] or grid.rounds
    client_s = sum(s for s, _ in later)
    passes = sum(p for _, p in later)
    per_round = grid.seconds_per_round()
    personalize = summary["seconds-personalize"]
    figures = {
        "device": name,
        "method": args.method,
        "clients": args.clients,
        "fraction": args.fraction,
        "local_epochs": args.local_epochs,
        "rounds": args.rounds,
        "workers": args.workers,
        "client_samples_per_s": passes / client_s,
        "samples_per_s_all": passes / len(later) / per_round,
        "sample_passes_per_round": passes / len(later),
        "seconds_per_round": per_round,
        "client_seconds_per_round": client_s / len(later),
        "seconds_before_round_2": grid.starts[2][1] - started if len(grid.starts) > 2 else wall,
        "seconds_personalize": personalize,
        "projected_200_round_minutes": (wall + (PAPER_ROUNDS - args.rounds) * per_round) / 60,
        "mean_accuracy": summary["mean-accuracy"],
        "wall_seconds": wall,
        # this process's clients only: with --workers, gpu_check.sh logs nvidia-smi instead
        "peak_gpu_memory_mib": torch.cuda.max_memory_allocated() / 2**20 if cuda else 0.0,
    }
    for key, value in figures.items():
        print(f"  {key:28s} {value:.4g}" if isinstance(value, float) else f"  {key:28s} {value}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()

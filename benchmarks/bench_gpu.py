"""pFedGM on one GPU: a short simulation of the paper's CIFAR-10 protocol, projected to 200 rounds.

Runs the app's ServerApp and ClientApps without Ray (`pfedgm_engine.inprocess`: a lent GPU
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
    python -m benchmarks.bench_gpu --engine flwr --workers 8 ...          # through `flwr run`

With `--engine flwr` the run goes through Flower's simulation engine (Ray must be installed):
`workers` ClientApps share the GPU (`client-resources-num-gpus` = 1/workers); seconds per round
are the ServerApp's own (`rounds.jsonl`), and the projection the same as in process.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from pfedgm_app.records.run_folder import RunFolder
from pfedgm_cli.flwr_calls import offline_env
from pfedgm_cli.flwr_cli import run_app
from pfedgm_cli.superlink import stop_local_superlink
from pfedgm_engine.inprocess import run_inprocess

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
    ap.add_argument(
        "--engine",
        choices=("inprocess", "flwr"),
        default="inprocess",
        help="flwr: through `flwr run` (Ray), num-gpus = 1/workers per ClientApp",
    )
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
    print(
        f"{args.method} on {name}: {args.clients} clients, q={args.fraction}, "
        f"{args.local_epochs} local epochs, {args.rounds} rounds, {args.workers} "
        "ClientApp process(es)",
        flush=True,
    )
    started = time.perf_counter()
    if args.engine == "flwr":
        summary, later, first = through_flwr(overrides, args.clients, args.workers, cuda)
        client_s = float("nan")  # Ray's actors: no per-handler seconds here
        per_round = sum(s for s, _ in later) / len(later)
    else:
        summary, grid = run_inprocess(overrides, args.clients, workers=args.workers)
        later = grid.rounds[1:] or grid.rounds
        first = grid.starts[2][1] - started if len(grid.starts) > 2 else None
        client_s = sum(s for s, _ in later)
        per_round = grid.seconds_per_round()
    wall = time.perf_counter() - started
    passes = sum(p for _, p in later)
    personalize = summary["seconds-personalize"]
    figures = {
        "engine": args.engine,
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
        "seconds_before_round_2": first if first is not None else wall,
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


def through_flwr(
    overrides: dict, clients: int, workers: int, cuda: bool
) -> tuple[dict, list[tuple[float, float]], float | None]:
    """The run through `flwr run` (Flower's simulation engine, Ray), `workers` ClientApps at
    once on the GPU (`client-resources-num-gpus` = 1/workers) or the CPU: its summary, the
    (seconds, sample-passes) of the rounds after the first, and the seconds before round 2
    (None: not recorded)."""
    home = Path(tempfile.mkdtemp(prefix="bench-gpu-home-"))
    gpus = 1 / workers if cuda else 0.0
    try:
        run = run_app(overrides, clients, offline_env(home), 1, 7200, gpus)
    finally:
        stop_local_superlink(home)
    if not run.ok:
        raise SystemExit(f"flwr run {run.status}:\n{run.log[-3000:]}")
    rounds = [r for r in RunFolder(run.output_dir).read_rounds() if "seconds" in r]
    later = [(r["seconds"], r.get("sample-passes", 0.0)) for r in rounds[1:] or rounds]
    return run.summary, later, None


if __name__ == "__main__":
    main()

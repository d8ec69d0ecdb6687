"""Run several methods on one protocol through `flwr run` and print the paper's table row form.

    python benchmarks/compare.py --methods pfedgm,fedavgft,fedavg --alpha 0.5 \\
        --clients 100 --rounds 50 --out /abs/results/dir05
    python benchmarks/compare.py --methods all --alpha 0.1 --clients 20 --rounds 10 \\
        --pool-size 12000 --out /abs/results/small-dir01      # every method, a quick table

Each method's outputs go to OUT/<method>; a method whose `summary.json` already exists there is
not run again (so an interrupted comparison resumes). Prints `mean (std)` per method, the
ablation points each method reports, and each one's training wall time relative to FedAvg's
(or to the first method when FedAvg is not in the list).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from pfedgm_app.config import METHODS
from pfedgm_app.launch import offline_env, run_app, stop_local_superlink

ROOT = Path(__file__).resolve().parents[1]

# The paper's CIFAR-10 results (Table "standard", 200 rounds): {method: {alpha: (mean, std)}}
# and runtimes relative to FedAvg (Table "Time", CIFAR-10 Dir(0.5), minutes / FedAvg's 64.91).
PAPER_CIFAR10 = {
    "local": {0.1: (86.43, 13), 0.5: (58.64, 13)},
    "fedavg": {0.1: (53.13, 11), 0.5: (61.53, 6.7)},
    "fedavgft": {0.1: (89.46, 10), 0.5: (74.13, 8.5)},
    "ditto": {0.1: (89.60, 10), 0.5: (73.60, 8.2)},
    "fedbabu": {0.1: (87.63, 14), 0.5: (72.50, 9.1)},
    "fedpac": {0.1: (89.59, 11), 0.5: (76.29, 8.3)},
    "fedrep": {0.1: (87.61, 12), 0.5: (65.62, 10)},
    "lgfedavg": {0.1: (88.35, 11), 0.5: (64.39, 10)},
    "fedper": {0.1: (89.43, 9.9), 0.5: (65.65, 9.9)},
    "pfedme": {0.1: (87.76, 11), 0.5: (70.54, 8.8)},
    "pfedfda": {0.1: (90.01, 9.6), 0.5: (76.05, 7.6)},
    "pfedgm": {0.1: (91.00, 9.4), 0.5: (77.49, 7.1)},
}
PAPER_TIME = {"fedavg": 64.91, "ditto": 96.08, "fedper": 61.94, "fedrep": 67.03,
              "fedbabu": 62.34, "pfedme": 102.21, "lgfedavg": 62.68, "fedpac": 113.31,
              "pfedfda": 164.62, "pfedgm": 81.75}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--methods", default="pfedgm,fedavgft,fedavg")
    parser.add_argument("--dataset", default=str(ROOT.parent / "shared/data/cifar10"))
    parser.add_argument("--alpha", type=float, default=0.5)
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--fraction", type=float, default=0.3)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pool-size", type=int, default=0, help="0 = all images (the paper)")
    parser.add_argument("--cpus-per-client", type=float, default=1)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    methods = list(METHODS) if args.methods == "all" else args.methods.split(",")
    if "fedavg" in methods:  # the time baseline runs first
        methods.remove("fedavg")
        methods.insert(0, "fedavg")
    out = args.out.resolve()
    home = Path(tempfile.mkdtemp(prefix="compare-flwr-home-"))
    env = offline_env(home)
    summaries = {}
    try:
        for method in methods:
            target = out / method
            if (target / "summary.json").exists():
                summaries[method] = json.loads((target / "summary.json").read_text())
                continue
            cfg = {
                "method": method,
                "dataset": args.dataset,
                "dirichlet-alpha": args.alpha,
                "num-server-rounds": args.rounds,
                "fraction-train": args.fraction,
                "local-epochs": args.epochs,
                "seed": args.seed,
                "pool-size": args.pool_size,
                "output-dir": str(target),
            }
            run = run_app(cfg, args.clients, env, args.cpus_per_client, timeout=24 * 3600)
            print(f"{method}: {run.status} in {run.wall_seconds:.0f}s", flush=True)
            if run.ok:
                summaries[method] = run.summary
    finally:
        stop_local_superlink(home)
    print_table(summaries, args)


def print_table(summaries: dict[str, dict], args) -> None:
    if not summaries:
        print("no finished run")
        return
    base = summaries.get("fedavg") or next(iter(summaries.values()))
    print(f"\nDir({args.alpha}), {args.clients} clients, q={args.fraction}, {args.rounds} rounds, "
          f"{args.epochs} local epochs; accuracy % = mean weighted by test size (std across "
          "clients); time = seconds per round / FedAvg's")  # fmt: skip
    print("paper = CIFAR-10 after 200 rounds and its runtime table (FedAvg = 1.00)")
    head = f"{'method':10s} {'accuracy':>14s} {'paper':>14s} {'time':>6s} {'paper':>6s}  ablation"
    print(head)
    for method, s in summaries.items():
        ratio = s["seconds_per_round"] / base["seconds_per_round"]
        extra = ", ".join(f"{k} {v:.2f}" for k, v in s.get("ablation_mean_accuracy", {}).items())
        acc = f"{s['mean_accuracy']:.2f} ({s['std_accuracy']:.1f})"
        paper = PAPER_CIFAR10.get(method, {}).get(args.alpha)
        paper_acc = f"{paper[0]:.2f} ({paper[1]})" if paper else "-"
        t = PAPER_TIME.get(method)
        paper_t = f"{t / PAPER_TIME['fedavg']:.2f}" if t else "-"
        print(f"{method:10s} {acc:>14s} {paper_acc:>14s} {ratio:6.2f} {paper_t:>6s}  {extra}")


if __name__ == "__main__":
    main()

"""Speed and memory of the app against a bare PyTorch loop, and pFedGM against FedAvg.

Runs FedAvg and pFedGM through `flwr run` (real simulation engine) on the same protocol, then a
bare single-process PyTorch loop doing the same number of sample-passes with the same model,
optimizer and batch size on in-memory tensors. Prints:

- seconds per round (mean over rounds after the first, which includes data decoding);
- client sample-passes per second of the app;
- app wall time / bare-loop wall time for the same sample-passes (target <= 1.10);
- pFedGM / FedAvg cost ratio in the same protocol (target <= 1.10; the paper measured 1.26);
- peak memory (RSS summed over all processes of the run).

    python benchmarks/bench_speed.py            # 20 clients, q=0.3, 4 rounds, 5 local epochs
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

from pfedgm_app.models import build_model
from pfedgm_app.training import make_sgd, run_epochs, supervised_step

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # devtools/ is a helper of the repository, not of the app
from devtools.launch import offline_env, run_app, stop_local_superlink, superlink_tree  # noqa: E402


class PeakRss(threading.Thread):
    """Samples the summed RSS of the SuperLink's process tree (simulation, Ray, ClientApps)."""

    def __init__(self, flwr_home: Path) -> None:
        super().__init__(daemon=True)
        self.marker, self.peak, self.stop = str(flwr_home), 0, threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.5):
            tree = superlink_tree(self.marker)
            self.peak = max(self.peak, sum(_rss(p) for p in tree))


def _rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def app_run(method: str, args, env, home: Path) -> dict:
    out = Path(tempfile.mkdtemp(prefix=f"bench-{method}-"))
    cfg = {
        "method": method,
        "dataset": str(args.dataset),
        "dirichlet-alpha": args.alpha,
        "num-server-rounds": args.rounds,
        "fraction-train": args.fraction,
        "local-epochs": args.epochs,
        "output-dir": str(out),
    }
    rss = PeakRss(home)
    rss.start()
    run = run_app(cfg, args.clients, env, cpus_per_client=args.cpus_per_client)
    rss.stop.set()
    if not run.ok:
        raise SystemExit(f"{method} run {run.status}:\n{run.log[-3000:]}")
    rounds = [json.loads(line) for line in (out / "rounds.jsonl").read_text().splitlines()]
    later = rounds[1:] or rounds
    seconds = sum(r["seconds"] for r in later)
    passes = sum(r["num-examples-total"] * args.epochs for r in later)
    return {
        "seconds_per_round": seconds / len(later),
        "passes": passes,
        "seconds": seconds,
        "passes_per_second": passes / seconds,
        "peak_rss_gib": rss.peak / 2**30,
        "accuracy": run.summary["mean_accuracy"],
    }


def bare_loop(passes: int, threads: int) -> float:
    """Seconds for `passes` sample-passes of plain SGD on the CIFAR CNN, one process."""
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    x, y = torch.randn(2000, 3, 32, 32), torch.randint(0, 10, (2000,))
    model = build_model((3, 32, 32), lambda dim: torch.nn.Linear(dim, 10))
    opt = make_sgd(model.parameters(), 0.01, 0.5, 5e-4)
    run_epochs(supervised_step(model), x[:500], y[:500], opt, 1)  # warm-up
    epochs = max(1, round(passes / len(x)))
    start = time.perf_counter()
    run_epochs(supervised_step(model), x, y, opt, epochs)
    return (time.perf_counter() - start) * passes / (epochs * len(x))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", default=str(ROOT.parent / "shared/data/cifar10"))
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--fraction", type=float, default=0.3)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--alpha", type=float, default=0.5)
    parser.add_argument("--cpus-per-client", type=float, default=1)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="bench-flwr-home-"))
    env = offline_env(home)
    try:
        results = {m: app_run(m, args, env, home) for m in ("fedavg", "pfedgm")}
    finally:
        stop_local_superlink(home)
    cores = torch.get_num_threads()
    bare = bare_loop(int(results["fedavg"]["passes"]), cores)
    fedavg, pfedgm = results["fedavg"], results["pfedgm"]
    print(f"protocol: {args.clients} clients, q={args.fraction}, {args.rounds} rounds, "
          f"{args.epochs} local epochs, Dir({args.alpha}), {cores} cores")  # fmt: skip
    for name, r in results.items():
        print(f"{name:7s} seconds/round {r['seconds_per_round']:.2f}  sample-passes/s "
              f"{r['passes_per_second']:.0f}  peak RSS {r['peak_rss_gib']:.2f} GiB  "
              f"accuracy {r['accuracy']:.2f}")  # fmt: skip
    print(
        f"bare loop ({cores} threads, one process): {fedavg['passes'] / bare:.0f} sample-passes/s"
    )
    print(f"app / bare loop wall time (FedAvg, same sample-passes): {fedavg['seconds'] / bare:.3f}")
    cost = (pfedgm["seconds"] / pfedgm["passes"]) / (fedavg["seconds"] / fedavg["passes"])
    print(f"pFedGM / FedAvg cost per sample-pass: {cost:.3f}")


if __name__ == "__main__":
    main()

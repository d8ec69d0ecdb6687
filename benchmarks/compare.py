"""Run several methods on one protocol through `flwr run` and print the paper's table row form.

    python benchmarks/compare.py --methods pfedgm,fedavgft,fedavg --alpha 0.5 \\
        --clients 100 --rounds 50 --out /abs/results/dir05
    python benchmarks/compare.py --methods all --alpha 0.1 --clients 20 --rounds 10 \\
        --pool-size 12000 --out /abs/results/small-dir01      # every method, a quick table

`--engine inprocess` runs the same ServerApp and ClientApps in this process, one client after the
other (`devtools/inprocess.py`; per-client results identical to `flwr run`'s on the CPU, checked
by `tests/test_inprocess.py`), without Ray's overhead, or `--workers N` clients at a time in N
processes (several ClientApps sharing a GPU, or the cores); `--set key=value` adds any run-config
key (`--set corruption=100C`). Each method's outputs go to OUT/<method>; a method whose
`summary.json` already exists there is not run again, and one stopped mid-run continues from its
last checkpoint (`resume`), so an interrupted comparison resumes.
Prints `mean (std)` per method, the ablation points each method reports, and each one's wall
time relative to FedAvg's (when FedAvg is in OUT); `paper_table.py` prints several alphas
side by side.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from paper_table import print_table  # benchmarks/ is on sys.path when run as a script

from pfedgm_app.methods import METHODS
from pfedgm_app.paper.cli import set_keys

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # devtools/ is a helper of the repository, not of the app
from devtools.inprocess import run_inprocess  # noqa: E402
from devtools.launch import stop_local_superlink  # noqa: E402
from pfedgm_app.paper.flwr_cli import offline_env, run_app  # noqa: E402
from pfedgm_app.run_folder import RunFolder  # noqa: E402


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
    parser.add_argument("--engine", choices=("flwr", "inprocess"), default="flwr")
    parser.add_argument("--client-threads", type=int, default=0, help="0 = the app's default")
    parser.add_argument("--workers", type=int, default=1, help="inprocess: clients at a time")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
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
            target = RunFolder(out / method)
            if target.finished:
                summaries[method] = target.read_summary()
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
                "client-threads": args.client_threads,
                "output-dir": str(target.path),
                "resume": target.stopped,
                **set_keys(args.set),
            }
            if args.engine == "inprocess":
                started = time.time()
                summaries[method], _ = run_inprocess(cfg, args.clients, workers=args.workers)
                print(f"{method}: finished in {time.time() - started:.0f}s", flush=True)
                continue
            run = run_app(cfg, args.clients, env, args.cpus_per_client, timeout=24 * 3600)
            print(f"{method}: {run.status} in {run.wall_seconds:.0f}s", flush=True)
            if run.ok:
                summaries[method] = run.summary
    finally:
        stop_local_superlink(home)
    print_table({args.alpha: summaries})


if __name__ == "__main__":
    main()

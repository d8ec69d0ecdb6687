"""Speed of the app through `flwr run` on the paper's CIFAR-10 protocol, projected to 200 rounds.

Runs FedAvg and pFedGM through the real simulation engine (default: the paper's protocol, 100
clients, q = 0.3, 5 local epochs, batch 50, 10 rounds), then a bare eager PyTorch loop on one
thread with the same model, optimizer and batch size. Prints per method:

- seconds per round (rounds after the first, which also decodes data) and the projected
  full-protocol time: first round + 199 later rounds + Phase 2 (every client personalizes);
- a round split into client set-up (data and model), client compute (of which pFedGM's
  prototype pass), message serialization (measured here on the method's own arrays, two
  messages per sampled client) and the rest: Flower/Ray overhead and workers left idle;
- client samples/s per core (sample-passes over compute seconds) against the bare eager loop
  with the plain layout (conv -> act -> pool, NCHW) and with the app's layout (pool before
  act, channels-last; `models.ConvGenerator`), one alone and one per core at once (the
  ceiling for ClientApps that keep every core busy), all measured in this run;
- pFedGM / FedAvg wall time per round (target <= 1.10; the paper measured 1.26), Phase 2
  seconds (target <= 30 s for 100 clients), peak memory (RSS of all processes).

    python -m benchmarks.bench_speed                      # the full protocol, 10 rounds
    python -m benchmarks.bench_speed --clients 20 --rounds 3
    python -m benchmarks.bench_speed --rounds 5 --abba      # FedAvg, pFedGM, pFedGM, FedAvg

The machine's speed can drift within a benchmark (on the 2-core VM of benchmarks/README.md the
same FedAvg code took 16 to 31 s a round across runs), so `--abba` runs the methods, then
again in reverse order, and averages each method's runs: a linear drift cancels out.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch
from flwr.app import ArrayRecord, RecordDict
from flwr.common import serde
from torch import nn

from benchmarks.tree_sampler import MACHINE, ROLES, TreeSampler
from devtools.layout import plain_layout
from pfedgm_app.learning.models import build_model
from pfedgm_app.learning.training import make_sgd, run_epochs, supervised_step
from pfedgm_app.methods import get_method
from pfedgm_app.records.run_folder import RunFolder
from pfedgm_cli.flwr_calls import offline_env
from pfedgm_cli.flwr_cli import run_app
from pfedgm_cli.superlink import stop_local_superlink
from pfedgm_paper.cli import set_keys

ROOT = Path(__file__).resolve().parents[1]

FULL_ROUNDS = 200


def app_run(method: str, args: argparse.Namespace, env: dict, home: Path) -> dict:
    out = Path(tempfile.mkdtemp(prefix=f"bench-{method}-"))
    cfg = {
        "method": method,
        "dataset": str(args.dataset),
        "dirichlet-alpha": args.alpha,
        "num-server-rounds": args.rounds,
        "fraction-train": args.fraction,
        "local-epochs": args.epochs,
        "output-dir": str(out),
        **set_keys(args.set),
    }
    sampler = TreeSampler(home, RunFolder(out).rounds)
    sampler.start()
    run = run_app(cfg, args.clients, env, cpus_per_client=args.cpus_per_client, timeout=4 * 3600)
    sampler.stop.set()
    if not run.ok:
        raise SystemExit(f"{method} run {run.status}:\n{run.log[-3000:]}")
    rounds = RunFolder(out).read_rounds()
    later = rounds[1:] or rounds

    def per_round(key: str) -> float:
        return sum(r.get(key, 0.0) for r in later) / len(later)

    s = run.summary
    return {
        "seconds_per_round": per_round("seconds"),
        "seconds_first_round": rounds[0]["seconds"],
        "seconds_before_round_1": s["seconds-training"] - s["seconds-per-round"] * s["rounds"],
        "seconds_personalize": s["seconds-personalize"],
        "clients_per_round": per_round("num-clients"),
        "passes_per_round": per_round("num-examples-total") * args.epochs,
        "setup": per_round("seconds-data-total") + per_round("seconds-model-total"),
        "compute": per_round("seconds-compute-total"),
        "prototypes": per_round("seconds-prototypes-total"),
        "peak_rss_gib": sampler.peak / 2**30,
        **{f"cores_{role}": cores for role, cores in sampler.cores_in_rounds().items()},
        "accuracy": s["mean-accuracy"],
    }


def serialization_seconds(method: str, image_shape=(3, 32, 32), classes: int = 10) -> float:
    """Seconds to carry one message of the method's arrays: state_dict -> ArrayRecord -> bytes
    -> ArrayRecord -> state_dict (what a train message and its reply each go through)."""
    plugin = get_method(method).plugin(get_method(method).settings())
    state = plugin.build_model(image_shape, classes).state_dict()
    start, n = time.perf_counter(), 20
    for _ in range(n):
        proto = serde.recorddict_to_proto(RecordDict({"arrays": ArrayRecord(state)}))
        back = type(proto)()
        back.ParseFromString(proto.SerializeToString())
        serde.recorddict_from_proto(back)["arrays"].to_torch_state_dict()
    return (time.perf_counter() - start) / n


def bare_loop(plain: bool, seconds: float = 20.0) -> float:
    """Samples/s of plain SGD (batch 50) on the CIFAR CNN, one thread, in-memory tensors."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    x, y = torch.randn(2000, 3, 32, 32), torch.randint(0, 10, (2000,))
    model = build_model((3, 32, 32), lambda dim: nn.Linear(dim, 10))
    model = plain_layout(model) if plain else model
    opt = make_sgd(model.parameters(), 0.01, 0.5, 5e-4)
    run_epochs(supervised_step(model), x[:500], y[:500], opt, 1)  # warm-up
    passes, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        passes += run_epochs(supervised_step(model), x, y, opt, 1)["sample-passes"]
    torch.set_num_threads(threads)
    return passes / (time.perf_counter() - start)


def bare_loops_at_once(workers: int, seconds: float = 20.0) -> float:
    """Samples/s per process of `workers` bare loops (the app's layout) run at the same time:
    what one core gives when every core trains, as the ClientApps do (caches and memory
    bandwidth are shared, so it is below one loop alone)."""
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        rates = list(pool.map(bare_loop, [False] * workers, [seconds] * workers))
    return sum(rates) / workers


def _mean(runs: list[dict]) -> dict:
    """Each figure averaged over a method's runs (one, or two with --abba)."""
    return {key: sum(r[key] for r in runs) / len(runs) for key in runs[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", default=str(ROOT.parent / "shared/data/cifar10"))
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--fraction", type=float, default=0.3)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--alpha", type=float, default=0.5)
    parser.add_argument("--cpus-per-client", type=float, default=1)
    parser.add_argument("--methods", default="fedavg,pfedgm")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a run-config key for every run (e.g. local-epochs=2)")  # fmt: skip
    parser.add_argument("--abba", action="store_true", help="run the methods, then again in "
                        "reverse order, and average each method's runs")  # fmt: skip
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    cores = torch.get_num_threads()
    workers = max(1, int(cores / args.cpus_per_client))
    bare = {"plain": bare_loop(plain=True), "app": bare_loop(plain=False)}
    bare["app, all cores"] = bare_loops_at_once(workers)
    home = Path(tempfile.mkdtemp(prefix="bench-flwr-home-"))
    env = offline_env(home)
    methods = args.methods.split(",")
    runs: dict[str, list[dict]] = {method: [] for method in methods}
    try:
        for method in methods + (methods[::-1] if args.abba else []):
            runs[method].append(app_run(method, args, env, home))
            print(json.dumps({method: runs[method][-1]}), flush=True)
    finally:
        stop_local_superlink(home)
    results = {method: _mean(r) for method, r in runs.items()}
    for method, r in results.items():
        r["serialization"] = 2 * r["clients_per_round"] * serialization_seconds(method)
    print(
        f"protocol: {args.clients} clients, q={args.fraction}, {args.rounds} rounds, "
        f"{args.epochs} local epochs, Dir({args.alpha}), {cores} cores, {workers} ClientApps "
        f"at a time{''.join(', ' + pair for pair in args.set)}"
        + ("; each method run twice, A-B-B-A, averaged" if args.abba else "")
    )
    for method, r in runs.items():
        print(
            f"{method}: s/round per run: " + ", ".join(f"{x['seconds_per_round']:.2f}" for x in r)
        )
    print(f"bare eager loop, one thread: {bare['plain']:.0f} samples/s (plain layout), "
          f"{bare['app']:.0f} samples/s (the app's layout); {workers} at once (the app's "
          f"layout): {bare['app, all cores']:.0f} samples/s each")  # fmt: skip
    for name, r in results.items():
        wall = r["seconds_per_round"]
        parts = {"client set-up": r["setup"] / workers,
                 "client compute": r["compute"] / workers,
                 "serialization": r["serialization"]}  # fmt: skip
        rest = wall - sum(parts.values())
        full = r["seconds_first_round"] + (FULL_ROUNDS - 1) * wall + r["seconds_personalize"]
        print(f"{name}: {wall:.2f} s/round; projected {FULL_ROUNDS} rounds + Phase 2: "
              f"{full / 60:.1f} min; Phase 2 {r['seconds_personalize']:.1f} s; "
              f"peak RSS {r['peak_rss_gib']:.2f} GiB; accuracy {r['accuracy']:.2f}")  # fmt: skip
        split = ", ".join(f"{k} {v:.2f} s" for k, v in parts.items())
        proto = f" (prototype pass {r['prototypes'] / workers:.2f} s)" if r["prototypes"] else ""
        print(f"  per round: {split}{proto}, Flower/Ray overhead and idle {rest:.2f} s")
        busy = ", ".join(
            f"{role} {r[f'cores_{role}']:.2f}" for role in ROLES + MACHINE if f"cores_{role}" in r
        )
        if busy:
            print(f"  cores during rounds 2-{args.rounds} (of {cores}): {busy}")
        if r["compute"]:
            in_compute = r["passes_per_round"] / r["compute"]
            over_round = r["passes_per_round"] / wall / workers
            print(f"  client samples/s per core: {in_compute:.0f} in compute, "
                  f"{over_round:.0f} over the round")  # fmt: skip
    if {"fedavg", "pfedgm"} <= set(results):
        ratio = results["pfedgm"]["seconds_per_round"] / results["fedavg"]["seconds_per_round"]
        print(f"pFedGM / FedAvg wall time per round: {ratio:.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"bare": bare, **results}, indent=2))


if __name__ == "__main__":
    main()

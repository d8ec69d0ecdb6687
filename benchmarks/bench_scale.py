"""Scale: 1000 simulated clients (the paper's EMNIST setting, MNIST as its offline stand-in)
through `flwr run`, against 100 clients sampling as many per round.

Both runs sample 30 clients per round (1000 x q=0.03 and 100 x q=0.3), batch 16, 5 local epochs,
and give each client the same number of images (`--per-client`, 70: MNIST's 70,000 over 1000
clients; the 100-client run takes a seeded 7,000-image pool), so their seconds per round should
match if a round's cost follows the sampled clients and not the total. Prints, per run: seconds
per round (after the first), seconds before round 1 (every SuperNode reports its partition),
Phase 2 seconds (every client personalizes), the peak memory of the whole simulation
(SuperLink, Ray and the ClientApps) and the cores Flower's simulation process (engine and
ServerApp) keeps busy during the rounds.

    python -m benchmarks.bench_scale                       # pFedGM, 3 rounds, Dir(0.5)
    python -m benchmarks.bench_scale --clients 1000 --rounds 2
    python -m benchmarks.bench_scale --messages-in-flight -1  # at most twice the cores unanswered
    python -m benchmarks.bench_scale --set local-epochs=2  # any run-config key (repeatable)
    python -m benchmarks.bench_scale --engine inprocess       # the app alone, no Flower engine

`--engine inprocess` runs the same ServerApp and ClientApps in this process, one client after
the other (`pfedgm_engine.inprocess`): what the app itself costs, without the simulation engine's
per-node polling (see benchmarks/README.md); its peak memory is this process's.
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
from pathlib import Path

from benchmarks.tree_sampler import TreeSampler
from pfedgm_app.records.run_folder import RunFolder
from pfedgm_cli.flwr_calls import offline_env
from pfedgm_cli.flwr_cli import run_app
from pfedgm_cli.superlink import stop_local_superlink
from pfedgm_paper.cli import set_keys

ROOT = Path(__file__).resolve().parents[1]

SAMPLED = 30  # clients per round in both runs


def scale_run(clients: int, args: argparse.Namespace, env: dict, home: Path) -> dict:
    out = Path(tempfile.mkdtemp(prefix=f"bench-scale-{clients}-"))
    cfg = {
        "method": args.method,
        "dataset": args.dataset,
        "dirichlet-alpha": args.alpha,
        "num-server-rounds": args.rounds,
        "fraction-train": SAMPLED / clients,
        "batch-size": 16,
        "min-train-samples": 10,
        "pool-size": args.per_client * clients,
        "messages-in-flight": args.messages_in_flight,
        **set_keys(args.set),
        "output-dir": str(out),
    }
    if args.engine == "inprocess":
        from pfedgm_engine.inprocess import run_inprocess

        s, _ = run_inprocess({**cfg, "client-threads": 1}, clients)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # ever, this process
        engine = float("nan")  # no engine
    else:
        sampler = TreeSampler(home, RunFolder(out).rounds)
        sampler.start()
        run = run_app(cfg, clients, env, cpus_per_client=1, timeout=3 * 3600)
        sampler.stop.set()
        if not run.ok:
            raise SystemExit(f"{clients} clients: run {run.status}:\n{run.log[-3000:]}")
        s, peak = run.summary, sampler.peak
        engine = sampler.cores_in_rounds()["simulation engine"]
    rounds = RunFolder(out).read_rounds()
    later = rounds[1:] or rounds
    return {
        "clients": clients,
        "q": SAMPLED / clients,
        "seconds_per_round": sum(r["seconds"] for r in later) / len(later),
        "seconds_first_round": rounds[0]["seconds"],
        "seconds_before_round_1": s["seconds-training"] - s["seconds-per-round"] * s["rounds"],
        "seconds_personalize": s["seconds-personalize"],
        "peak_rss_gib": peak / 2**30,
        "cores_engine": engine,
        "accuracy": s["mean-accuracy"],
        "clients_evaluated": s["num-clients-evaluated"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", default=str(ROOT.parent / "shared/data/mnist"))
    parser.add_argument("--method", default="pfedgm")
    parser.add_argument("--clients", default="100,1000", help="comma-separated client counts")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--alpha", type=float, default=0.5)
    parser.add_argument("--per-client", type=int, default=70, help="pooled images per client")
    parser.add_argument(
        "--messages-in-flight",
        type=int,
        default=0,
        help="the run-config key; 0: all at once (the default), -1: auto (twice the cores)",
    )
    parser.add_argument("--engine", choices=("flwr", "inprocess"), default="flwr")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a run-config key for every run, as KEY=VALUE")  # fmt: skip
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="bench-scale-home-"))
    env = offline_env(home)
    results = []
    try:
        for clients in map(int, args.clients.split(",")):
            results.append(scale_run(clients, args, env, home))
            print(json.dumps(results[-1]), flush=True)
    finally:
        stop_local_superlink(home)
    print(f"{args.method}, {SAMPLED} clients per round, batch 16, 5 local epochs, "
          f"Dir({args.alpha}), {args.rounds} rounds, messages-in-flight="
          f"{args.messages_in_flight}, engine {args.engine}"
          f"{''.join(', ' + pair for pair in args.set)}")  # fmt: skip
    for r in results:
        print(f"{r['clients']:5d} clients (q={r['q']:.2f}): {r['seconds_per_round']:.1f} s/round, "
              f"{r['seconds_before_round_1']:.0f} s before round 1, Phase 2 "
              f"{r['seconds_personalize']:.0f} s, peak memory {r['peak_rss_gib']:.2f} GiB, "
              f"engine {r['cores_engine']:.2f} cores in the rounds, "
              f"accuracy {r['accuracy']:.2f} % over {r['clients_evaluated']} clients")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

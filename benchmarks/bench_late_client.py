"""What one late client costs the rounds after its own, in Flower's simulation.

A training round stops waiting for a straggler (`straggler-wait`, docs/robustness.md), but
Flower's public API cancels no message: the late ClientApp goes on training on its worker,
and the next rounds run with one worker less until it ends. This measures that cost: FedAvg
on MNIST (12,000 images, 5 local epochs), N SuperNodes, every one sampled each round, through
`flwr run` (the simulation engine, `--workers` ClientApps at a time); in the `late` run
partition 0's ClientApp sleeps `--sleep` seconds before training in round 1 only. Printed:
each round's wall seconds in the honest run and the late one (after a warm-up run that
caches the clients' data), the late round's `replies-late`, and the extra seconds of the
later rounds.

    python -m benchmarks.bench_late_client                  # 4 nodes, 2 workers, 6 rounds
    python -m benchmarks.bench_late_client --sleep 120 --rounds 14

The proposal this supports: docs/upstream/late-message-cancel.md.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from devtools.clientapp_variant import clientapp_variant
from pfedgm_app.records.run_folder import RunFolder
from pfedgm_cli.flwr_calls import offline_env
from pfedgm_cli.flwr_cli import run_app
from pfedgm_cli.superlink import stop_local_superlink

ROOT = Path(__file__).resolve().parents[1]

LATE_CLIENT = """
import time

from flwr.clientapp import ClientApp

from pfedgm_app import client_app as honest

app = ClientApp()


@app.query()
def query(msg, context):
    return honest.query(msg, context)


@app.train()
def train(msg, context):
    if int(context.node_config["partition-id"]) == 0 and msg.content["config"]["server-round"] == 1:
        time.sleep(SLEEP)
    return honest.train(msg, context)


@app.train("personalize")
def personalize(msg, context):
    return honest.personalize(msg, context)
"""


def round_seconds(output_dir: Path) -> list[tuple[float, int]]:
    """(wall seconds, late replies) of each training round."""
    return [(r["seconds"], r.get("replies-late", 0)) for r in RunFolder(output_dir).read_rounds()]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nodes", type=int, default=4)
    p.add_argument("--workers", type=int, default=2, help="ClientApps at a time (CPUs / 1)")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--epochs", type=int, default=5, help="local epochs (a round's weight)")
    p.add_argument("--pool-size", type=int, default=12000, help="images over all nodes")
    p.add_argument("--sleep", type=float, default=90.0, help="the late client's delay (s)")
    p.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "mnist")
    args = p.parse_args()
    run_config = {
        "method": "fedavg", "dataset": str(args.data), "num-server-rounds": args.rounds,
        "fraction-train": 1.0, "local-epochs": args.epochs, "pool-size": args.pool_size,
        "client-threads": 1,
        "straggler-wait": 2.0,
    }  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="pfedgm-late-") as tmp:
        home = Path(tmp) / "flwr-home"
        env = offline_env(home)
        cpus = max(1, (os.cpu_count() or 2) // args.workers)  # `workers` ClientApps at a time
        figures = {}
        try:
            # a first run decodes and caches the clients' data: a warm-up, not measured
            warm = {**run_config, "num-server-rounds": 1, "output-dir": str(Path(tmp) / "warm")}
            run_app(warm, args.nodes, env, cpus_per_client=cpus, timeout=3600)
            late_source = LATE_CLIENT.replace("SLEEP", repr(args.sleep))
            for name, app_dir in (
                ("honest", ROOT),
                ("late", clientapp_variant(Path(tmp) / "late-app", "late", late_source)),
            ):
                out = Path(tmp) / name
                run = run_app(
                    {**run_config, "output-dir": str(out)}, args.nodes, env,
                    cpus_per_client=cpus, app_dir=app_dir, timeout=3600,
                )  # fmt: skip
                if not run.ok:
                    raise SystemExit(f"{name}: {run.status}: {run.details}")
                figures[name] = round_seconds(out)
        finally:
            stop_local_superlink(home)
    print(f"{args.nodes} nodes, {args.workers} ClientApps at a time, partition 0 "
          f"{args.sleep:.0f} s late in round 1")  # fmt: skip
    print("round  honest s  late s  late replies")
    for i, ((h, _), (s, late)) in enumerate(zip(figures["honest"], figures["late"], strict=True)):
        print(f"{i + 1:5d}  {h:8.1f}  {s:6.1f}  {late:12d}")
    later = zip(figures["honest"][1:], figures["late"][1:], strict=True)
    extra = sum(s - h for (h, _), (s, _) in later)
    print(f"the later rounds' extra seconds: {extra:.1f}")


if __name__ == "__main__":
    main()

"""Deployment against simulation: pFedGM on CIFAR-10 held by 4 devices, each in its own folder
(node-config `data-path`), in a loopback deployment (a SuperLink and 4 SuperNode processes on
this machine), next to the same config in simulation; and a ClientApp's per-message start-up
with the decoded-data cache cold and warm.

The device folders hold exactly the simulation's 4 Dirichlet partitions (parquet with the hub
schema, rows in pool order), and each SuperNode is given its partition's id, so both runs train
and evaluate the same clients with the same seeds: their accuracies should agree, and the time
between them is the cost of deployment (a fresh ClientApp process per message, no shared
memory). Prints, per run: wall time, seconds per round (after the first), mean personalized
accuracy, and the seconds a ClientApp took to have its data ready (at the query, which decodes
and fills the cache, and in later messages); then, in fresh processes as a deployment starts
one per message, the imports and the data's seconds without the cache (decoding, as every
message did before it) and with it warm.

    python -m benchmarks.bench_deploy                 # 3 rounds, 2,400 images, 5 local epochs
    python -m benchmarks.bench_deploy --rounds 5 --pool-size 12000
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import anatomy
from devtools.deployment import add_executor_options, executor_env, start_deployment
from devtools.devices import write_devices
from pfedgm_app.records.run_folder import RunFolder
from pfedgm_cli.flwr_calls import offline_env
from pfedgm_cli.flwr_cli import run_app
from pfedgm_cli.superlink import stop_local_superlink

ROOT = Path(__file__).resolve().parents[1]

CLIENTS = 4
# Flower's lines timestamped, the app's timing lines shown (every one: Ray folds repeats)
DEBUG = {"FLWR_LOG_LEVEL": "DEBUG", "RAY_DEDUP_LOGS": "0"}
# One ClientApp's start-up in a fresh process, as a SuperNode starts one per message.
STARTUP = """
import json, sys, time
t0 = time.perf_counter()
from pfedgm_app.data import clients, device, tensors
from pfedgm_app.client.node import node_data
from pfedgm_app.methods import parse_run_config
t1 = time.perf_counter()
cfg = parse_run_config(json.loads(sys.argv[1]))[0]
node = json.loads(sys.argv[2])
if sys.argv[3] == "off":  # decode every time, as before the cache
    for room in (clients, device):
        room._client_cache = lambda parts, decode: tensors._client_data(decode())
node_data(cfg, node)
print(json.dumps({"imports": t1 - t0, "data": time.perf_counter() - t1}))
"""


def figures(run, name: str) -> dict:
    """Wall time, seconds per round, accuracy and data-ready seconds of a finished run."""
    if not run.ok:
        raise SystemExit(f"{name}: run {run.status}:\n{run.log[-3000:]}")
    rounds = RunFolder(run.output_dir).read_rounds()
    later = rounds[1:] or rounds
    query = re.search(r"data ready in at most ([\d.]+) s", run.log)
    return {
        "run": name,
        "wall_seconds": run.wall_seconds,
        "app_seconds": run.summary["seconds-total"],
        "seconds_per_round": statistics.mean(r["seconds"] for r in later),
        "seconds_personalize": run.summary["seconds-personalize"],
        "accuracy": run.summary["mean-accuracy"],
        "clients_evaluated": run.summary["num-clients-evaluated"],
        "data_seconds_query_max": float(query.group(1)) if query else None,
        "data_seconds_train_mean": statistics.mean(r["seconds-data"] for r in rounds),
    }


def startup(cfg: dict, node: dict, cache: str, env: dict) -> dict:
    """Seconds of one fresh ClientApp-like process: wall, imports, data ready."""
    started = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", STARTUP, json.dumps(cfg), json.dumps(node), cache],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return {
        **json.loads(out.stdout.strip().splitlines()[-1]),
        "wall": time.perf_counter() - started,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", default=str(ROOT.parent / "shared/data/cifar10"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--local-epochs", type=int, default=5)
    parser.add_argument("--fraction-train", type=float, default=0.5)
    parser.add_argument(
        "--pool-size",
        type=int,
        default=2400,
        help="images over the 4 devices (600 each: the paper's 100-client sizes)",
    )
    parser.add_argument("--alpha", type=float, default=0.5)
    parser.add_argument("--repeats", type=int, default=3, help="start-up measurements each")
    parser.add_argument("--runs", type=int, default=3, help="simulation and deployment runs each")
    add_executor_options(parser)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-deploy-"))
    cfg = {
        "method": "pfedgm",
        "dataset": str(Path(args.dataset).resolve()),
        "dirichlet-alpha": args.alpha,
        "num-server-rounds": args.rounds,
        "local-epochs": args.local_epochs,
        "fraction-train": args.fraction_train,
        "pool-size": args.pool_size,
        "client-threads": 1,
    }
    devices = write_devices(cfg, CLIENTS, work / "devices")
    nodes = [
        f"partition-id={i} num-partitions={CLIENTS} data-path='{d}'" for i, d in enumerate(devices)
    ]
    results, sent, simulated = [], [], []
    for i in range(args.runs):
        home = work / f"sim-home-{i}"  # simulation: 2 ClientApps at a time, one thread each
        env = {**offline_env(home), "PFEDGM_CACHE_DIR": str(work / "sim-cache"), **DEBUG}
        try:
            run = run_app({**cfg, "output-dir": str(work / f"sim-{i}")}, CLIENTS, env, timeout=1800)
        finally:
            stop_local_superlink(home)
        results.append(figures(run, "simulation"))
        simulated += anatomy.handler_parts(run.log)
        print(json.dumps(results[-1]), flush=True)

        home = work / f"deploy-home-{i}"  # deployment: one SuperNode process per device
        env = {
            **offline_env(home),
            "OMP_NUM_THREADS": "1",
            **DEBUG,
            "PFEDGM_CACHE_DIR": str(work / "deploy-cache"),
            "PYTHONPROFILEIMPORTTIME": "1",
            **executor_env(args),
        }
        deployment = start_deployment(home, nodes, env, superexec=args.superexec)
        try:
            run = run_app(
                {**cfg, "output-dir": str(work / f"deploy-{i}")},
                CLIENTS,
                env,
                timeout=1800,
                federation=deployment.federation,
            )
        finally:
            deployment.stop()
            stop_local_superlink(home)
        results.append(figures(run, "deployment"))
        sent += [m for log in sorted(home.glob("supernode-*.log")) for m in anatomy.messages(log)]
        print(json.dumps(results[-1]), flush=True)

    # A ClientApp's start-up in fresh processes: device 0, its own cache folder
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PFEDGM_CACHE_DIR": str(work / "start-cache")}
    node = {"partition-id": 0, "num-partitions": CLIENTS, "data-path": str(devices[0])}
    off = [startup(cfg, node, "off", env) for _ in range(args.repeats)]
    on = [startup(cfg, node, "on", env) for _ in range(args.repeats + 1)]  # 1st fills the cache
    start = {
        kind: {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        for kind, rs in (("off", off), ("on", on[1:]))
    }
    start["on"]["first_data"] = on[0]["data"]
    print(json.dumps({"startup": start}), flush=True)

    print(
        f"\npFedGM, CIFAR-10 Dir({args.alpha}), {CLIENTS} clients ({args.pool_size} images), "
        f"q = {args.fraction_train}, {args.local_epochs} local epochs, {args.rounds} rounds, "
        "one torch thread per ClientApp"
    )
    print(
        f"{'run':<12}{'wall s':>8}{'app s':>8}{'s/round':>9}{'Phase 2 s':>11}{'accuracy':>10}"
        f"{'data s: query':>15}{'later':>8}"
    )
    for r in results:
        print(
            f"{r['run']:<12}{r['wall_seconds']:8.1f}{r['app_seconds']:8.1f}"
            f"{r['seconds_per_round']:9.1f}{r['seconds_personalize']:11.1f}"
            f"{r['accuracy']:10.2f}{r['data_seconds_query_max']:15.2f}"
            f"{r['data_seconds_train_mean']:8.3f}"
        )
    by = {k: [r for r in results if r["run"] == k] for k in ("simulation", "deployment")}
    for key, what in (("seconds_per_round", "a round"), ("seconds_personalize", "Phase 2")):
        sim, dep = (statistics.median(r[key] for r in by[k]) for k in by)
        print(f"deployment / simulation, {what} (medians of {args.runs} runs): {dep / sim:.2f}")
    print("\nA deployment message, stage by stage (seconds over every message of every run):")
    for kind in ("query", "train", "train.personalize"):
        print(anatomy.table(sent, kind), end="\n\n")
    print("A simulated message's handler (the same stages; no process, FAB or imports):")
    for kind in ("query", "train", "personalize"):
        print(anatomy.table(simulated, kind), end="\n\n")
    off, on = start["off"], start["on"]
    print(
        f"ClientApp start-up, fresh process, device 0 (median of {args.repeats}): process "
        f"{off['wall']:.1f} s without the cache / {on['wall']:.1f} s with it warm; imports "
        f"{on['imports']:.1f} s; data {off['data']:.2f} s decoded / {on['data']:.3f} s from "
        f"the cache (the first, which fills it: {on['first_data']:.2f} s)"
    )
    if args.json:
        figures_ = {"runs": results, "startup": start, "messages": sent, "simulated": simulated}
        Path(args.json).write_text(json.dumps(figures_, indent=2))


if __name__ == "__main__":
    main()

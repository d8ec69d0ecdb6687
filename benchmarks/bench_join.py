"""A device that joins after training, in a loopback deployment: the wall time from `flwr run`
to its saved personalized model, and its accuracy against what the same client gets when it
takes part in training; then `predict`'s throughput and the model file's size per method.

pFedGM on MNIST held by N devices (node-config `data-path`: the simulation's N Dirichlet
partitions, `devtools.devices`, so device i is partition i's client in every run):

1. `with it`: the N clients train R rounds (simulation): the new client's accuracy when it
   takes part in training.
2. `without it`: devices 0..N-2 train R rounds in a loopback deployment (a SuperLink and a
   SuperNode process per device); device N-1 is off.
3. `joins`: device N-1's SuperNode starts, then `flwr run` with `initial-model` (run 2's
   output) and `num-server-rounds=0`: every connected device personalizes, none trains. Timed
   from the `flwr run` call to device N-1's model file on its disk.

    python -m benchmarks.bench_join                        # 5 devices, 3 rounds, 5,000 images
    python -m benchmarks.bench_join --devices 6 --rounds 5 --predict-images 5000
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq
import torch
from PIL import Image

from devtools.deployment import add_executor_options, executor_env, start_deployment
from devtools.devices import write_devices
from pfedgm_app.client import personal_model, predict
from pfedgm_app.data import ClientData
from pfedgm_app.methods import METHODS
from pfedgm_app.methods.base import ClientState, ClientTask
from pfedgm_app.records.run_folder import RunFolder
from pfedgm_app.runconfig.common import RunConfig
from pfedgm_cli.flwr_calls import offline_env
from pfedgm_cli.flwr_cli import run_app
from pfedgm_cli.superlink import stop_local_superlink

ROOT = Path(__file__).resolve().parents[1]


def accuracies(run, name: str) -> dict[int, float]:
    """{partition id: personalized accuracy, %} of a finished run."""
    if not run.ok:
        raise SystemExit(f"{name}: run {run.status}:\n{run.log[-3000:]}")
    return {int(r["partition-id"]): r["accuracy"]
            for r in RunFolder(run.output_dir).read_clients()}  # fmt: skip


def images(dataset: Path, folder: Path, count: int) -> list[Path]:
    """The first `count` test images of `dataset` as PNG files (as a device's camera gives)."""
    folder.mkdir(parents=True, exist_ok=True)
    table = pq.read_table(dataset / "test.parquet").slice(0, count)
    column = "image" if "image" in table.column_names else "img"
    paths = []
    for i, cell in enumerate(table.column(column).to_pylist()):
        paths.append(folder / f"{i:05d}.png")
        Image.open(io.BytesIO(cell["bytes"])).save(paths[-1])
    return paths


def throughput(model_path: Path, paths: list[Path], repeats: int = 3) -> dict[str, float]:
    """Images/s of `predict.predict` (decode, normalize, forward) on one thread, best of
    `repeats`; and of the command itself (a fresh process: imports and load included)."""
    torch.set_num_threads(1)
    model = personal_model.load(model_path)
    best = 0.0
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in predict.predict(model, paths):
            pass
        best = max(best, len(paths) / (time.perf_counter() - started))
    started = time.perf_counter()
    command = [sys.executable, "-m", "pfedgm_app.client.predict", str(model_path), *map(str, paths)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run(command, check=True, capture_output=True, env=env, cwd=ROOT)
    return {"images_per_s": best, "command_s": time.perf_counter() - started}


def file_sizes(folder: Path) -> dict[str, dict[str, int]]:
    """Bytes of each method's model file for 28 px grayscale and 32 px color images (what
    its personalize round keeps, on a small synthetic client: the sizes depend on the shapes
    only)."""
    sizes: dict[str, dict[str, int]] = {}
    for shape in ((1, 28, 28), (3, 32, 32)):
        g = torch.Generator().manual_seed(0)
        y = torch.arange(40) % 10
        data = ClientData(torch.randn(40, *shape, generator=g), y, torch.randn(10, *shape), y[:10],
                          10)  # fmt: skip
        task = ClientTask(RunConfig(local_epochs=1), data, ClientState(), g, torch.device("cpu"))
        for name, method in METHODS.items():
            plugin = method.plugin()
            result = plugin.personalize(plugin.build_model(shape, 10), task)
            path = folder / f"{name}-{shape[0]}.safetensors"
            personal_model.save(path, result.model, shape, list("0123456789"), {"method": name})
            sizes.setdefault(name, {})["x".join(map(str, shape))] = path.stat().st_size
    return sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", default=str(ROOT.parent / "shared/data/mnist"))
    parser.add_argument("--devices", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pool-size", type=int, default=5000, help="images over the devices")
    parser.add_argument("--predict-images", type=int, default=2000)
    parser.add_argument("--json", help="also write the figures to this file")
    add_executor_options(parser)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-join-"))
    n, new = args.devices, args.devices - 1
    cfg = {"method": "pfedgm", "dataset": str(Path(args.dataset).resolve()),
           "num-server-rounds": args.rounds, "local-epochs": 2, "fraction-train": 1.0,
           "pool-size": args.pool_size, "client-threads": 1}  # fmt: skip
    devices = write_devices(cfg, n, work / "devices")
    kept = [work / "kept" / str(i) for i in range(n)]  # each device's model-dir
    nodes = [f"partition-id={i} data-path='{d}' model-dir='{kept[i]}'"
             for i, d in enumerate(devices)]  # fmt: skip
    figures: dict = {"devices": n, "rounds": args.rounds, "pool_size": args.pool_size}

    home = work / "sim-home"  # 1. the new client takes part in training (simulation)
    env = {**offline_env(home), "PFEDGM_CACHE_DIR": str(work / "sim-cache")}
    try:
        run = run_app({**cfg, "output-dir": str(work / "with")}, n, env, timeout=3600)
    finally:
        stop_local_superlink(home)
    figures["with_it"] = accuracies(run, "with it")
    print(json.dumps({"with_it": figures["with_it"]}), flush=True)

    home = work / "deploy-home"  # 2. and 3.: one SuperNode process per device, loopback
    env = {**offline_env(home), "OMP_NUM_THREADS": "1",
           "PFEDGM_CACHE_DIR": str(work / "deploy-cache"), **executor_env(args)}  # fmt: skip
    deployment = start_deployment(home, nodes[:new], env, superexec=args.superexec)
    try:
        trained = work / "without"
        run = run_app({**cfg, "min-nodes": new, "output-dir": str(trained)}, new, env,
                      timeout=3600, federation=deployment.federation)  # fmt: skip
        figures["without_it"] = accuracies(run, "without it")
        figures["without_it_wall_s"] = run.wall_seconds
        deployment.add_supernode(nodes[new])  # the new device starts
        started = time.time()
        join = {**cfg, "min-nodes": n, "num-server-rounds": 0, "initial-model": str(trained),
                "output-dir": str(work / "joined")}  # fmt: skip
        run = run_app(join, n, env, timeout=3600, federation=deployment.federation)
    finally:
        deployment.stop()
        stop_local_superlink(home)
    figures["joined"] = accuracies(run, "joins")
    model = kept[new] / f"client-{new}.safetensors"
    figures["seconds_to_model"] = model.stat().st_mtime - started
    figures["join_wall_s"] = run.wall_seconds
    figures["join_app_s"] = run.summary["seconds-total"]
    print(json.dumps({k: figures[k] for k in ("joined", "seconds_to_model", "join_wall_s")}),
          flush=True)  # fmt: skip

    paths = images(Path(args.dataset), work / "images", args.predict_images)
    figures["predict"] = throughput(model, paths)
    figures["file_bytes"] = file_sizes(work / "sizes")

    mean = statistics.mean
    trained_alone = mean(figures["without_it"][i] for i in range(new))
    again = mean(figures["joined"][i] for i in range(new))
    print(f"\npFedGM, MNIST Dir(0.5), {n} devices ({args.pool_size} images), {args.rounds} "
          "rounds of 2 local epochs, q = 1, one torch thread per ClientApp")  # fmt: skip
    print(f"new device {new}: its model {figures['seconds_to_model']:.1f} s after `flwr run` "
          f"(the run: {figures['join_wall_s']:.1f} s wall, {figures['join_app_s']:.1f} s in the "
          f"ServerApp); accuracy {figures['joined'][new]:.2f} % joined after training, "
          f"{figures['with_it'][new]:.2f} % when it took part in training")  # fmt: skip
    print(f"the {new} devices that trained without it: {trained_alone:.2f} % mean (the join "
          f"run personalizes them again: {again:.2f} %); with it in training, all {n}: "
          f"{mean(figures['with_it'].values()):.2f} %")  # fmt: skip
    p = figures["predict"]
    print(
        f"predict, one thread: {p['images_per_s']:.0f} images/s (decode, normalize, forward); "
        f"the command on {len(paths)} images: {p['command_s']:.1f} s with start-up"
    )
    sizes = figures["file_bytes"].items()
    print(
        "model file bytes, 28 px gray / 32 px color: "
        + ", ".join(f"{m} {s['1x28x28']:,} / {s['3x32x32']:,}" for m, s in sizes)
    )
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()

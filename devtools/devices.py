"""Device folders for a deployment trial: each client of a dataset's partition in its own folder.

    python -m devtools.devices ../shared/data/cifar10 devices --clients 4 --alpha 0.5

writes `devices/<id>/data.parquet` (the hub schema, the client's pooled samples in pool order)
for each of the simulation's clients, so that SuperNodes started with `--node-config
"partition-id=<id> num-partitions=<N> data-path='devices/<id>'"` hold their own data and train
the clients a simulation with the same settings trains. A helper of the repository (the
deployment walk-through of deploy/README.md, `benchmarks/bench_deploy.py`), not of the app.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pfedgm_app.data import Protocol, client_split, load_pool
from pfedgm_app.methods import parse_run_config


def write_devices(run_config: dict[str, Any], clients: int, folder: Path) -> list[Path]:
    """Each client's pooled samples (its partition of the run's `dataset`, in pool order) as
    `<folder>/<id>/data.parquet`; returns the client folders."""
    protocol = Protocol.of(parse_run_config(run_config)[0], clients)
    pool = load_pool(protocol.dataset)
    devices = []
    for pid in range(clients):
        rows = sorted(i for split in client_split(protocol, pid) for i in split)
        (folder / str(pid)).mkdir(parents=True, exist_ok=True)
        pool.dataset.select(rows).to_parquet(str(folder / str(pid) / "data.parquet"))
        devices.append(folder / str(pid))
    return devices


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dataset", help="a local copy (parquet splits with the hub schema)")
    parser.add_argument("folder", type=Path, help="where the device folders go")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--alpha", type=float, default=0.5, help="Dirichlet alpha")
    parser.add_argument("--pool-size", type=int, default=0, help="0: every image")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    cfg = {
        "dataset": str(Path(args.dataset).resolve()),
        "dirichlet-alpha": args.alpha,
        "pool-size": args.pool_size,
        "seed": args.seed,
    }
    for device in write_devices(cfg, args.clients, args.folder):
        print(f"{device.resolve()}")


if __name__ == "__main__":
    main()

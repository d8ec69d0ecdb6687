"""Adopt finished runs made outside `pfedgm-paper` (compare.py, navigator_init.py) into a grid's
results folder, after checking that each ran its cell's protocol.

    python benchmarks/adopt_runs.py --to /abs/paper-r30 \\
        /work/runs/navigator/cifar10-0.5/pfedgm-standard=cifar10-dir05/pfedgm/0 ...

Each argument is SOURCE=COLUMN/RUN/SEED. A run is adopted only when its `config.json` holds the
grid's run-config: the preset's keys (a local dataset folder for a `shared:` one), the run's
method and ablation keys, the seed, and every other key it records at the app's default, but
those that do not change what a run computes (where it writes, threads, device, its budget).
A key it does not record is another method's, or newer than the run (its default is the
behaviour the run had). The small files
are copied (`cli.copy_results`), as `pfedgm-paper collect` does; the budget is the run's own.
"""

from __future__ import annotations

import argparse
import tomllib
from pathlib import Path

from pfedgm_app.paper.cli import copy_results
from pfedgm_app.paper.grid import TABLES
from pfedgm_app.presets import PRESETS
from pfedgm_app.run_folder import RunFolder

ROOT = Path(__file__).resolve().parents[1]
FREE = {"output-dir", "resume", "client-threads", "device", "num-server-rounds", "eval-every",
        "preset", "num-clients", "flwr-version", "messages-in-flight", "node-wait-timeout",
        "round-timeout", "client-state-dir"}  # fmt: skip


def defaults() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]


def row_keys(run: str) -> dict:
    return next(r.keys for t in TABLES.values() for r in t.rows if r.run == run)


def problems(config: dict, column: str, run: str, seed: int) -> list[str]:
    """Where `config` differs from the grid's run-config of (column, run, seed)."""
    wanted = {**defaults(), **PRESETS[column].keys, **row_keys(run), "seed": seed}
    found = []
    for key, value in wanted.items():
        if key in FREE or key not in config:  # another method's key, or one newer than the run
            continue
        have = config.get(key)
        if key == "dataset" and isinstance(value, str) and "/" in value:  # a hub id
            folder = next(f for h, f in _hub_folders() if h == value)
            same = have is not None and Path(str(have)).name == folder
        else:
            same = have == value
        if not same:
            found.append(f"{key}: {have!r}, the grid's {value!r}")
    return found


def _hub_folders() -> list[tuple[str, str]]:
    from pfedgm_app.presets import DATASETS

    return [(hub, folder) for hub, folder, *_ in DATASETS.values()]


def adopt(source: Path, target: str, to: Path) -> Path:
    column, run, seed = target.split("/")
    stored = RunFolder(source)
    config = stored.read_config()
    if not stored.finished:
        raise SystemExit(f"{source}: no summary.json, the run has not finished")
    if bad := problems(config, column, run, int(seed)):
        raise SystemExit(f"{source} is not {target}: " + "; ".join(bad))
    folder = to / column / run / f"seed{seed}"
    copy_results(stored, folder)
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--to", type=Path, required=True)
    parser.add_argument("pairs", nargs="+", metavar="SOURCE=COLUMN/RUN/SEED")
    args = parser.parse_args()
    for pair in args.pairs:
        source, _, target = pair.partition("=")
        print(adopt(Path(source), target, args.to))


if __name__ == "__main__":
    main()

"""pFedGM's navigator init (`navigator-init`) on six cells of the paper, beside pFedFDA.

    python benchmarks/navigator_init.py run --out /abs/runs/navigator [--cells cifar100-0.5,...]
    python benchmarks/navigator_init.py collect --out /abs/runs/navigator   # -> results/
    python benchmarks/navigator_init.py report [--out results/navigator]

`run` trains every missing (cell, variant) in OUT/<cell>/<variant> with the in-process driver
(100 clients, q = 0.3, 5 local epochs, 30 rounds, seed 0: the same clients and sampled rounds
for every variant): a finished run (`summary.json`) is skipped, a stopped one resumes from its
checkpoint. `collect` keeps what the tables need of each finished run (`summary.json`,
`clients.csv`, `rounds.jsonl`, the navigator's norm) in the repository's `results/navigator/`:
small files, no models or checkpoints. `report` prints, from either folder, per cell: each
variant's personalized accuracy, its global model alone (pFedGM: the navigator,
`acc-global`), ||mu|| after the last round (the mean over classes of the global class means),
and the paired per-client differences (test-size weighted mean, standard error, clients up /
down).
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import sys
import time
from pathlib import Path

import torch
from paper_table import paired_gap  # benchmarks/ is on sys.path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared/data"
sys.path.insert(0, str(ROOT))
from devtools.inprocess import run_inprocess  # noqa: E402
from pfedgm_app.run_folder import RunFolder  # noqa: E402

CELLS = {  # name: (dataset folder, Dirichlet alpha, extra run-config keys)
    "cifar100-0.5": ("cifar100", 0.5, {}),
    "cifar10-0.5": ("cifar10", 0.5, {}),
    "cifar100-0.1": ("cifar100", 0.1, {}),
    "cifar10-0.1": ("cifar10", 0.1, {}),
    "cifar10s-0.5-100C": ("cifar10", 0.5, {"corruption": "100C"}),
    "tinyimagenet-0.1": ("tinyimagenet", 0.1, {}),
}
VARIANTS = {
    "pfedgm-standard": {"method": "pfedgm", "navigator-init": "standard"},
    "pfedgm-scaled": {"method": "pfedgm", "navigator-init": "scaled"},
    "pfedfda": {"method": "pfedfda"},
}
PAIRS = [("pfedgm-standard", "pfedgm-scaled"), ("pfedgm-standard", "pfedfda"),
         ("pfedgm-scaled", "pfedfda")]  # fmt: skip
PROTOCOL = {"num-server-rounds": 30, "fraction-train": 0.3, "local-epochs": 5, "seed": 0,
            "client-threads": 1}  # fmt: skip


def run(out: Path, cells: list[str], workers: int) -> None:
    for cell in cells:
        folder, alpha, extra = CELLS[cell]
        for variant, keys in VARIANTS.items():
            target = RunFolder(out / cell / variant)
            if target.finished:
                continue
            cfg = {**PROTOCOL, **extra, **keys, "dataset": str(DATA / folder),
                   "dirichlet-alpha": alpha, "output-dir": str(target.path),
                   "resume": target.stopped}  # fmt: skip
            started = time.time()
            summary, _ = run_inprocess(cfg, 100, workers=workers)
            print(f"{cell} {variant}: {summary['mean_accuracy']:.2f} "
                  f"in {time.time() - started:.0f}s", flush=True)  # fmt: skip


RESULTS = ROOT / "results/navigator"


def navigator_norm(target: Path) -> float | None:
    """Mean ||mu_k|| of the global class means after the last round (`navigator.json` once
    collected)."""
    if (target / "navigator.json").exists():
        return json.loads((target / "navigator.json").read_text())["mu-norm"]
    weights = torch.load(RunFolder(target).global_model, weights_only=True)
    mu = weights.get("head.mu")
    return None if mu is None else mu.norm(dim=1).mean().item()


def collect(out: Path, cells: list[str]) -> None:
    for cell in cells:
        for variant in VARIANTS:
            source, target = RunFolder(out / cell / variant), RESULTS / cell / variant
            if not source.finished:
                continue
            target.mkdir(parents=True, exist_ok=True)
            for path in (source.summary, source.clients, source.rounds):
                shutil.copyfile(path, target / path.name)
            norm = {"mu-norm": navigator_norm(source.path)}
            (target / "navigator.json").write_text(json.dumps(norm) + "\n")
            print(f"kept {cell} {variant} in {target.relative_to(ROOT)}")


def clients(target: Path) -> dict[int, tuple[float, int]]:
    """{partition-id: (accuracy %, test size)} of a finished run."""
    with open(RunFolder(target).clients) as f:
        rows = list(csv.DictReader(f))
    return {int(float(r["partition-id"])): (100 * float(r["accuracy"]), int(float(r["num-test"])))
            for r in rows}  # fmt: skip


def report(out: Path, cells: list[str]) -> None:
    print("| cell | variant | personalized % | global model alone % | ||mu|| | hours |")
    print("|---|---|---|---|---|---|")
    gaps = []
    for cell in cells:
        folders = {v: RunFolder(out / cell / v) for v in VARIANTS}
        summaries = {v: f.read_summary() for v, f in folders.items() if f.finished}
        for variant, s in summaries.items():
            norm = navigator_norm(out / cell / variant)
            ablation = s["ablation_mean_accuracy"]
            alone = ablation.get("acc-global", next(iter(ablation.values()), float("nan")))
            print(f"| {cell} | {variant} | {s['mean_accuracy']:.2f} ({s['std_accuracy']:.1f}) | "
                  f"{alone:.2f} | {'-' if norm is None else f'{norm:.2f}'} | "
                  f"{s['seconds_total'] / 3600:.2f} |")  # fmt: skip
        per_client = {v: clients(out / cell / v) for v in summaries}
        for a, b in PAIRS:
            if a in per_client and b in per_client:
                gap, se = paired_gap(per_client[a], per_client[b])
                d = [per_client[a][i][0] - per_client[b][i][0] for i in per_client[a]]
                up, down = sum(x > 0 for x in d), sum(x < 0 for x in d)
                gaps.append(f"| {cell} | {a} - {b} | {gap:+.2f} | {se:.2f} | {up} / {down} |")
    print("\n| cell | paired difference | mean (points) | se | clients up / down |")
    print("|---|---|---|---|---|")
    print("\n".join(gaps))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=("run", "collect", "report"))
    parser.add_argument("--out", type=Path, default=RESULTS, help="the runs' folder")
    parser.add_argument("--cells", default=",".join(CELLS))
    parser.add_argument("--workers", type=int, default=2, help="clients at a time (processes)")
    args = parser.parse_args()
    cells = args.cells.split(",")
    if unknown := [c for c in cells if c not in CELLS]:
        raise SystemExit(f"--cells: unknown {unknown}; known: {', '.join(CELLS)}")
    if args.action == "run":
        run(args.out.resolve(), cells, args.workers)
    elif args.action == "collect":
        collect(args.out.resolve(), cells)
    else:
        report(args.out.resolve(), [c for c in cells if (args.out / c).exists()])


if __name__ == "__main__":
    main()

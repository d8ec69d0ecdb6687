"""Print finished comparisons in the paper's table form, beside the paper's CIFAR-10 numbers.

    python benchmarks/paper_table.py /abs/results/dir01 /abs/results/dir05

Each argument is a `compare.py --out` folder (one Dirichlet alpha, read from its summaries).
Prints, per method: `mean (std)` and the paper's; the wall time (training + personalization)
and the training time per round, each relative to FedAvg's in the same folder; the paper's
runtime ratio; then each place where our order of two methods is the reverse of the paper's (by
more than `--margin` points in the paper), with the standard error of our gap from the paired
per-client accuracies (`clients.csv`). Folders of different protocols are refused.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

from pfedgm_app.paper import paired
from pfedgm_app.paper.published import PUBLISHED
from pfedgm_app.plots import dataset_label
from pfedgm_app.run_folder import RunFolder

# The paper's CIFAR-10 results (Table "standard", 200 rounds): {method: {alpha: (mean, std)}}
# and runtimes relative to FedAvg (Table "Time", CIFAR-10 Dir(0.5), minutes / FedAvg's 64.91),
# from `pfedgm_app.paper.published`, in the paper's row order.
PAPER_CIFAR10 = {
    m: {0.1: cells["cifar10-dir01"], 0.5: cells["cifar10-dir05"]}
    for m, cells in PUBLISHED["standard"].items()
}
PAPER_TIME = {m: cells["cifar10-dir05"][0] for m, cells in PUBLISHED["runtime"].items()}


def load_summaries(out: Path) -> dict[str, dict]:
    """`{method: summary}` for every method with a `summary.json` under `out`, in the paper's
    row order; `output_dir` is where the summary was found (a committed record names its run
    folder relatively, `paper.records`)."""
    folders = {m: RunFolder(out / m) for m in PAPER_CIFAR10}
    return {m: {**folder.read_summary(), "output_dir": str(folder.path)}
            for m, folder in folders.items() if folder.finished}  # fmt: skip


PROTOCOL = ("dataset", "num_clients", "rounds", "fraction_train")


def check_same_protocol(columns: dict[float, dict[str, dict]]) -> None:
    """Refuse to put runs of different protocols (clients, rounds, q, data) in one table."""
    seen = {tuple(s.get(k) for k in PROTOCOL) for c in columns.values() for s in c.values()}
    if len(seen) > 1:
        rows = "\n  ".join(str(dict(zip(PROTOCOL, p, strict=True))) for p in sorted(seen, key=str))
        raise SystemExit(f"these runs follow different protocols; table them apart:\n  {rows}")


def order_departures(
    ours: dict[str, float], paper: dict[str, float], margin: float = 1.0
) -> list[tuple[str, str, float, float]]:
    """Pairs `(a, b, paper_gap, our_gap)` where the paper has a above b by more than `margin`
    points and we have a below b. Only methods present in both are compared; sorted by the
    paper's gap, largest first.
    """
    common = [m for m in ours if m in paper]
    pairs = [
        (a, b, paper[a] - paper[b], ours[a] - ours[b])
        for a in common
        for b in common
        if paper[a] - paper[b] > margin and ours[a] < ours[b]
    ]
    return sorted(pairs, key=lambda p: -p[2])


def client_accuracies(summary: dict) -> dict[int, tuple[float, int]] | None:
    """`{partition-id: (accuracy %, test size)}` from the run's `clients.csv`, if it is there."""
    out = summary.get("output_dir")
    path = RunFolder(Path(out)).clients if out else None
    if path is None or not path.exists():
        return None
    with path.open() as f:
        rows = csv.DictReader(f)
        return {
            int(r["partition-id"]): (100 * float(r["accuracy"]), int(r["num-test"])) for r in rows
        }


def paired_gap(
    a: dict[int, tuple[float, int]], b: dict[int, tuple[float, int]]
) -> tuple[float, float]:
    """Gap a - b of two methods' test-size-weighted mean accuracies on the same clients and its
    standard error: `pfedgm_app.paper.paired.paired_gap` on one seed's clients."""
    gap = paired.paired_gap({(0, i): v for i, v in a.items()}, {(0, i): v for i, v in b.items()})
    return gap.gap, gap.se


def dataset_name(summary: dict) -> str:
    """The dataset's short name: the last part of its path, hub id or `shared:` name."""
    return dataset_label(str(summary.get("dataset", "?")))


def paper_reference(summary: dict) -> dict[str, dict[float, tuple[float, float]]]:
    """The paper's CIFAR-10 figures when `summary` ran its standard CIFAR-10 protocol (no
    corrupted clients), else none: other datasets' figures are not tabled here, and
    comparing them with CIFAR-10's would mislead."""
    plain = "accuracy_by_type" not in summary and summary.get("protocol", "standard") == "standard"
    return PAPER_CIFAR10 if dataset_name(summary).lower() == "cifar10" and plain else {}


def time_ratio(summaries: dict[str, dict], method: str, key: str = "seconds_total") -> float | None:
    """Wall time (`seconds_total`: training and personalization, as the paper's runtime table;
    or `seconds_per_round`: training only) relative to FedAvg's in the same comparison."""
    if "fedavg" not in summaries:
        return None
    return summaries[method][key] / summaries["fedavg"][key]


def print_table(columns: dict[float, dict[str, dict]], margin: float = 1.0) -> None:
    """One row per method, one column group per alpha: ours, the paper's, time ratios."""
    alphas = sorted(columns)
    first = next((s for c in columns.values() for s in c.values()), None)
    if first is None:
        print("no finished run")
        return
    reference = paper_reference(first)
    print(f"{dataset_name(first)}, {first['num_clients']} clients, q={first['fraction_train']}, "
          f"{first['rounds']} rounds; accuracy % = mean weighted by test size (std across "
          "clients); time = wall time (training + personalization) / FedAvg's, round = training "
          "seconds per round / FedAvg's, both in the same column")  # fmt: skip
    if reference:
        print("paper = CIFAR-10 after 200 rounds; paper time = its runtime table (Dir(0.5))")
    else:
        print("paper: only the standard CIFAR-10 protocol's figures are tabled here")
    head = f"{'method':10s}"
    for alpha in alphas:
        head += f" {'Dir(' + str(alpha) + ')':>14s} {'paper':>12s} {'time':>5s} {'round':>5s}"
    print(head + f" {'paper time':>10s}  ablation")
    for method in PAPER_CIFAR10:
        if not any(method in columns[a] for a in alphas):
            continue
        row, extras = f"{method:10s}", []
        for alpha in alphas:
            s = columns[alpha].get(method)
            paper = reference.get(method, {}).get(alpha)
            paper_acc = f"{paper[0]:.2f} ({paper[1]:g})" if paper else "-"
            if s is None:
                row += f" {'-':>14s} {paper_acc:>12s} {'-':>5s} {'-':>5s}"
                continue
            row += f" {s['mean_accuracy']:6.2f} ({s['std_accuracy']:4.1f}) {paper_acc:>12s}"
            for key in ("seconds_total", "seconds_per_round"):
                ratio = time_ratio(columns[alpha], method, key)
                row += f" {ratio:5.2f}" if ratio is not None else f" {'-':>5s}"
            abl = s.get("ablation_mean_accuracy", {})
            extras += [f"{alpha}: {k} {v:.2f}" for k, v in abl.items()]
        t = PAPER_TIME.get(method) if reference else None
        row += f" {t / PAPER_TIME['fedavg']:10.2f}" if t else f" {'-':>10s}"
        print(row + "  " + ", ".join(extras))
    for alpha in alphas:
        ours = {m: s["mean_accuracy"] for m, s in columns[alpha].items()}
        paper = {m: v[alpha][0] for m, v in reference.items() if alpha in v}
        if not paper:
            continue
        departures = order_departures(ours, paper, margin)
        print(f"\nDir({alpha}): {len(departures)} pair(s) in the reverse of the paper's order "
              f"(paper gap > {margin} points)")  # fmt: skip
        clients = {
            m: client_accuracies(columns[alpha][m])
            for m in {p[0] for p in departures} | {p[1] for p in departures}
        }  # one read per run
        for a, b, pgap, ogap in departures:
            se = (
                f" (se {paired_gap(clients[a], clients[b])[1]:.2f})"
                if clients[a] and clients[b]
                else ""
            )
            print(f"  {a} < {b}: ours {ogap:+.2f}{se}, paper {pgap:+.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("outs", nargs="+", type=Path, help="compare.py --out folders")
    parser.add_argument("--margin", type=float, default=1.0)
    args = parser.parse_args()
    columns: dict[float, dict[str, dict]] = {}
    for out in args.outs:
        summaries = load_summaries(out.resolve())
        if not summaries:
            raise SystemExit(f"{out}: no <method>/summary.json here; is it a compare.py --out?")
        alphas = {s["dirichlet_alpha"] for s in summaries.values()}
        if len(alphas) != 1:
            raise SystemExit(f"{out}: summaries mix Dirichlet alphas {sorted(alphas)}")
        columns.setdefault(alphas.pop(), {}).update(summaries)
    check_same_protocol(columns)
    print_table(columns, args.margin)


if __name__ == "__main__":
    main()

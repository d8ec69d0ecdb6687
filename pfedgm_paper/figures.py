"""The paper's figures from a results folder, as PNG: accuracy against round per method (the
q = 0.1 figure; any table whose runs evaluated along the way), the per-client accuracy
distribution per method, ablation bars, accuracy against epsilon under client-level DP
(`privacy_lines`), and the t-SNE of representations (`tsne`)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt

from pfedgm_app.records.run_folder import RunFolder

from .cells import Results, seed_folders
from .grid import TABLES
from .render import read_table, row_curves
from .rows import Table

ABLATIONS = ("adaptation", "objective", "decoupling")
TSNE_COLUMN, TSNE_RUN = "cifar10s-dir05-100c", "pfedgm"  # the paper's t-SNE: CIFAR-10S Dir(0.5)


def curves(out: Results, table: Table, column: str, path: Path) -> Path | None:
    """Personalized accuracy per evaluated round, one line per row (mean over seeds), with a
    band of the std across clients."""
    lines = {r.label: c for r, c in row_curves(out, table, column).items()}
    if not lines:
        return None
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, points in lines.items():
        rounds = list(points)
        mean = [points[r][0] for r in rounds]
        std = [points[r][1] for r in rounds]
        ax.plot(rounds, mean, marker="o", ms=3, label=label)
        lo = [m - s for m, s in zip(mean, std, strict=True)]
        hi = [m + s for m, s in zip(mean, std, strict=True)]
        ax.fill_between(rounds, lo, hi, alpha=0.12)
    ax.set(
        xlabel="round",
        ylabel="personalized accuracy (%)",
        title=f"{column}: personalized accuracy per round",
    )
    ax.legend(fontsize=7)
    return _save(fig, path)


def distribution(cells: dict, table: Table, column: str, path: Path) -> Path | None:
    """Per-client accuracy per row (all seeds; `cells`: `render.read_table`), as box plots."""
    rows = [(r.label, cells[r.name, column]) for r in table.rows if (r.name, column) in cells]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(max(4, 0.7 * len(rows) + 2), 4))
    ax.boxplot([[v for v, _ in c.per_client.values()] for _, c in rows], showmeans=True)
    ax.set_xticks(range(1, len(rows) + 1), [label for label, _ in rows], rotation=45, ha="right")
    ax.set(ylabel="per-client accuracy (%)", title=f"{column}: accuracy per client")
    return _save(fig, path)


def ablation_bars(cells: dict, table: Table, path: Path) -> Path | None:
    """Grouped bars: one group per column, one bar per row (`cells`: `render.read_table`);
    error bars are the std across clients."""
    columns = [c for c in table.columns if any((r.name, c) in cells for r in table.rows)]
    if not columns:
        return None
    fig, ax = plt.subplots(figsize=(max(5, 1.6 * len(columns) + 2), 4))
    width = 0.8 / len(table.rows)
    for i, row in enumerate(table.rows):
        found = [cells.get((row.name, c)) for c in columns]
        xs = [j + i * width for j, cell in enumerate(found) if cell]
        ax.bar(
            xs,
            [c.mean for c in found if c],
            width,
            yerr=[c.std for c in found if c],
            label=row.label,
            capsize=2,
        )
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(columns))], columns, rotation=20)
    ax.set(ylabel="personalized accuracy (%)", title=table.caption)
    ax.legend(fontsize=8)
    return _save(fig, path)


def privacy_lines(cells: dict, table: Table, column: str, path: Path) -> Path | None:
    """Personalized accuracy against epsilon, one line per method (the `privacy` table: rows
    labelled `<method>, epsilon <e>, ...` and `<method>, no DP`, the latter drawn at the right
    as "no DP"); error bars the std across clients. Lines follow labels, not runs: FedAvg's
    rows read FedAvgFT's runs. Local (nothing released) is a dashed line across."""
    by_method: dict[str, list[tuple[float, float, float]]] = {}
    floor = None  # Local's accuracy: nothing released, drawn across as a line
    for row in table.rows:
        if (cell := cells.get((row.name, column))) is None:
            continue
        if row.keys.get("method") == "local":
            floor = (row.label, cell.mean)
            continue
        epsilon = float(row.keys.get("dp-epsilon", 0.0)) or float("inf")
        method = row.label.split(", ")[0]
        by_method.setdefault(method, []).append((epsilon, cell.mean, cell.std))
    if not by_method:
        return None
    finite = sorted({e for points in by_method.values() for e, _, _ in points if e != float("inf")})
    right = 2 * max(finite, default=1.0)  # where "no DP" is drawn
    fig, ax = plt.subplots(figsize=(6, 4))
    for method, points in by_method.items():
        points.sort()
        xs = [right if e == float("inf") else e for e, _, _ in points]
        ax.errorbar(xs, [m for _, m, _ in points], yerr=[s for _, _, s in points],
                    marker="o", capsize=2, label=method)  # fmt: skip
    if floor is not None:
        ax.axhline(floor[1], color="gray", linestyle="--", label=floor[0])
    ax.set_xscale("log")
    ax.set_xticks([*finite, right], [f"{e:g}" for e in finite] + ["no DP"])
    ax.minorticks_off()  # the log scale's minor labels (9 x 10^0) would sit among the epsilons
    ax.set(xlabel="epsilon (delta 1e-5)", ylabel="personalized accuracy (%)", title=table.caption)
    ax.legend(fontsize=8)
    return _save(fig, path)


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def tsne(out: Results, path: Path) -> Path | None:
    """The paper's t-SNE (CIFAR-10S Dir(0.5), 100 corrupted clients, pFedGM) from the first
    seed whose folder holds its global model (a finished run's, or one `collect` copied)."""
    for folder in seed_folders(out, TSNE_COLUMN, TSNE_RUN).values():
        if RunFolder(folder).global_model.exists():
            from .tsne import tsne_figure

            return tsne_figure(folder, path)
    return None


def figures(out: Results, to: Path, tables: list[str]) -> list[Path]:
    """Every figure the finished runs allow; returns the files written."""
    written = [tsne(out, to / "tsne.png")] if "corruption" in tables else []
    for name in tables:
        table = TABLES[name]
        if table.kind == "runtime":
            continue
        cells = read_table(out, table)  # once per table: each reads every run's clients.csv
        if name in ABLATIONS:
            written.append(ablation_bars(cells, table, to / f"{name}-bars.png"))
            continue
        if name == "privacy":
            for column in table.columns:
                written.append(privacy_lines(cells, table, column, to / f"privacy-{column}.png"))
        for column in table.columns:
            written.append(curves(out, table, column, to / f"{name}-{column}-curves.png"))
            written.append(distribution(cells, table, column, to / f"{name}-{column}-clients.png"))
    return [p for p in written if p is not None]

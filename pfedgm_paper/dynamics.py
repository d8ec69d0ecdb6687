"""Phase 1's dynamics against round, from pFedGM runs' `rounds.jsonl` (`diagnostics.KEYS`),
overlaid, beside the personalized accuracy of other runs (e.g. pFedFDA's on the same cell), and
as a Markdown table at chosen rounds.

    pfedgm-paper dynamics RUN_DIR [RUN_DIR...] --beside OTHER_RUN_DIR --to dynamics.png
    pfedgm-paper dynamics RUN_DIR [RUN_DIR...] --table dynamics.md --at 50,200
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt

from pfedgm_app.records.plots import EVAL_MEAN
from pfedgm_app.records.run_folder import RunFolder

# (title, [(key, label)], log scale): the panels after the accuracy panel
PANELS = (
    ("H and R_c (round means)", [("loss-shared", "H"), ("loss-personalized", "R_c")], True),
    (
        "gradient on phi (round start)",
        [("grad-norm-shared", "|grad H|"), ("grad-norm-personalized", "|grad lambda R_c|")],
        True,
    ),
    ("share of lambda R_c in the gradient", [("grad-share-personalized", "share")], False),
    (
        "norms",
        [("z-norm", "mean ||z||"), ("mu-norm", "mean ||mu_k||"), ("covariance-norm", "||A||")],
        True,
    ),
    ("within-class variance of z (per coordinate)", [("within-class-variance", "variance")], True),
    (
        "the navigator against the client's class centroids",
        [
            ("mu-centroid-distance", "||mu_k - upsilon_k||"),
            ("centroid-norm", "||upsilon_k||"),
            ("mu-norm", "||mu_k||"),
        ],
        True,
    ),
    ("cos(mu_k, upsilon_k)", [("mu-centroid-cosine", "cosine")], False),
    ("the navigator's logit margin, true class - best other", [("logit-margin", "margin")], False),
    ("nu's distance from E: mean |A - 1|", [("covariance-deviation", "mean |A - 1|")], True),
    (
        "saturation of H: share with P_y > 0.99",
        [("saturated-fraction", "in training"), ("saturated-fraction-start", "round start")],
        False,
    ),
)


def read_rounds(run_dir: Path) -> list[dict]:
    """The lines of a run's `rounds.jsonl`; ValueError naming the file when there is none."""
    folder = RunFolder(run_dir)
    if not folder.rounds.exists():
        raise ValueError(f"{folder.rounds}: no such file; give a run's output-dir")
    return folder.read_rounds()


def accuracy_points(run_dir: Path, rows: list[dict] | None = None) -> tuple[list[int], list[float]]:
    """(rounds, personalized accuracy) of the rounds a run evaluated, its final evaluation
    (`summary.json`) included, also where its `rounds.jsonl` predates holding it; `rows`: its
    `rounds.jsonl` where already read."""
    rows = read_rounds(run_dir) if rows is None else rows
    points = {r["round"]: r[EVAL_MEAN] for r in rows if r.get(EVAL_MEAN) is not None}
    folder = RunFolder(run_dir)
    if folder.finished and (final := folder.read_summary()).get("mean-accuracy"):
        points[int(final["rounds"])] = final["mean-accuracy"]
    return sorted(points), [points[r] for r in sorted(points)]


def label_of(run_dir: Path) -> str:
    """A run's name in the legend: its folder's (`<run>` of `<run>/seed<n>`), or its method."""
    name = run_dir.parent.name if run_dir.name.startswith("seed") else run_dir.name
    folder = RunFolder(run_dir)
    return name or (folder.read_config().get("method", "?") if folder.config.exists() else "?")


STYLES = ("-", "--", ":")  # the keys of a panel; colours tell the runs apart


def dynamics_figure(
    run_dirs: Path | list[Path], to: Path, beside: list[Path] | None = None
) -> Path:
    """The accuracy of each run of `run_dirs` and of `beside`, then one panel per group of
    diagnostics (`PANELS`), the runs of `run_dirs` overlaid; ValueError when one of them has
    no diagnostics."""
    runs = [run_dirs] if isinstance(run_dirs, Path) else list(run_dirs)
    rows = {run: read_rounds(run) for run in runs}
    for run, lines in rows.items():
        if not any("grad-norm-shared" in r for r in lines):
            raise ValueError(f"{run}: its rounds.jsonl has no Phase 1 diagnostics (a pFedGM run)")
    fig, axes = plt.subplots(len(PANELS) + 1, 1, figsize=(7, 2.3 * (len(PANELS) + 1)), sharex=True)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, folder in enumerate([*runs, *(beside or [])]):
        rounds, accuracy = accuracy_points(folder, rows.get(folder))
        axes[0].plot(
            rounds,
            accuracy,
            marker="o",
            ms=3,
            label=label_of(folder),
            color=colours[i % len(colours)],
        )
    axes[0].set(title="personalized accuracy (%)")
    axes[0].legend(fontsize=7)
    for ax, (title, keys, log) in zip(axes[1:], PANELS, strict=True):
        for i, (run, lines) in enumerate(rows.items()):
            for (key, label), style in zip(keys, STYLES, strict=False):
                points = [(r["round"], r[key]) for r in lines if r.get(key) is not None]
                name = label if len(runs) == 1 else f"{label_of(run)}: {label}"
                ax.plot(
                    [p[0] for p in points],
                    [p[1] for p in points],
                    style,
                    label=name,
                    color=colours[i % len(colours)],
                )
        ax.set(title=title, yscale="log" if log else "linear")
        ax.legend(fontsize=6)
    axes[-1].set(xlabel="round")
    fig.tight_layout()
    to.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(to, dpi=110)
    plt.close(fig)
    return to


# (key, header, scale) of the table's columns after the accuracy; fractions as percentages
COLUMNS = (
    ("loss-shared", "H", 1),
    ("loss-personalized", "R_c", 1),
    ("saturated-fraction", "P_y > 0.99, training (%)", 100),
    ("saturated-fraction-start", "P_y > 0.99, round start (%)", 100),
    ("grad-share-personalized", "lambda R_c's share of the gradient (%)", 100),
    ("z-norm", "mean \\|z\\|", 1),
    ("mu-norm", "mean \\|mu_k\\|", 1),
    ("within-class-variance", "within-class variance", 1),
    ("covariance-norm", "\\|A\\|", 1),
    ("mu-centroid-distance", "\\|mu_k - upsilon_k\\|", 1),
    ("mu-centroid-cosine", "cos(mu_k, upsilon_k)", 1),
    ("centroid-norm", "\\|upsilon_k\\|", 1),
    ("logit-margin", "logit margin", 1),
    ("covariance-deviation", "mean \\|A - 1\\|", 1),
)
# The within-class spread relative to z's scale, d * variance / (mean ||z||)^2: what stays when
# a run only rescales z (R_c shrinks z as a whole as readily as it tightens its classes). The
# runs do not record d (`generator.dim`: 128 for the CIFAR and EMNIST CNNs, 512 TinyImageNet's),
# so the caller gives it and the header shows it.
SPREAD = "relative spread (d = {d})"


def relative_spread(row: dict, d: int) -> float | None:
    variance, norm = row.get("within-class-variance"), row.get("z-norm")
    return None if variance is None or not norm else d * variance / norm**2


def _cell(run_dir: Path) -> str:
    """`<column> <run>` of `<out>/<column>/<run>/seed<n>`, else its legend's name."""
    column = run_dir.parent.parent.name if run_dir.name.startswith("seed") else ""
    return f"{column} {label_of(run_dir)}".strip()


def dynamics_table(run_dirs: list[Path], at: list[int] | None = None, d: int = 128) -> str:
    """Phase 1's diagnostics of each run at the rounds `at` (default: the rounds it evaluated),
    with its personalized accuracy there and the relative within-class spread for features of
    dimension `d` (`SPREAD`), as a Markdown table; ValueError when a run has no diagnostics or
    none of the rounds."""
    lines = [
        "| run | round | accuracy (%) | "
        + " | ".join(h for _, h, _ in COLUMNS)
        + f" | {SPREAD.format(d=d)} |",
        "|---|---:|---:|" + "---:|" * (len(COLUMNS) + 1),
    ]
    for run in run_dirs:
        every_round = read_rounds(run)
        rows = {r["round"]: r for r in every_round if "grad-norm-shared" in r}
        if not rows:
            raise ValueError(f"{run}: its rounds.jsonl has no Phase 1 diagnostics (a pFedGM run)")
        accuracy = dict(zip(*accuracy_points(run, every_round), strict=True))
        wanted = sorted(accuracy) if at is None else at
        if not (found := [r for r in wanted if r in rows]):
            raise ValueError(f"{run}: none of the rounds {wanted} is in its rounds.jsonl")
        for r in found:
            acc = f"{accuracy[r]:.2f}" if r in accuracy else "-"
            cells = [_number(rows[r].get(key), scale) for key, _, scale in COLUMNS]
            cells.append(_number(relative_spread(rows[r], d), 1))
            lines.append(f"| {_cell(run)} | {r} | {acc} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _number(value: float | None, scale: float) -> str:
    return "-" if value is None else f"{value * scale:.3g}"

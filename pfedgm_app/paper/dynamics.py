"""Phase 1's dynamics against round, from a pFedGM run's `rounds.jsonl` (`diagnostics.KEYS`),
beside the personalized accuracy of other runs (e.g. pFedFDA's on the same cell).

    pfedgm-paper dynamics RUN_DIR --beside OTHER_RUN_DIR --to dynamics.png
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

from ..plots import EVAL_MEAN  # noqa: E402
from ..run_folder import RunFolder  # noqa: E402

# (title, [(key, label)], log scale): the panels after the accuracy panel
PANELS = (
    ("H and R_c (round means)", [("loss-shared", "H"), ("loss-personalized", "R_c")], True),
    ("gradient on phi (round start)",
     [("grad-norm-shared", "|grad H|"), ("grad-norm-personalized", "|grad lambda R_c|")], True),
    ("share of lambda R_c in the gradient", [("grad-share-personalized", "share")], False),
    ("norms", [("z-norm", "mean ||z||"), ("mu-norm", "mean ||mu_k||"),
               ("covariance-norm", "||A||")], True),
    ("within-class variance of z (per coordinate)", [("within-class-variance", "variance")],
     True),
    ("saturation of H: share with P_y > 0.99",
     [("saturated-fraction", "in training"), ("saturated-fraction-start", "round start")],
     False),
)  # fmt: skip


def read_rounds(run_dir: Path) -> list[dict]:
    """The lines of a run's `rounds.jsonl`; ValueError naming the file when there is none."""
    folder = RunFolder(run_dir)
    if not folder.rounds.exists():
        raise ValueError(f"{folder.rounds}: no such file; give a run's output-dir")
    return folder.read_rounds()


def accuracy_points(run_dir: Path) -> tuple[list[int], list[float]]:
    """(rounds, personalized accuracy) of the rounds a run evaluated, its final evaluation
    (`summary.json`) included, also where its `rounds.jsonl` predates holding it."""
    points = {
        r["round"]: r[EVAL_MEAN] for r in read_rounds(run_dir) if r.get(EVAL_MEAN) is not None
    }
    folder = RunFolder(run_dir)
    if folder.finished and (final := folder.read_summary()).get("mean_accuracy"):
        points[int(final["rounds"])] = final["mean_accuracy"]
    return sorted(points), [points[r] for r in sorted(points)]


def label_of(run_dir: Path) -> str:
    folder = RunFolder(run_dir)
    return folder.read_config().get("method", run_dir.name) if folder.config.exists() else (
        run_dir.name)  # fmt: skip


def dynamics_figure(run_dir: Path, to: Path, beside: list[Path] | None = None) -> Path:
    """The accuracy of `run_dir` and of each run in `beside`, then one panel per group of
    diagnostics of `run_dir` (`PANELS`); ValueError when the run has no diagnostics."""
    rows = read_rounds(run_dir)
    if not any("grad-norm-shared" in r for r in rows):
        raise ValueError(f"{run_dir}: its rounds.jsonl has no Phase 1 diagnostics (a pFedGM run)")
    fig, axes = plt.subplots(len(PANELS) + 1, 1, figsize=(7, 2.3 * (len(PANELS) + 1)),
                             sharex=True)  # fmt: skip
    for folder in [run_dir, *(beside or [])]:
        rounds, accuracy = accuracy_points(folder)
        axes[0].plot(rounds, accuracy, marker="o", ms=3, label=label_of(folder))
    axes[0].set(title="personalized accuracy (%)")
    axes[0].legend(fontsize=7)
    for ax, (title, keys, log) in zip(axes[1:], PANELS, strict=True):
        for key, label in keys:
            points = [(r["round"], r[key]) for r in rows if r.get(key) is not None]
            ax.plot([p[0] for p in points], [p[1] for p in points], label=label)
        ax.set(title=title, yscale="log" if log else "linear")
        ax.legend(fontsize=7)
    axes[-1].set(xlabel="round")
    fig.tight_layout()
    to.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(to, dpi=110)
    plt.close(fig)
    return to

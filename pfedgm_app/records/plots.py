"""Figures of a run, from what it wrote: `accuracy.png` (loss and personalized accuracy per
round)."""

from __future__ import annotations

from pathlib import Path

from .run_folder import RunFolder

EVAL_MEAN, EVAL_STD = "personalized-accuracy", "personalized-std"  # evaluation keys per round


def plot_rounds(run_dir: Path, title: str) -> Path:
    """`accuracy.png`: the training loss per round and the personalized test accuracy
    (mean and std across clients) at every evaluation in `rounds.jsonl` (the final one
    included), against the round."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    folder = RunFolder(run_dir)
    rows = folder.read_rounds()
    losses = [(r["round"], r["loss"]) for r in rows if "loss" in r]
    points = [(r["round"], r[EVAL_MEAN], r[EVAL_STD]) for r in rows if r.get(EVAL_MEAN) is not None]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(6, 6), sharex=True)
    if points:
        x, mean, std = zip(*points, strict=True)
        low = [m - s for m, s in zip(mean, std, strict=True)]
        high = [m + s for m, s in zip(mean, std, strict=True)]
        top.plot(x, mean, marker="o")
        top.fill_between(x, low, high, alpha=0.2)
    top.set(ylabel="personalized test accuracy (%)", title=title)
    if losses:
        bottom.plot(*zip(*losses, strict=True), marker=".")
    bottom.set(xlabel="round", ylabel="training loss (mean over clients)")
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    path = folder.plot
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path


def dataset_label(dataset: str) -> str:
    """A dataset's short name for titles: the last part of its path or hub id."""
    return dataset.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1]

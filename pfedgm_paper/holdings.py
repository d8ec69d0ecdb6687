"""What a client holds on a subset of the paper's data, against a pool of the paper's size.

A Dirichlet partition spreads each class over the clients, so a pool a quarter the paper's
gives a client fewer images of each class it holds, not only fewer images: a method that fits
a client's own class statistics (a local head, class prototypes, a local Gaussian) fits them
from these counts, and a client's test image of a class it trains on with no image or one or
two is one only the shared part of a model can place. The paper's size is read the same way:
the local copy's class shares scaled to the paper's count, partitioned by the paper's preset
(the same rule, seed and floor, `data.label_partition`): what a client held in the paper's
runs, but for the draw.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median

import numpy as np

from pfedgm_app.data import Protocol, client_train_test, label_partition, load_pool
from pfedgm_app.runconfig.common import RunConfig
from pfedgm_app.runconfig.presets import PRESETS
from pfedgm_app.runconfig.settings import ConfigError

from .cells import SUBSET_IMAGES
from .marks import header

THIN = 2  # a class a client trains on with this many images or fewer is thin


@dataclass(frozen=True)
class Holding:
    """A partition's clients, over their medians; the test shares pooled over clients (%)."""

    pooled: int
    train_images: float
    classes: float  # a client trains on
    per_class: float  # a client's training images a class it holds
    unseen: float  # test images of a class the client has no training image of
    thin: float  # test images of a class it has 1 to THIN training images of


def scaled(labels: np.ndarray, total: int) -> np.ndarray:
    """A label vector of `total` images with `labels`' class shares (largest remainders)."""
    counts = np.bincount(labels)
    exact = counts * total / counts.sum()
    whole = np.floor(exact).astype(np.int64)
    whole[np.argsort(whole - exact)[: total - whole.sum()]] += 1
    return np.repeat(np.arange(len(counts)), whole)


def holding(labels: np.ndarray, protocol: Protocol) -> Holding:
    """What `protocol`'s clients hold when it partitions a pool of `labels`."""
    sizes, classes, per_class = [], [], []
    tests, unseen, thin = 0, 0, 0
    num_classes = int(labels.max()) + 1
    for pid, idx in enumerate(label_partition(labels, protocol)):
        train, test = client_train_test(idx, protocol, pid)
        held = np.bincount(labels[train], minlength=num_classes)
        sizes.append(len(train))
        classes.append(int((held > 0).sum()))
        per_class.append(float(np.median(held[held > 0])))
        of_test = held[labels[test]]
        tests += len(test)
        unseen += int((of_test == 0).sum())
        thin += int(((of_test > 0) & (of_test <= THIN)).sum())
    return Holding(
        len(labels),
        median(sizes),
        median(classes),
        median(per_class),
        100 * unseen / tests,
        100 * thin / tests,
    )


def protocol_of(preset: str) -> Protocol:
    """The clients of `preset` at its keys and the run-config's defaults (seed 0)."""
    config = RunConfig.from_run_config(PRESETS[preset].keys)
    return Protocol.of(config, PRESETS[preset].num_supernodes)


def holdings(column: str, dataset: str) -> tuple[Holding, Holding]:
    """(here: the column's offline preset on the local copy, the paper's size: its preset on
    the local class shares scaled to the paper's count)."""
    here = protocol_of(f"{column}-offline")
    labels = load_pool(here.dataset).labels
    paper = scaled(labels, SUBSET_IMAGES[dataset][1])
    return holding(labels, here), holding(paper, protocol_of(column))


def holding_lines(column: str, dataset: str) -> list[str]:
    """A Markdown table of `holdings`, headed by what it reads; one line where the local copy
    is not here to partition."""
    try:
        rows = zip(("here", "the paper's size"), holdings(column, dataset), strict=True)
    except ConfigError:  # its message names this machine's folders: not for a committed page
        return [f"{column}: what a client holds is read from the local copy, {dataset}: not here"]
    return [
        f"{column}: what a client holds (medians over clients, seed 0), here and in a pool of "
        "the paper's size partitioned alike; its test images of a class it has no training "
        f"image of, and of one with 1 to {THIN}:",
        "",
        *header(
            ("images pooled", "training images", "classes", "images a class", "unseen %", "thin %")
        ),
        *(
            f"| {name} | {h.pooled:,} | {h.train_images:.0f} | {h.classes:.0f} | "
            f"{h.per_class:.1f} | {h.unseen:.1f} | {h.thin:.1f} |"
            for name, h in rows
        ),
    ]

"""Each method's accuracy against its clients' training images, on a column whose data is a
subset of the paper's.

The local EMNIST copy gives a client about 116 images where the paper's data gives about 814
(TinyImageNet: 300 where 1,200): a method that needs many images of its own loses more on the
subset. A column's clients already differ in size (a Dirichlet partition draws how much of each
class a client holds), so its runs tell how each method's accuracy grows with a client's images:
per method, the test-size-weighted mean accuracy of the clients in each quartile of training
images (the column's quartiles: one seed partitions the clients alike for every method), and
the weighted least-squares slope of accuracy on log2(images), in points a doubling. Across
clients size goes with the label mix, so this is an association, not an experiment; the slope
times log2 of the paper's images over ours reads what the subset costs a method only where
the trend held beyond our largest clients. Under each column's table, what a client holds
there and at the paper's size (`holdings`): the counts that make a client's own images few.
"""

from __future__ import annotations

import math
from statistics import quantiles

from .cells import SUBSET_IMAGES, SUBSETS, Cell
from .holdings import holding_lines
from .marks import header
from .rows import Table

# {(seed, partition-id): (accuracy in percent, test-set size, training images)}
Sized = dict[tuple[int, int], tuple[float, int, int]]


def sized_clients(cell: Cell) -> Sized:
    """The cell's clients that record their training images, with them."""
    return {
        key: (acc, weight, cell.train_images[key])
        for key, (acc, weight) in cell.per_client.items()
        if key in cell.train_images
    }


def slope_per_doubling(clients: Sized) -> tuple[float, float] | None:
    """Weighted least squares of accuracy on log2(images), weights the test sizes: (the
    accuracy points a doubling of a client's images goes with, its standard error with the
    clients independent: the sandwich sqrt(sum w^2 (x - x_bar)^2 r^2) / Sxx, as `paired` weighs
    its gaps); None without two sizes."""
    points = [(math.log2(n), acc, w) for acc, w, n in clients.values() if n > 0 and w > 0]
    if len({x for x, _, _ in points}) < 2:
        return None
    total = sum(w for _, _, w in points)
    x_bar = sum(x * w for x, _, w in points) / total
    y_bar = sum(y * w for _, y, w in points) / total
    sxx = sum(w * (x - x_bar) ** 2 for x, _, w in points)
    slope = sum(w * (x - x_bar) * (y - y_bar) for x, y, w in points) / sxx
    residual = [(x, y - y_bar - slope * (x - x_bar), w) for x, y, w in points]
    se = math.sqrt(sum((w * (x - x_bar) * r) ** 2 for x, r, w in residual)) / sxx
    return slope, se


def quartile_of(images: int, edges: list[float]) -> int:
    """0 to 3: how many of the column's quartile edges lie below `images`."""
    return sum(images > edge for edge in edges)


def quartile_means(clients: Sized, edges: list[float]) -> dict[int, float]:
    """{quartile: the test-size-weighted mean accuracy of its clients}, quartiles with clients."""
    sums: dict[int, list[float]] = {}
    for acc, w, n in clients.values():
        q = sums.setdefault(quartile_of(n, edges), [0.0, 0.0])
        q[0] += acc * w
        q[1] += w
    return {q: s / w for q, (s, w) in sorted(sums.items()) if w > 0}


def _subset(cells: dict[tuple[str, str], Cell], column: str) -> str | None:
    """The dataset of `column`'s runs where it is one of `SUBSETS`, else None."""
    for dataset, text in SUBSETS.items():
        if any(col == column and text in cell.differences for (_, col), cell in cells.items()):
            return dataset
    return None


def size_lines(table: Table, cells: dict, columns: tuple[str, ...]) -> list[str]:
    """Per column on a subset of the paper's data: each method by its clients' quartile of
    training images, and its slope a doubling."""
    lines: list[str] = []
    for column in columns:
        if (dataset := _subset(cells, column)) is None:
            continue
        rows = {
            row.label: sized_clients(cells[(row.name, column)])
            for row in table.rows
            if (row.name, column) in cells
        }
        sizes = {k: n for clients in rows.values() for k, (_, _, n) in clients.items()}
        if len(set(sizes.values())) < 2:
            continue
        edges = quantiles(sizes.values(), n=4)
        members: dict[int, list[int]] = {}
        for n in sorted(sizes.values()):
            members.setdefault(quartile_of(n, edges), []).append(n)
        spans = {q: (ns[0], ns[-1], len(ns)) for q, ns in sorted(members.items())}
        heads = tuple(f"{lo}-{hi} ({count})" for lo, hi, count in spans.values())
        ours, paper, _ = SUBSET_IMAGES[dataset]
        lines += [
            f"{column}: accuracy by the client's training images (the quartiles of the "
            f"column's clients: images, clients over seeds; test-size weighted), and the slope "
            f"a doubling of them; the paper's data holds {paper / ours:.1f} times ours "
            f"({math.log2(paper / ours):.2f} doublings):",
            "",
            *header((*heads, "a doubling")),
        ]
        for label, clients in rows.items():
            means = quartile_means(clients, edges)
            fit = slope_per_doubling(clients)
            texts = [f"{means[q]:.2f}" if q in means else "-" for q in spans]
            texts.append("-" if fit is None else f"{fit[0]:+.2f} (se {fit[1]:.2f})")
            lines.append(f"| {label} | " + " | ".join(texts) + " |")
        lines += ["", *holding_lines(column, dataset), ""]
    return lines[:-1]

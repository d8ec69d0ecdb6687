"""Our order of a column's methods against the paper's.

Where a column's data is not the paper's (the local EMNIST and TinyImageNet subsets: fewer
images a client) or its budget differs, our absolute numbers do not compare with the paper's;
the order of the methods can. Per column, over the methods both report: the pairs ranked as
the paper ranks them (and Kendall's tau-a, their share minus the share ranked the other way),
where the paper's best method stands among ours, and each method's shift, ours minus the
paper's: what the subset or protocol does to every method. A column needs `MIN_METHODS` to
say anything of an order.
"""

from __future__ import annotations

from itertools import combinations
from statistics import median

from .cells import Cell
from .marks import header
from .published import PUBLISHED
from .rows import Table

MIN_METHODS = 4


def pairs_in_order(ours: dict[str, float], paper: dict[str, float]) -> tuple[int, int, int]:
    """(pairs ranked as the paper ranks them, pairs ranked the other way, pairs in all) over
    the names in both; a tie on either side is neither."""
    names = sorted(ours.keys() & paper.keys())
    agree = disagree = 0
    for a, b in combinations(names, 2):
        product = (ours[a] - ours[b]) * (paper[a] - paper[b])
        agree += product > 0
        disagree += product < 0
    return agree, disagree, len(names) * (len(names) - 1) // 2


def _means(table: Table, cells: dict[tuple[str, str], Cell], column: str) -> tuple[dict, dict]:
    published = PUBLISHED.get(table.name, {})
    ours, paper = {}, {}
    for row in table.rows:
        cell, printed = cells.get((row.name, column)), published.get(row.name, {}).get(column)
        if cell is not None and printed is not None:
            ours[row.label], paper[row.label] = cell.mean, printed[0]
    return ours, paper


def order_lines(
    table: Table, cells: dict[tuple[str, str], Cell], columns: tuple[str, ...]
) -> list[str]:
    """The order table (one row per column with `MIN_METHODS` methods in both), then each
    method's shift per column; [] where no column has enough."""
    found = {c: m for c in columns if len((m := _means(table, cells, c))[0]) >= MIN_METHODS}
    if not found:
        return []
    lines = [
        "Our order of the methods against the paper's, over the methods both report (the "
        "shift: ours minus the paper's, in points):",
        "",
        "| | methods | pairs in the paper's order | Kendall's tau | the paper's best, "
        "our rank | shift: median (lowest, highest) |",
        "|---|---|---|---|---|---|",
    ]
    for column, (ours, paper) in found.items():
        agree, disagree, pairs = pairs_in_order(ours, paper)
        best = max(paper, key=paper.__getitem__)
        rank = 1 + sum(v > ours[best] for v in ours.values())
        shifts = [ours[m] - paper[m] for m in ours]
        lines.append(
            f"| {column} | {len(ours)} | {agree} of {pairs} | {(agree - disagree) / pairs:+.2f} "
            f"| {best}, {rank} of {len(ours)} | {median(shifts):+.2f} "
            f"({min(shifts):+.2f}, {max(shifts):+.2f}) |"
        )
    methods = [r.label for r in table.rows if any(r.label in o for o, _ in found.values())]
    lines += ["", "Each method's shift, ours minus the paper's:", "", *header(tuple(found))]
    for label in methods:
        texts = [f"{o[label] - p[label]:+.2f}" if label in o else "-" for o, p in found.values()]
        lines.append(f"| {label} | " + " | ".join(texts) + " |")
    return lines

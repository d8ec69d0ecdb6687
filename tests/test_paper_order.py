"""Our order of a column's methods against the paper's (`pfedgm_paper.order`): the pairs in
the paper's order and Kendall's tau-a against their definitions, and each method's shift."""

from __future__ import annotations

from itertools import combinations

from pfedgm_paper.cells import Cell
from pfedgm_paper.grid import TABLES
from pfedgm_paper.order import MIN_METHODS, order_lines, pairs_in_order
from pfedgm_paper.published import PUBLISHED


def test_pairs_in_order_counts_concordant_and_discordant_pairs_ties_in_neither():
    paper = {"a": 4.0, "b": 3.0, "c": 2.0, "d": 1.0}
    assert pairs_in_order(paper, paper) == (6, 0, 6)
    assert pairs_in_order({k: -v for k, v in paper.items()}, paper) == (0, 6, 6)
    ours = {"a": 4.0, "b": 1.0, "c": 2.0, "d": 2.0, "e": 9.0}  # e: not the paper's
    # a>b a>c a>d agree; b<c b<d disagree; c = d a tie in ours: neither
    assert pairs_in_order(ours, paper) == (3, 2, 6)
    brute = [(ours[x] - ours[y]) * (paper[x] - paper[y]) for x, y in combinations("abcd", 2)]
    assert (sum(p > 0 for p in brute), sum(p < 0 for p in brute)) == (3, 2)


def _cell(mean: float) -> Cell:
    return Cell(mean, 1.0, [0], 200, 1.0, 1.0, {})


def test_order_lines_rank_the_papers_best_and_shift_every_method_by_the_papers_number():
    table = TABLES["standard"]
    column = "cifar10-dir05"
    paper = {r.name: PUBLISHED["standard"][r.name][column][0] for r in table.rows}
    names = sorted(paper, key=paper.__getitem__)[:MIN_METHODS]  # the paper's 4 lowest
    # ours: the paper's numbers 2 points down, the two lowest swapped
    ours = {n: paper[n] - 2 for n in names}
    ours[names[0]], ours[names[1]] = ours[names[1]], ours[names[0]]
    cells = {(n, column): _cell(v) for n, v in ours.items()}
    lines = order_lines(table, cells, (column,))
    label = {r.name: r.label for r in table.rows}
    row = next(line for line in lines if line.startswith(f"| {column} |"))
    best = label[names[-1]]
    assert f"| {MIN_METHODS} | 5 of 6 | +0.67 | {best}, 1 of {MIN_METHODS} |" in row
    shifts = sorted(ours[n] - paper[n] for n in names)
    assert f"{(shifts[1] + shifts[2]) / 2:+.2f} ({shifts[0]:+.2f}, {shifts[-1]:+.2f})" in row
    shift = next(line for line in lines if line.startswith(f"| {label[names[0]]} |"))
    assert shift == f"| {label[names[0]]} | {ours[names[0]] - paper[names[0]]:+.2f} |"
    # fewer methods than MIN_METHODS: no order to speak of
    assert order_lines(table, dict(list(cells.items())[: MIN_METHODS - 1]), (column,)) == []

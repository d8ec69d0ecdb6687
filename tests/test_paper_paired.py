"""The paired per-client differences of the paper's tables (`pfedgm_paper.paired`): the
weighted mean of the differences, its standard error in closed form, and the pairs over seeds."""

from __future__ import annotations

import pytest

from pfedgm_paper.paired import paired_gap, per_seed


def test_paired_gap_matches_the_weighted_means_and_the_closed_form_standard_error():
    a = {(0, 0): (90.0, 10), (0, 1): (80.0, 30), (0, 2): (70.0, 60), (0, 9): (50.0, 5)}
    b = {(0, 0): (85.0, 10), (0, 1): (82.0, 30), (0, 2): (66.0, 60)}  # client 9: not in b
    gap = paired_gap(a, b)

    def mean(r):
        return sum(r[0, i][0] * r[0, i][1] for i in (0, 1, 2)) / 100

    assert gap.gap == pytest.approx(mean(a) - mean(b))  # the summaries' weighted means, paired
    d = [5.0, -2.0, 4.0]
    want = sum((w * (di - gap.gap)) ** 2 for w, di in zip([10, 30, 60], d, strict=True)) ** 0.5
    assert gap.se == pytest.approx(want / 100)
    assert (gap.wins, gap.losses, gap.pairs, gap.seeds) == (2, 1, 3, 1)
    # equal weights: the standard error of a mean, std / sqrt(n)
    equal = paired_gap(
        {(0, i): (float(i), 1) for i in range(4)}, {(0, i): (0.0, 1) for i in range(4)}
    )
    assert equal.se == pytest.approx((sum((i - 1.5) ** 2 for i in range(4)) / 4) ** 0.5 / 2)


def test_pairs_pool_over_seeds_and_each_seed_keeps_its_own_gap():
    a = {(0, 0): (60.0, 1), (0, 1): (70.0, 1), (1, 0): (50.0, 1), (1, 1): (40.0, 1)}
    b = {(0, 0): (50.0, 1), (0, 1): (60.0, 1), (1, 0): (55.0, 1), (1, 1): (45.0, 1)}
    pooled = paired_gap(a, b)
    assert (pooled.gap, pooled.pairs, pooled.seeds) == (pytest.approx(2.5), 4, 2)
    seeds = per_seed(a, b)
    assert {s: g.gap for s, g in seeds.items()} == {0: 10.0, 1: -5.0}
    assert paired_gap(a, {(2, 0): (1.0, 1)}) is None  # no client in common

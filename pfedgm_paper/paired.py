"""Paired per-client differences between two rows of a table, over seeds.

Two runs of one seed train the same clients (the partition and the sampled rounds come from the
seed), so a client's accuracy under A minus under B removes the spread between clients, which
dominates each method's own std. Over seeds, every (seed, client) pair is one difference.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# {(seed, partition-id): (accuracy in percent, test-set size)}
PerClient = dict[tuple[int, int], tuple[float, int]]


@dataclass(frozen=True)
class Gap:
    """A - B: the test-size-weighted mean of the differences d_i, its standard error with the
    clients independent, se = sqrt(sum w_i^2 (d_i - gap)^2) / sum w_i, and the clients (pairs)
    where A is above, below."""

    gap: float
    se: float
    wins: int
    losses: int
    pairs: int
    seeds: int

    def text(self) -> str:
        return f"{self.gap:+.2f} (se {self.se:.2f}, {self.wins} up / {self.losses} down)"


def paired_gap(a: PerClient, b: PerClient) -> Gap | None:
    """A - B over the (seed, client) pairs both have; None when they share none."""
    ids = sorted(a.keys() & b.keys())
    if not ids:
        return None
    w = [a[i][1] for i in ids]
    d = [a[i][0] - b[i][0] for i in ids]
    total = sum(w)
    gap = sum(wi * di for wi, di in zip(w, d, strict=True)) / total
    se = math.sqrt(sum((wi * (di - gap)) ** 2 for wi, di in zip(w, d, strict=True))) / total
    wins, losses = sum(x > 0 for x in d), sum(x < 0 for x in d)
    return Gap(gap, se, wins, losses, len(ids), len({s for s, _ in ids}))


def per_seed(a: PerClient, b: PerClient) -> dict[int, Gap]:
    """The gap of each seed alone."""
    seeds = sorted({s for s, _ in a.keys() & b.keys()})

    def only(x: dict, s: int) -> dict:
        return {k: v for k, v in x.items() if k[0] == s}

    gaps = {s: paired_gap(only(a, s), only(b, s)) for s in seeds}
    return {s: g for s, g in gaps.items() if g is not None}  # each seed shares a pair

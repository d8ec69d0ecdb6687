"""How far one reply may move a round: no further than `clip_ratio` typical clients' steps,
whatever its direction, and never back by more than `pull_bound` of them (numpy only).

A reply's step in the weighted mean is its contribution w_i (x_i - x) / W (x: the arrays sent,
W: the weights' sum). Both bounds act on the contribution, in units of the round's typical one,
so that neither a long update nor a large weight buys more than a typical client's step:

- **Size, needing no detection** (Sun et al. 2019's norm bounding, weighted): on every array
  key, a contribution whose norm exceeds `clip_ratio` times the round's median contribution on
  that key is scaled down to it. Per key, so that a reply cannot spend its whole budget on one
  small array (pFedGM's navigator psi or covariance nu beside the generator phi): every key of
  every method moves at most `clip_ratio` typical clients' steps. With equal weights it is
  the plain norm clip on each array. Weights are the bounded ones (`admission`); with an
  unweighted aggregator they are all 1.
- **Direction**: a contribution's pull is its projection on the direction of the others'
  aggregate step (their contributions summed), in typical contribution lengths: what it
  does to the round's progress, from the first round with two replies. One that takes back
  more than `pull_bound` is scaled down until it takes back exactly that much. A step of
  typical length can take back at most one typical step, so with `clip_ratio` 1 the pull
  bound only adds to a longer clip.
- **Shares**: each reply's share of the aggregate step, ||c_i|| / sum_j ||c_j|| after both
  bounds (1/n each where all are alike), for the run's records.

The typical contribution of a key is the median over the round's replies that hold it (at
least 3); a round of fewer takes the median of the last `NORM_HISTORY` rounds that had one;
before any, two replies take the smaller of theirs (the larger cannot raise its own bound)
and a lone reply is used as sent. A contribution under its bound is used to the last bit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

NORM_HISTORY = 5  # rounds whose median contribution bounds a round of fewer than 3 replies
# An update this many times a typical one's whole length is named (`suspects`), whatever its
# weight: no honest round measured reached it (docs/robustness.md), where a clip at c near 1
# scales half of the honest replies every round and names none. On the whole update, not per
# key: a small array's honest steps differ by more (one honest MNIST reply of six, 5.x).
LONG = 5.0
SAMPLED_COORDINATES = 1 << 14  # the pulls read every k-th coordinate, at most this many


@dataclass
class Influence:
    """What the bounds did to a round's replies (indices into the round's records)."""

    clipped: list[int] = field(default_factory=list)  # scaled on at least one key
    long: list[int] = field(default_factory=list)  # an update over `LONG` typical lengths
    ratio: float = 0.0  # the largest contribution / typical one on any key, as sent
    bounded: list[int] = field(default_factory=list)  # scaled to the pull bound
    pulls: list[float] = field(default_factory=list)  # each one's pull after the clip
    shares: list[float] = field(default_factory=list)  # each one's share of the step


def bound_influence(
    weights: list[float],
    records: list[dict[str, np.ndarray]],
    sent: dict[str, np.ndarray] | None,
    clip_ratio: float,
    pull_bound: float,
    history: dict[str, list[float]],
) -> tuple[list[dict[str, np.ndarray]], Influence]:
    """(the records with every contribution bounded, what was done). `history` (updated in
    place): key -> the median contributions of its last rounds of at least 3 replies."""
    if sent is None or not records:
        return records, Influence()
    typical_weight = float(np.median(weights))
    if typical_weight <= 0:
        return records, Influence()
    relative = [w / typical_weight for w in weights]
    records, influence = clip_contributions(relative, records, sent, clip_ratio, history)
    flat = flat_updates(records, sent) * np.asarray(relative)[:, None]
    lengths = np.linalg.norm(flat, axis=1)
    influence.pulls = pulls(flat, typical(list(lengths), None))
    if pull_bound:
        bounded = [i for i, p in enumerate(influence.pulls) if p < -pull_bound]
        for i in bounded:
            factor = pull_bound / -influence.pulls[i]
            records[i] = scaled(records[i], sent, factor)
            lengths[i] *= factor
        influence.bounded = bounded
    total = float(lengths.sum())
    influence.shares = [float(x) / total if total > 0 else 1 / len(records) for x in lengths]
    return records, influence


def clip_contributions(
    relative: list[float],
    records: list[dict[str, np.ndarray]],
    sent: dict[str, np.ndarray],
    clip_ratio: float,
    history: dict[str, list[float]],
) -> tuple[list[dict[str, np.ndarray]], Influence]:
    """Each key of each record scaled so that its contribution is at most `clip_ratio` times
    the key's typical one (`clip_ratio` 0: ratios measured, nothing scaled); the records whose
    whole update, unweighted, is more than `LONG` typical lengths named in `long`."""
    out, influence = [dict(r) for r in records], Influence()
    squares = [0.0] * len(records)  # each update's squared length over every key
    for key in sorted(sent):
        held = [i for i, r in enumerate(records) if key in r]
        if not held:
            continue
        base = sent[key].astype(np.float64)
        norms = [float(np.linalg.norm(records[i][key] - base)) for i in held]
        lengths = [relative[i] * n for i, n in zip(held, norms, strict=True)]
        for i, n in zip(held, norms, strict=True):
            squares[i] += n * n
        if len(held) >= 3:
            history[key] = [*history.get(key, []), float(np.median(lengths))][-NORM_HISTORY:]
        bound = typical(lengths, history.get(key))
        if not bound:
            continue
        influence.ratio = max(influence.ratio, max(lengths) / bound)
        if not clip_ratio:
            continue
        for i, length in zip(held, lengths, strict=True):
            if length > clip_ratio * bound:
                scale = clip_ratio * bound / length
                out[i][key] = scaled({key: records[i][key]}, sent, scale)[key]
                influence.clipped.append(i)
    influence.clipped = sorted(set(influence.clipped))
    lengths = [float(np.sqrt(x)) for x in squares]
    if (raw := typical(lengths, None)) is not None:
        influence.long = [i for i, n in enumerate(lengths) if n > LONG * raw]
    return out, influence


def typical(lengths: list[float], history: list[float] | None) -> float | None:
    """The typical contribution among `lengths`: their median with 3 or more, else the median
    of `history`, else the smaller of two; None for a lone one, or a typical length of 0."""
    if len(lengths) >= 3:
        value = float(np.median(lengths))
    elif history:
        value = float(np.median(history))
    elif len(lengths) == 2:
        value = min(lengths)
    else:
        return None
    return value if value > 0 else None


def pulls(contributions: np.ndarray, unit: float | None) -> list[float]:
    """Each row's projection on the direction of the sum of the other rows, in `unit` (the
    typical row length): how much of the others' step it adds (> 0) or takes back (< 0).
    All 0 with one row, no unit, or others that sum to 0."""
    if len(contributions) < 2 or not unit:
        return [0.0] * len(contributions)
    total = contributions.sum(axis=0)
    out = []
    for row in contributions:
        others = total - row
        length = float(np.linalg.norm(others))
        out.append(float(row @ others) / (length * unit) if length > 0 else 0.0)
    return out


def flat_updates(records: list[dict[str, np.ndarray]], sent: dict[str, np.ndarray]) -> np.ndarray:
    """(n, m) float64: each record's update (minus `sent`) over the keys every record holds,
    in sorted order, read every k-th coordinate so that m <= `SAMPLED_COORDINATES`: a strided
    sample, the same coordinates for every record, whose projections estimate the whole
    model's (to about 1/sqrt(m)) at a fraction of the cost of n medians over every value."""
    keys = sorted(set.intersection(*(set(r) for r in records)) & set(sent))
    total = sum(int(np.prod(sent[k].shape)) for k in keys)
    stride = max(1, -(-total // SAMPLED_COORDINATES))

    def sampled(arrays: dict[str, np.ndarray]) -> np.ndarray:  # one copy, then every k-th
        flat = np.concatenate([arrays[k].ravel() for k in keys] or [np.zeros(0)])
        return flat[::stride].astype(np.float64)

    base = sampled(sent)
    rows = [sampled(record) - base for record in records]
    return np.stack(rows)


def scaled(record: dict[str, np.ndarray], sent: dict[str, np.ndarray], scale: float) -> dict:
    """`record`'s update from `sent` times `scale`, each array in its own dtype."""
    return {k: (sent[k] + scale * (v - sent[k])).astype(v.dtype) for k, v in record.items()}

"""How the round's usable replies become the new global arrays: norm clipping relative to the
round, then a weighted mean, a trimmed mean or a coordinate-wise median (numpy + flwr only).

- Clipping: an update (a reply's arrays minus those sent) whose norm exceeds `clip_ratio` times
  the round's median update norm is scaled down to that norm, its direction kept, so that one
  client far from the others cannot take the model over. Honest rounds stay below the
  default ratio (the largest ratio of each round is in `rounds.jsonl`; docs/robustness.md),
  and an update under the bound is used as sent, to the last bit.
- With fewer than 3 replies a round has no median of its own: the bound is then taken from
  the median norms of the last rounds that had one (`NORM_HISTORY`); before any such round,
  two replies are bounded by the smaller of their norms (a large update cannot raise its own
  bound; a tiny one can only hold the round back, clipped and named), and a lone reply is
  used as sent (nothing to compare it with).
- Pull bounding (direction, not only size): an update that pulls against the round's
  consensus (`suspects.pulls`: its projection on the coordinate-wise median of the other
  updates, in typical update lengths) by more than `pull_bound` is scaled down until it pulls
  exactly that much, so that no client takes back more than about one client's push. Honest
  updates pull back by at most half a typical length (docs/robustness.md); a sign-flipped
  step 9 times as long pulls back 2 to 10, inside the norm clip.
- `AGGREGATIONS`: "mean" weighs each reply by its weight (FedAvg); "trimmed-mean" and
  "median" are Flower's `FedTrimmedAvg` and `FedMedian` per coordinate (unweighted, as
  Flower's), `trimmed-mean` cutting `trim_fraction` of the replies at each end; "krum",
  "multi-krum" and "bulyan" are Flower's `Krum`, `MultiKrum` and `Bulyan` strategies, run on
  the round's admitted, clipped, weight-bounded replies (`flower_robust`): Krum keeps the
  one update closest to its n - f - 2 nearest others, MultiKrum averages the n - f such
  updates by weight, Bulyan trims coordinate-wise among the n - 2f Krum picks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord

from pfedgm_app.runconfig.common import AGGREGATIONS

from .suspects import flat_updates, pulls

Transforms = Mapping[str, tuple[Callable, Callable]]


NORM_HISTORY = 5  # rounds whose median update norm bounds a round of fewer than 3 replies


def clip_updates(
    records: list[dict[str, np.ndarray]],
    sent: dict[str, np.ndarray] | None,
    clip_ratio: float,
    history: list[float] | None = None,
) -> tuple[list[dict[str, np.ndarray]], list[int], float]:
    """(records with every update above `clip_ratio` x the median norm scaled down to it, the
    indices of those clipped, the largest norm / median ratio). Norms over the keys each
    record shares with `sent` (the arrays the round sent, decoded). `history` (updated in
    place) holds the median norms of the last `NORM_HISTORY` rounds of at least 3 records: a
    round of fewer takes its median as the median; with no history yet, two records take the
    smaller norm and one is used unchanged."""
    history = [] if history is None else history
    if sent is None or not records or not clip_ratio:
        return records, [], 0.0
    norms = []
    for record in records:
        squares = [np.sum((v.astype(np.float64) - sent[k]) ** 2) for k, v in record.items()]
        norms.append(float(np.sqrt(sum(squares))))
    if len(records) >= 3:
        median = float(np.median(norms))
        history[:] = [*history, median][-NORM_HISTORY:]
    elif history:
        median = float(np.median(history))
    elif len(records) == 2:
        median = min(norms)
    else:
        return records, [], 0.0
    if median == 0:
        return records, [], 0.0
    bound, clipped, out = clip_ratio * median, [], []
    for i, (record, norm) in enumerate(zip(records, norms, strict=True)):
        if norm > bound:
            record = scaled(record, sent, bound / norm)
            clipped.append(i)
        out.append(record)
    return out, clipped, max(norms) / median


def bound_pulls(
    records: list[dict[str, np.ndarray]], sent: dict[str, np.ndarray] | None, pull_bound: float
) -> tuple[list[dict[str, np.ndarray]], list[int], list[float]]:
    """(records with every update that pulls below -`pull_bound` scaled down to pull exactly
    that much, the indices of those bounded, every update's pull as sent). With fewer than 3
    records there is no consensus: no pulls. `pull_bound` 0: pulls measured, none bounded."""
    if sent is None or len(records) < 3:
        return records, [], []
    pulled = pulls(flat_updates(records, sent))
    if not pull_bound:
        return records, [], pulled
    bounded = [i for i, pull in enumerate(pulled) if pull < -pull_bound]
    out = [scaled(r, sent, pull_bound / -pulled[i]) if i in bounded else r
           for i, r in enumerate(records)]  # fmt: skip
    return out, bounded, pulled


def scaled(record: dict[str, np.ndarray], sent: dict[str, np.ndarray], scale: float) -> dict:
    """`record`'s update from `sent` times `scale`, each array in its own dtype."""
    return {k: (sent[k] + scale * (v - sent[k])).astype(v.dtype) for k, v in record.items()}


def combine(
    weights: list[float],
    records: list[dict[str, np.ndarray]],
    aggregation: str = "mean",
    trim_fraction: float = 0.2,
    transforms: Transforms | None = None,
    byzantine_nodes: int = 1,
) -> dict[str, np.ndarray] | None:
    """The aggregate of each key over the records that hold it, each array of a key in
    `transforms` aggregated in the coordinates to(x) (in float64) and mapped back by back(),
    in its own dtype."""
    transforms = transforms or {}
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")
    dtypes = {k: v.dtype for r in records for k, v in r.items() if k in transforms}
    if transforms:
        to = {k: forward for k, (forward, _) in transforms.items()}
        records = [
            {k: to[k](v.astype(np.float64)) if k in to else v for k, v in r.items()}
            for r in records
        ]
    if aggregation == "mean":
        result = weighted_mean(list(zip(weights, records, strict=True)))
    elif aggregation in FLOWER_ROBUST:
        result = flower_robust(weights, records, aggregation, byzantine_nodes)
        if result is None:
            return None
    else:
        keys = {k for r in records for k in r}
        result = {}
        for key in keys:
            stacked = np.stack([r[key] for r in records if key in r])
            if aggregation == "trimmed-mean":
                value = trim_mean(stacked, trim_fraction)
            else:
                value = np.median(stacked, axis=0)
            result[key] = np.asarray(value).astype(stacked.dtype)
    for key, (_, back) in transforms.items():
        if key in result:
            result[key] = back(result[key]).astype(dtypes[key])
    return result


def flower_robust(
    weights: list[float],
    records: list[dict[str, np.ndarray]],
    aggregation: str,
    byzantine_nodes: int,
) -> dict[str, np.ndarray] | None:
    """The aggregate by Flower's own `Krum`, `MultiKrum` (selecting n - f) or `Bulyan`
    (`FLOWER_ROBUST`) of the records, each with its (bounded) weight, over the keys every
    record holds (a key only some hold: their weighted mean); None where the strategy finds
    too few replies for f (Bulyan: n < 4f + 3)."""
    from flwr.app import Message, MetricRecord, RecordDict
    from flwr.serverapp.strategy import Bulyan, Krum, MultiKrum

    common = sorted(set.intersection(*(set(r) for r in records)))
    n, f = len(records), byzantine_nodes
    strategy = {
        "krum": lambda: Krum(num_malicious_nodes=f),
        "multi-krum": lambda: MultiKrum(num_malicious_nodes=f, num_nodes_to_select=max(1, n - f)),
        "bulyan": lambda: Bulyan(num_malicious_nodes=f),
    }[aggregation]()
    replies = [
        Message(
            RecordDict(
                {
                    "arrays": ArrayRecord({k: Array(np.ascontiguousarray(r[k])) for k in common}),
                    "metrics": MetricRecord({"num-examples": w}),
                }
            ),
            dst_node_id=i,
            message_type="train",
        )
        for i, (w, r) in enumerate(zip(weights, records, strict=True))
    ]
    arrays, _ = strategy.aggregate_train(0, replies)
    if arrays is None:
        return None
    pairs = zip(weights, records, strict=True)
    rest = [(w, {k: v for k, v in r.items() if k not in common}) for w, r in pairs]
    dtypes = {k: records[0][k].dtype for k in common}
    return {
        **{k: v.numpy().astype(dtypes[k]) for k, v in arrays.items()},
        **weighted_mean([(w, r) for w, r in rest if r]),
    }


FLOWER_ROBUST = ("krum", "multi-krum", "bulyan")


def trim_mean(stacked: np.ndarray, cut_fraction: float) -> np.ndarray:
    """The mean over axis 0 without the `cut_fraction` lowest and highest values of each
    coordinate: Flower's `FedTrimmedAvg` definition (after scipy.stats.trim_mean), kept here
    because Flower's module-level function is not part of its public API."""
    low = int(cut_fraction * stacked.shape[0])
    high = stacked.shape[0] - low
    return np.mean(np.partition(stacked, (low, high - 1), axis=0)[low:high], axis=0)


def weighted_mean(items: list[tuple[float, Mapping[str, Any]]]) -> dict[str, Any]:
    """{key: sum_i w_i x_i / sum_i w_i} over the items that hold the key (numbers or numpy
    arrays). With every key in every item this is Flower's FedAvg arithmetic to the last bit
    (`strategy_utils.aggregate_arrayrecords`: factors w_i / W, accumulated in reply order)."""
    totals: dict[str, float] = {}
    for weight, values in items:
        for key in values:
            totals[key] = totals.get(key, 0.0) + weight
    means: dict[str, Any] = {}
    for weight, values in items:
        for key, value in values.items():
            x = value.numpy() if isinstance(value, Array) else value
            term = x * (weight / totals[key])
            means[key] = term if key not in means else means[key] + term
    return means


def merge_arrays(current: ArrayRecord | None, update: ArrayRecord | None) -> ArrayRecord | None:
    """`update` with every key it lacks taken from `current` (keys kept local stay as they were)."""
    if current is None:
        return update
    if update is None:
        return None  # nothing aggregated: FedAvg.start keeps the current arrays
    merged = {k: update[k] if k in update else v for k, v in current.items()}
    merged.update({k: v for k, v in update.items() if k not in merged})
    return ArrayRecord({k: Array(v.numpy()) for k, v in merged.items()})

"""How the round's usable replies become the new global arrays: norm clipping relative to the
round, then a weighted mean, a trimmed mean or a coordinate-wise median (numpy + flwr only).

- Clipping: an update (a reply's arrays minus those sent) whose norm exceeds `clip_ratio` times
  the round's median update norm is scaled down to that norm, its direction kept, so that one
  client far from the others cannot take the model over. An honest round stays far below the
  default ratio (the largest ratio of each round is in `rounds.jsonl`), and an update under
  the bound is used as sent, to the last bit.
- `AGGREGATIONS`: "mean" weighs each reply by its weight (FedAvg); "trimmed-mean" and
  "median" are Flower's `FedTrimmedAvg` and `FedMedian` per coordinate (unweighted, as
  Flower's), `trimmed-mean` cutting `trim_fraction` of the replies at each end.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord

from ..config import AGGREGATIONS

Transforms = Mapping[str, tuple[Callable, Callable]]


def clip_updates(
    records: list[dict[str, np.ndarray]], current: ArrayRecord | None, clip_ratio: float
) -> tuple[list[dict[str, np.ndarray]], list[int], float]:
    """(records with every update above `clip_ratio` x the median norm scaled down to it, the
    indices of those clipped, the largest norm / median ratio). Norms over the keys each
    record shares with `current`; with fewer than 3 records, no median to stand for the
    round: unchanged."""
    if current is None or len(records) < 3 or not clip_ratio:
        return records, [], 0.0
    sent = {k: v.numpy() for k, v in current.items()}
    norms = []
    for record in records:
        squares = [np.sum((v.astype(np.float64) - sent[k]) ** 2) for k, v in record.items()]
        norms.append(float(np.sqrt(sum(squares))))
    median = float(np.median(norms))
    if median == 0:
        return records, [], 0.0
    bound, clipped, out = clip_ratio * median, [], []
    for i, (record, norm) in enumerate(zip(records, norms, strict=True)):
        if norm > bound:
            scale = bound / norm
            record = {
                k: (sent[k] + scale * (v - sent[k])).astype(v.dtype) for k, v in record.items()
            }
            clipped.append(i)
        out.append(record)
    return out, clipped, max(norms) / median


def combine(
    weights: list[float],
    records: list[dict[str, np.ndarray]],
    aggregation: str = "mean",
    trim_fraction: float = 0.2,
    transforms: Transforms | None = None,
) -> dict[str, np.ndarray]:
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

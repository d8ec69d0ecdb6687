"""How the round's usable replies, their influence bounded (`influence.bound_influence`),
become the new global arrays: a weighted mean, a trimmed mean, a coordinate-wise median or one
of Flower's Byzantine-robust strategies (numpy + flwr only).

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
from typing import Any, overload

import numpy as np
from flwr.app import Array, ArrayRecord

from pfedgm_app.runconfig.common import AGGREGATIONS

Transforms = Mapping[str, tuple[Callable, Callable]]


# The aggregations that weigh each reply by its weight: the influence bounds use the weights
# there, and count every reply as one client under the others.
WEIGHTED = ("mean", "multi-krum")


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
        if (robust := flower_robust(weights, records, aggregation, byzantine_nodes)) is None:
            return None
        result = robust
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


@overload
def merge_arrays(current: ArrayRecord | None, update: ArrayRecord) -> ArrayRecord: ...
@overload
def merge_arrays(current: ArrayRecord | None, update: None) -> None: ...
def merge_arrays(current: ArrayRecord | None, update: ArrayRecord | None) -> ArrayRecord | None:
    """`update` with every key it lacks taken from `current` (keys kept local stay as they were)."""
    if current is None:
        return update
    if update is None:
        return None  # nothing aggregated: FedAvg.start keeps the current arrays
    merged = {k: update[k] if k in update else v for k, v in current.items()}
    merged.update({k: v for k, v in update.items() if k not in merged})
    return ArrayRecord({k: Array(v.numpy()) for k, v in merged.items()})

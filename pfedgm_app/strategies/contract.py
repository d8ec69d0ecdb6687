"""What a client's reply must be before the server uses it: the wire contract, checked.

A federation of real devices holds buggy, outdated and hostile clients. Each check returns why
a reply breaks the contract (one line, for a warning naming the node), or None; the strategy
drops such a reply and the round goes on from the others. numpy + flwr only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
from flwr.app import ArrayRecord, RecordDict

from .. import wire

# Largest |value| a model or statistic array may hold: far above any trained weight or feature
# statistic, far below what would overflow float32 once squared or summed over clients.
MAX_ABS_VALUE = 1e6
# Most samples a client may claim where the server has no report of its data (`query`): no
# device holds a billion, and the total weight of a round stays far from overflow.
MAX_SAMPLES = 1e9


def number_problem(name: str, value: object, low: float = -math.inf, high: float = math.inf):
    """Why `value` is not a finite number in [low, high], or None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"'{name}' must be a number, got {type(value).__name__} {value!r}"[:160]
    if not math.isfinite(value) or not low <= value <= high:
        return f"'{name}' must be a finite number in [{low:g}, {high:g}], got {value!r}"
    return None


def metrics_problem(content: RecordDict) -> str | None:
    """Exactly one MetricRecord, every value a finite number."""
    if len(content.metric_records) != 1:
        return f"{len(content.metric_records)} metric records, the contract has one"
    for key, value in next(iter(content.metric_records.values())).items():
        if problem := number_problem(key, value):
            return problem
    return None


def train_reply_problem(
    content: RecordDict,
    current: ArrayRecord | None,
    weight_key: str = wire.NUM_EXAMPLES,
    max_weight: float | None = None,
    arrays_key: str = wire.ARRAYS,
) -> str | None:
    """Why a train reply cannot be averaged into `current` (the arrays sent), or None.

    The contract: an ArrayRecord `arrays_key` (a subset of the model's keys: a key left out
    is kept local and keeps its global value), optionally `wire.EXTRAS`, no other record but
    one MetricRecord of finite numbers whose `weight_key` is positive and at most
    `max_weight` (what the client reported at `query`: no client outweighs its data; without
    a report, `MAX_SAMPLES`); arrays
    of the model's shapes and dtypes, finite, no larger than `MAX_ABS_VALUE`.
    """
    names = set(content.array_records)
    if arrays_key not in names:
        return f"no '{arrays_key}' record"
    if extra := sorted(names - {arrays_key, wire.EXTRAS}) + sorted(content.config_records):
        return f"records outside the contract: {extra}"
    if problem := metrics_problem(content):
        return problem
    weight = next(iter(content.metric_records.values())).get(weight_key)
    if problem := number_problem(weight_key, weight, 0, max_weight or MAX_SAMPLES):
        return problem + (" (what it reported at query)" if max_weight else "")
    if weight == 0:
        return f"'{weight_key}' must be positive, got 0"
    record = content.array_records[arrays_key]
    if current is not None:
        if unknown := sorted(set(record) - set(current)):
            return f"keys the model does not have: {unknown}"
        for key, array in record.items():
            ours = current[key]
            if tuple(array.shape) != tuple(ours.shape) or array.dtype != ours.dtype:
                return (f"'{key}' is {array.dtype} {tuple(array.shape)}, the model's is "
                        f"{ours.dtype} {tuple(ours.shape)}")  # fmt: skip
    for name in sorted(names):
        if problem := arrays_problem(content.array_records[name]):
            return problem
    return None


def arrays_problem(record: ArrayRecord) -> str | None:
    """Non-finite or implausibly large values in any array of `record`."""
    for key, array in record.items():
        values = array.numpy()
        if not np.issubdtype(values.dtype, np.number):
            return f"'{key}' is not numeric ({values.dtype})"
        if not np.isfinite(values).all():
            return f"non-finite values in '{key}'"
        if values.size and np.abs(values).max() > MAX_ABS_VALUE:
            return f"'{key}' holds values beyond {MAX_ABS_VALUE:g} in magnitude"
    return None


def personalize_row_problem(metrics: Mapping[str, object], max_test: float | None) -> str | None:
    """Why a personalize reply's metrics cannot enter the summary, or None: `accuracy` and
    every other `acc*` metric a fraction in [0, 1], `num-test` positive and at most what the
    client reported at `query` (`max_test`)."""
    for key in sorted({wire.ACCURACY, *(k for k in metrics if k.startswith("acc"))}):
        if problem := number_problem(key, metrics.get(key), 0, 1):
            return problem
    size = metrics.get(wire.NUM_TEST)
    if problem := number_problem(wire.NUM_TEST, size, 0, max_test or MAX_SAMPLES):
        return problem
    return f"'{wire.NUM_TEST}' must be positive, got 0" if size == 0 else None

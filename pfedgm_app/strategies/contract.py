"""What a client's reply must be before the server uses it: the wire contract, checked.

A federation of real devices holds buggy, outdated and hostile clients. Each check returns why
a reply breaks the contract (one line, for a warning naming the node), or None; the strategy
drops such a reply and the round goes on from the others. numpy + flwr only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
from flwr.app import Array, ArrayRecord, RecordDict

from pfedgm_app.protocol import wire

# Largest |value| a model or statistic array may hold: far above any trained weight or feature
# statistic, far below what would overflow float32 once squared or summed over clients.
MAX_ABS_VALUE = 1e6
# Most samples a client may claim where the server has no report of its data (`query`): no
# device holds a billion, and the total weight of a round stays far from overflow.
MAX_SAMPLES = 1e9
# Largest |value| and count of a reply's metrics: sums over a round stay finite (strict JSON)
# and one reply cannot flood the server's records.
MAX_METRIC = 1e12
MAX_METRICS = 64
# Bytes an Array may carry beyond its values: numpy's .npy header. Anything more is not the
# array it declares.
MAX_HEADER_BYTES = 4096


def decode(key: str, array: Array) -> tuple[np.ndarray, None] | tuple[None, str]:
    """(values, None) of an Array whose real contents are what it declares (dtype, shape, no
    bytes beyond them), else (None, why). Any decoding error is the sender's, never raised."""
    try:
        values = array.numpy()  # np.load(..., allow_pickle=False): a pickle is refused
        declared = (str(array.dtype), tuple(array.shape))
        size = len(array.data)
    except Exception as exc:  # malformed bytes, other stypes: the sender's fault
        return None, f"'{key}' cannot be decoded ({type(exc).__name__})"
    if not isinstance(values, np.ndarray):
        return None, f"'{key}' is not an array"
    if (str(values.dtype), values.shape) != declared:
        return None, (
            f"'{key}' declares {declared[0]} {declared[1]} but holds {values.dtype} {values.shape}"
        )
    if size > values.nbytes + MAX_HEADER_BYTES:
        return None, f"'{key}' carries {size - values.nbytes} bytes beyond its values"
    return values, None


def number_problem(name: str, value: object, low: float = -math.inf, high: float = math.inf):
    """Why `value` is not a finite number in [low, high], or None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"'{name}' must be a number, got {type(value).__name__} {value!r}"[:160]
    if not math.isfinite(value) or not low <= value <= high:
        return f"'{name}' must be a finite number in [{low:g}, {high:g}], got {value!r}"
    return None


def metrics_problem(content: RecordDict) -> str | None:
    """Exactly one MetricRecord of at most `MAX_METRICS` values, each a finite number no
    larger than `MAX_METRIC` in magnitude."""
    if len(content.metric_records) != 1:
        return f"{len(content.metric_records)} metric records, the contract has one"
    metrics = next(iter(content.metric_records.values()))
    if len(metrics) > MAX_METRICS:
        return f"{len(metrics)} metrics, the contract allows {MAX_METRICS}"
    for key, value in metrics.items():
        if problem := number_problem(key, value, -MAX_METRIC, MAX_METRIC):
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
            values, problem = decode(key, array)
            if values is None:
                return problem
            ours = current[key]
            if values.shape != tuple(ours.shape) or str(values.dtype) != str(ours.dtype):
                return (
                    f"'{key}' is {values.dtype} {values.shape}, the model's is "
                    f"{ours.dtype} {tuple(ours.shape)}"
                )
    for name in sorted(names):
        if problem := arrays_problem(content.array_records[name]):
            return problem
    return None


def arrays_problem(record: ArrayRecord) -> str | None:
    """Arrays that cannot be decoded as declared (`decode`), or with non-numeric,
    non-finite or implausibly large values, in `record`."""
    for key, array in record.items():
        values, problem = decode(key, array)
        if values is None:
            return problem
        if not (
            np.issubdtype(values.dtype, np.integer) or np.issubdtype(values.dtype, np.floating)
        ):
            return f"'{key}' is not real numbers ({values.dtype})"
        if not np.isfinite(values).all():
            return f"non-finite values in '{key}'"
        if values.size and np.abs(values).max() > MAX_ABS_VALUE:
            return f"'{key}' holds values beyond {MAX_ABS_VALUE:g} in magnitude"
    return None


def record_bytes(content: RecordDict) -> int:
    """The bytes a reply's arrays carry (as sent), for its size cap."""
    return sum(len(a.data) for r in content.array_records.values() for a in r.values())


QUERY_BOUNDS = {  # what a query reply must hold: [low, high], integers but for DATA_SECONDS
    wire.PARTITION_ID: (0, 1e7),
    wire.NUM_PARTITIONS: (0, 1e7),  # 0: devices with their own data
    wire.NUM_EXAMPLES: (1, MAX_SAMPLES),
    wire.NUM_TEST: (0, MAX_SAMPLES),
    wire.NUM_CLASSES: (2, 1e6),
}


def query_reply_problem(info: Mapping[str, object]) -> str | None:
    """Why a query reply's metrics cannot describe a client, or None: each of `QUERY_BOUNDS`
    an integer in its bounds, `image-shape` three positive integers of at most 4096, the
    seconds (if any) a finite number."""
    for key, (low, high) in QUERY_BOUNDS.items():
        value = info.get(key)
        if problem := number_problem(key, value, low, high):
            return problem
        assert isinstance(value, int | float)  # as number_problem found it
        if float(value) != int(value):
            return f"'{key}' must be an integer, got {value!r}"
    shape = info.get(wire.IMAGE_SHAPE)
    if not (
        isinstance(shape, list)
        and len(shape) == 3
        and all(number_problem("d", d, 1, 4096) is None and float(d) == int(d) for d in shape)
    ):
        return f"'{wire.IMAGE_SHAPE}' must be [C, H, W] of positive integers, got {shape!r}"[:160]
    if wire.DATA_SECONDS in info:
        return number_problem(wire.DATA_SECONDS, info[wire.DATA_SECONDS], 0, MAX_METRIC)
    return None


def personalize_row_problem(metrics: Mapping[str, object], max_test: float | None) -> str | None:
    """Why a personalize reply's metrics cannot enter the summary, or None: `accuracy` and
    every other `acc*` metric a fraction in [0, 1], `num-test` positive and at most what the
    client reported at `query` (`max_test`); at most `MAX_METRICS` values, each a finite
    number no larger than `MAX_METRIC`."""
    if len(metrics) > MAX_METRICS:
        return f"{len(metrics)} metrics, the contract allows {MAX_METRICS}"
    for key, value in metrics.items():
        if problem := number_problem(key, value, -MAX_METRIC, MAX_METRIC):
            return problem
    for key in sorted({wire.ACCURACY, *(k for k in metrics if k.startswith("acc"))}):
        if problem := number_problem(key, metrics.get(key), 0, 1):
            return problem
    size = metrics.get(wire.NUM_TEST)
    if problem := number_problem(wire.NUM_TEST, size, 0, max_test or MAX_SAMPLES):
        return problem
    return f"'{wire.NUM_TEST}' must be positive, got 0" if size == 0 else None

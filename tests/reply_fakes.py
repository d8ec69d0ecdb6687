"""Train replies as a node would send them, and one round aggregated, for the server's tests."""

from __future__ import annotations

import numpy as np
from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict


def _arrays(**values) -> ArrayRecord:
    return ArrayRecord({k: Array(np.asarray(v, dtype=np.float32)) for k, v in values.items()})


def _reply(node: int, arrays: ArrayRecord, n: float, **metrics) -> Message:
    content = RecordDict(
        {"arrays": arrays, "metrics": MetricRecord({"num-examples": n, **metrics})}
    )
    return Message(content, reply_to=Message(RecordDict(), dst_node_id=node, message_type="train"))


def _aggregate(strategy, current, replies, sampled=None):
    strategy.sent_arrays[1] = current  # what configure_train records for round 1
    if sampled is not None:
        strategy.sampled[1] = set(sampled)
    return strategy.aggregate_train(1, replies)

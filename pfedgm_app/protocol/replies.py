"""A ClientApp's side of the wire contract (`wire.py`), flwr only: what a message to a client
carries, and the replies this project's strategies expect, checked before they leave.

    @app.train()
    def train(msg, context):
        arrays, config = received(msg)
        ...
        return train_reply(msg, model.state_dict(), {"num-examples": n, "loss": loss})

    @app.train("personalize")          # the strategy's `personalize()` sends "train.personalize"
    def personalize(msg, context):
        arrays, config = received(msg)
        ...
        return personalize_reply(msg, {"accuracy": 0.83, "num-test": 120})
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict

from . import wire


def received(msg: Message) -> tuple[ArrayRecord, ConfigRecord]:
    """The global arrays and the round's config of a `train` or `train.personalize` message."""
    if (arrays := msg.content.array_records.get(wire.ARRAYS)) is None:
        raise ValueError(f"a '{msg.metadata.message_type}' message carries no '{wire.ARRAYS}'")
    return arrays, msg.content.config_records.get(wire.CONFIG, ConfigRecord())


def message_round(msg: Message) -> int:
    """The server round a message's config names (`wire.ROUND`); 0 where it names none (a
    query, the personalize round, a message without content)."""
    config = msg.content.config_records.get(wire.CONFIG) if msg.has_content() else None
    value = 0 if config is None else config.get(wire.ROUND, 0)
    if isinstance(value, list):
        raise TypeError(f"'{wire.ROUND}' must be a number, got {value!r}")
    return int(value)


def _metrics(values: Mapping[str, float], required: tuple[str, ...], kind: str) -> MetricRecord:
    missing = [k for k in required if k not in values]
    if missing:
        raise ValueError(f"a {kind} reply needs metrics {missing}; got {sorted(values)}")
    bad = [k for k, v in values.items() if not math.isfinite(float(v))]
    if bad:
        raise ValueError(f"a {kind} reply has non-finite metrics {bad}")
    return MetricRecord(dict(values))


def _arrays(arrays: ArrayRecord | Mapping[str, Any]) -> ArrayRecord:
    """An ArrayRecord as is; a state_dict's tensors detached and on the CPU first."""
    if isinstance(arrays, ArrayRecord):
        return arrays
    return ArrayRecord(
        {k: v.detach().cpu() if hasattr(v, "detach") else v for k, v in arrays.items()}
    )


def train_reply(
    msg: Message,
    arrays: ArrayRecord | Mapping[str, Any],
    metrics: Mapping[str, float],
    extras: ArrayRecord | Mapping[str, Any] | None = None,
) -> Message:
    """The reply to a `train` message: the arrays the client shares (an ArrayRecord or a
    state_dict; keys it leaves out keep their global value on the server), metrics with
    `num-examples` (the weight of its average), and optional non-model `extras`."""
    records: dict[str, ArrayRecord | MetricRecord | ConfigRecord] = {
        wire.ARRAYS: _arrays(arrays),
        wire.METRICS: _metrics(metrics, (wire.NUM_EXAMPLES,), "train"),
    }
    if extras:
        records[wire.EXTRAS] = _arrays(extras)
    return Message(RecordDict(records), reply_to=msg)


def personalize_reply(msg: Message, metrics: Mapping[str, float]) -> Message:
    """The reply to `train.personalize`: metrics with `accuracy`, a fraction in [0, 1] of the
    client's test samples, and `num-test`, their number (the weight of the mean). Other keys
    starting with `acc` are averaged too (ablations)."""
    record = _metrics(metrics, (wire.ACCURACY, wire.NUM_TEST), "personalize")
    for key in (k for k in metrics if k.startswith("acc")):
        if not 0.0 <= metrics[key] <= 1.0:
            raise ValueError(f"'{key}' must be a fraction in [0, 1], got {metrics[key]}")
    return Message(RecordDict({wire.METRICS: record}), reply_to=msg)

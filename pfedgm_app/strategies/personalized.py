"""FedAvg over a partial model: local keys kept, bad updates dropped, a personalize round.

Import-light (flwr + numpy only): any Flower project can use it with its own models and data.
Built on Flower's public strategy hooks (`configure_train`, `aggregate_train`); the wire names
(record keys, message types, metric keys) are those of `pfedgm_app.wire`.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Iterable, Mapping
from logging import INFO, WARNING
from typing import Any

import numpy as np
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)
from flwr.common import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg, Result

from .. import wire
from .personalize import PersonalizationResult, collect
from .sampling import sample_nodes, wait_for_nodes


class PersonalizedFedAvg(FedAvg):
    """FedAvg with what personalized methods need from the server.

    - Keys a client keeps local (absent from its reply) keep their current global value
      instead of vanishing from the global model; a client may send an empty ArrayRecord.
    - A reply that is malformed (no model arrays, no positive weight, keys the model lacks,
      another shape or dtype: `malformed_reason`), has NaN/Inf arrays, or is rejected by
      `reject_reason`, is dropped from the aggregate with a warning naming the node; the round
      goes on (with the previous arrays if nothing is left).
    - `personalize(grid, arrays, config)` sends `personalize_message_type` to every node (or to
      the `nodes` given) and aggregates the returned accuracies (`PersonalizationResult`).
    - Clients are sampled by `sampling.sample_nodes` with `random.Random(seed)`: with
      `node_ranks` (node id -> a stable client index, e.g. its partition id), runs of different
      methods with the same seed train the same clients in the same rounds; with
      `train_nodes`, only those nodes are ever sampled.
    - Non-model arrays travel in a second ArrayRecord, `wire.EXTRAS`: a reply's extras (client
      statistics) are taken out before averaging and handed to `aggregate_extras`; the server
      adds `extras_for(node_id)` (global statistics, a client's own head) to each message.
      Both hooks do nothing here; FedPAC and pFedFDA override them.
    - `state()` / `load_state(state)`: what a checkpoint needs to continue the rounds.

    Run it with Flower's `start`, or call `configure_train` / `aggregate_train` with the true
    round numbers from a loop of your own (the app's ServerApp does, to checkpoint and
    evaluate between rounds). All keyword arguments of `flwr.serverapp.strategy.FedAvg` are
    accepted.
    """

    def __init__(
        self,
        *,
        personalize_message_type: str = wire.PERSONALIZE_MESSAGE_TYPE,
        node_ranks: Mapping[int, int] | None = None,
        train_nodes: Collection[int] | None = None,
        seed: int = 0,
        node_wait_timeout: float | None = None,
        **fedavg_kwargs,
    ) -> None:
        super().__init__(**fedavg_kwargs)
        self.personalize_message_type = personalize_message_type
        self.node_ranks = node_ranks
        self.train_nodes = None if train_nodes is None else frozenset(train_nodes)
        self.rng = random.Random(seed)
        self.node_wait_timeout = node_wait_timeout
        # aggregate_train sees only the replies; the arrays sent in each round are what a key
        # no client returns keeps.
        self.sent_arrays: dict[int, ArrayRecord] = {}

    # -- checkpoints --------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """What a checkpoint must hold, besides the global arrays and the rounds done, to
        continue these rounds as if never stopped: the client-sampling RNG. Subclasses with
        state of their own extend it (numpy arrays and picklable values; per-client entries by
        `node_ranks`, since a resumed run's nodes get new ids)."""
        return {"rng": self.rng.getstate()}

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Continue from `state` (`state()` of a stopped run)."""
        self.rng.setstate(state["rng"])

    def check_initial(self, arrays: ArrayRecord) -> None:
        """Raise ValueError where `arrays` cannot start this strategy's rounds (none here)."""

    def start(self, grid: Grid, initial_arrays: ArrayRecord, *args, **kwargs) -> Result:
        self.check_initial(initial_arrays)
        return super().start(grid, initial_arrays, *args, **kwargs)

    # -- training rounds ----------------------------------------------------------------------
    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        if self.fraction_train == 0.0:
            return []
        self.sent_arrays[server_round] = arrays
        nodes = wait_for_nodes(grid, self.min_available_nodes, timeout=self.node_wait_timeout)
        nodes = sample_nodes(nodes, self.fraction_train, self.min_train_nodes, self.rng,
                             self.node_ranks, self.train_nodes)  # fmt: skip
        log(INFO, "configure_train: sampled %d nodes", len(nodes))
        config[wire.ROUND] = server_round
        record = RecordDict({self.arrayrecord_key: arrays, self.configrecord_key: config})
        return self.messages(record, nodes, MessageType.TRAIN)

    def messages(self, record: RecordDict, node_ids: list[int], message_type: str) -> list[Message]:
        """One message per node, with that node's `extras_for` added when it has any."""
        messages = []
        for node in node_ids:
            extras = self.extras_for(node)
            content = record
            if extras is not None:
                content = RecordDict({**dict(record.items()), wire.EXTRAS: extras})
            messages.append(Message(content=content, message_type=message_type, dst_node_id=node))
        return messages

    def extras_for(self, node_id: int) -> ArrayRecord | None:
        """Non-model arrays to send to `node_id` with its next message (none by default)."""
        return None

    def aggregate_extras(
        self, server_round: int, arrays: ArrayRecord, extras: dict[int, tuple[float, ArrayRecord]]
    ) -> ArrayRecord:
        """Fold the clients' extras ({node id: (weight, arrays)}) into the server's state and/or
        the new global `arrays`; returns the global arrays. Ignores them by default.
        """
        return arrays

    def malformed_reason(self, content: RecordDict, current: ArrayRecord | None) -> str | None:
        """Why a train reply cannot be averaged into `current` (the arrays sent), or None: no
        model arrays or no weight, keys the model lacks, or arrays of another shape or dtype.
        Keys a reply leaves out are allowed: they keep their global value (kept local)."""
        if self.arrayrecord_key not in content.array_records:
            return f"no '{self.arrayrecord_key}' record"
        metrics = content.metric_records
        weight = next(iter(metrics.values())).get(self.weighted_by_key) if metrics else None
        if not isinstance(weight, int | float) or not np.isfinite(weight) or weight <= 0:
            return f"'{self.weighted_by_key}' must be a positive number, got {weight!r}"
        if current is None:
            return None
        record = content.array_records[self.arrayrecord_key]
        unknown = sorted(set(record) - set(current))
        if unknown:
            return f"keys the model does not have: {unknown}"
        for key, array in record.items():
            ours = current[key]
            if tuple(array.shape) != tuple(ours.shape) or array.dtype != ours.dtype:
                return (f"'{key}' is {array.dtype} {tuple(array.shape)}, the model's is "
                        f"{ours.dtype} {tuple(ours.shape)}")  # fmt: skip
        return None

    def reject_reason(self, content: RecordDict) -> str | None:
        """Why a train reply must not enter the aggregate, or None. Override to add checks."""
        for record in content.array_records.values():
            for key, array in record.items():
                if not np.isfinite(array.numpy()).all():
                    return f"non-finite values in '{key}'"
        return None

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        current = self.sent_arrays.pop(server_round, None)
        kept = []  # error replies stay in: FedAvg logs and skips them
        extras: dict[int, tuple[float, ArrayRecord]] = {}
        for msg in replies:
            reason = None
            if not msg.has_error():
                content = msg.content
                reason = self.malformed_reason(content, current) or self.reject_reason(content)
            if reason:
                log(WARNING, "Dropping update of node %d: %s", msg.metadata.src_node_id, reason)
                continue
            kept.append(msg)
            if not msg.has_error() and wire.EXTRAS in msg.content:
                weight = self._weight(msg)
                extras[msg.metadata.src_node_id] = (weight, msg.content.pop(wire.EXTRAS))
        arrays, metrics = super().aggregate_train(server_round, kept)
        arrays = merge_arrays(current, arrays)
        if arrays is not None and extras:
            arrays = self.aggregate_extras(server_round, arrays, extras)
        if metrics is not None:  # totals next to FedAvg's weighted means: cost accounting
            valid = [m for m in kept if not m.has_error()]
            metrics["num-clients"] = len(valid)
            metrics[self.weighted_by_key + "-total"] = sum(self._weight(m) for m in valid)
            for key in [k for k in metrics if k.startswith("seconds-")]:  # client time spent
                metrics[key + "-total"] = sum(
                    float(next(iter(m.content.metric_records.values())).get(key, 0.0))
                    for m in valid
                )
        return arrays, metrics

    def _weight(self, msg: Message) -> float:
        return float(next(iter(msg.content.metric_records.values()))[self.weighted_by_key])

    # -- the personalize round ----------------------------------------------------------------
    def personalize(
        self,
        grid: Grid,
        arrays: ArrayRecord,
        config: ConfigRecord,
        timeout: float = 3600,
        nodes: Iterable[int] | None = None,
    ) -> PersonalizationResult:
        """Send `arrays` to `nodes` (default: every connected node); each personalizes and
        evaluates."""
        nodes = sorted(grid.get_node_ids() if nodes is None else nodes)
        log(INFO, "personalize: sending '%s' to %d nodes", self.personalize_message_type,
            len(nodes))  # fmt: skip
        content = RecordDict({self.arrayrecord_key: arrays, self.configrecord_key: config})
        messages = self.messages(content, nodes, self.personalize_message_type)
        replies = grid.send_and_receive(messages, timeout=timeout)
        return collect(replies, len(nodes), timeout, self.personalize_message_type)


def merge_arrays(current: ArrayRecord | None, update: ArrayRecord | None) -> ArrayRecord | None:
    """`update` with every key it lacks taken from `current` (keys kept local stay as they were)."""
    if current is None:
        return update
    if update is None:
        return None  # nothing aggregated: FedAvg.start keeps the current arrays
    merged = {k: update[k] if k in update else v for k, v in current.items()}
    merged.update({k: v for k, v in update.items() if k not in merged})
    return ArrayRecord({k: Array(v.numpy()) for k, v in merged.items()})

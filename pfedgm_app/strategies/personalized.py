"""FedAvg for personalized FL: local keys, dropped non-finite updates, a personalize round.

Import-light (flwr + numpy only): any Flower project can use it with its own models and data.
Built on Flower's public strategy hooks (`configure_train`, `aggregate_train`); the wire names
(record keys, message types, metric keys) are those of `pfedgm_app.wire`.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
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
from flwr.serverapp.strategy import FedAvg

from .. import wire

RoundHook = Callable[[int, ArrayRecord, MetricRecord | None], None]


@dataclass
class PersonalizationResult:
    """Outcome of the personalize round: one row per client plus the paper's metric.

    `mean_accuracy` is the mean of per-client test accuracies weighted by their test-set sizes
    (as pFedFDA reports), `std_accuracy` the standard deviation across clients (unweighted),
    both in percent. `means` holds the same weighted mean for every other `acc*` metric.
    """

    clients: list[dict[str, float]]
    mean_accuracy: float
    std_accuracy: float
    unweighted_mean_accuracy: float
    means: dict[str, float] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)


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
    - With `train_nodes`, only those nodes are sampled for training (e.g. the seen clients of a
      new-client generalization protocol); the others never receive a train message.
    - `on_round(server_round, arrays, metrics)` is called after each aggregation (e.g. to write
      per-round metrics to disk as the run goes).
    - With `node_ranks` (node id -> a stable client index, e.g. its partition id), clients are
      sampled by that index with `random.Random(seed)`: runs of different methods with the same
      seed train the same clients in the same rounds (node ids change from run to run).
      Without it, they are sampled with the same seeded RNG from the grid's list of nodes.
    - Non-model arrays travel in a second ArrayRecord, `wire.EXTRAS`: a reply's extras (client
      statistics) are taken out before averaging and handed to `aggregate_extras`; the server
      adds `extras_for(node_id)` (global statistics, a client's own head) to each message.
      Both hooks do nothing here; FedPAC and pFedFDA override them.

    All keyword arguments of `flwr.serverapp.strategy.FedAvg` are accepted.
    """

    def __init__(
        self,
        *,
        personalize_message_type: str = wire.PERSONALIZE_MESSAGE_TYPE,
        accuracy_key: str = wire.ACCURACY,
        test_size_key: str = wire.NUM_TEST,
        on_round: RoundHook | None = None,
        node_ranks: Mapping[int, int] | None = None,
        train_nodes: Collection[int] | None = None,
        seed: int = 0,
        node_wait_timeout: float | None = None,
        before_round: Callable[[Grid], None] | None = None,
        **fedavg_kwargs,
    ) -> None:
        super().__init__(**fedavg_kwargs)
        self.node_wait_timeout = node_wait_timeout
        self.before_round = before_round
        self.node_ranks = node_ranks
        self.train_nodes = None if train_nodes is None else frozenset(train_nodes)
        self.rng = random.Random(seed)
        self.personalize_message_type = personalize_message_type
        self.accuracy_key = accuracy_key
        self.test_size_key = test_size_key
        self.on_round = on_round
        # aggregate_train sees only the replies; the arrays sent in each round are what a key
        # no client returns keeps (keyed by round, so hook order across rounds does not matter).
        self.sent_arrays: dict[int, ArrayRecord] = {}
        self.completed_rounds = 0  # rounds done before this `start` (a resumed run)

    # -- checkpoints --------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """What a checkpoint must hold, besides the global arrays and the rounds done, to
        continue these rounds as if never stopped: the client-sampling RNG. Subclasses with state of
        their own extend it (numpy arrays and picklable values; per-client entries by
        `node_ranks`, since a resumed run's nodes get new ids)."""
        return {"rng": self.rng.getstate()}

    def load_state(self, state: Mapping[str, Any], completed_rounds: int) -> None:
        """Continue from `state` (`state()` of a stopped run after `completed_rounds` rounds):
        the next `start` runs rounds `completed_rounds + 1, ...` (pass it the rounds left)."""
        self.rng.setstate(state["rng"])
        self.completed_rounds = completed_rounds

    # -- training rounds ----------------------------------------------------------------------
    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        server_round += self.completed_rounds  # Flower's `start` counts from 1 each time
        if self.fraction_train == 0.0:
            return []
        if self.before_round is not None:  # e.g. learn about SuperNodes that joined
            self.before_round(grid)
        self.sent_arrays[server_round] = arrays
        nodes = self.sample_train_nodes(grid)
        log(INFO, "configure_train: sampled %d nodes", len(nodes))
        config[wire.ROUND] = server_round
        record = RecordDict({self.arrayrecord_key: arrays, self.configrecord_key: config})
        return self.messages(record, nodes, MessageType.TRAIN)

    def sample_train_nodes(self, grid: Grid) -> list[int]:
        """Wait for `min_available_nodes`, then sample `fraction_train` of the connected nodes
        (of those in `train_nodes` when given; at least `min_train_nodes`), by `node_ranks`
        when given.
        """
        nodes = wait_for_nodes(grid, self.min_available_nodes, timeout=self.node_wait_timeout)
        if self.node_ranks is not None:  # only clients the server knows (their partition)
            nodes = [n for n in nodes if n in self.node_ranks]
        if self.train_nodes is not None:
            nodes = [n for n in nodes if n in self.train_nodes]
        size = min(max(int(len(nodes) * self.fraction_train), self.min_train_nodes), len(nodes))
        if self.node_ranks is not None:  # the same order whatever ids the nodes got this run
            ranks = self.node_ranks
            nodes = sorted(nodes, key=lambda n: ranks.get(n, len(ranks) + n))
        return self.rng.sample(nodes, size)

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
        server_round += self.completed_rounds
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
        if self.on_round is not None:
            self.on_round(server_round, arrays if arrays is not None else current, metrics)
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
        rows, failures = [], []
        for reply in grid.send_and_receive(messages, timeout=timeout):
            node = reply.metadata.src_node_id
            if reply.has_error():
                failures.append(f"node {node}: {reply.error.reason}")
                continue
            metrics = dict(next(iter(reply.content.metric_records.values())))
            rows.append({"node-id": node, **metrics})
        for failure in failures:
            log(WARNING, "personalize failed on %s", failure)
        missing = len(nodes) - len(rows) - len(failures)
        if missing:
            failures.append(f"{missing} node(s) did not answer within {timeout}s")
        if not rows:
            kind, action = self.personalize_message_type.partition(".")[::2]
            raise RuntimeError(
                f"personalize round: no client answered ({'; '.join(failures[:3])}). Every "
                f"ClientApp needs a handler for '{self.personalize_message_type}': "
                f'`@app.{kind}("{action}")` returning '
                "`pfedgm_app.replies.personalize_reply(msg, {'accuracy': a, 'num-test': n})` "
                "with a in [0, 1] (see the README, 'Use pFedGM in your project')"
            )
        return summarize(rows, self.accuracy_key, self.test_size_key, failures)


def wait_for_nodes(
    grid: Grid, count: int, poll: float = 1.0, timeout: float | None = None
) -> list[int]:
    """The connected node ids, once at least `count` are connected; with `timeout`, raises
    RuntimeError when fewer stay connected that long (a run cannot go on below its minimum)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while len(nodes := list(grid.get_node_ids())) < count:
        if deadline is not None and time.monotonic() > deadline:
            raise RuntimeError(
                f"only {len(nodes)} SuperNode(s) connected for {timeout:.0f}s, fewer than the "
                f"{count} the run needs (min-nodes): the run stops here; restart SuperNodes "
                "and continue it with resume=true"
            )
        log(INFO, "Waiting for nodes to connect: %d connected (need %d)", len(nodes), count)
        time.sleep(poll)
    return nodes


def merge_arrays(current: ArrayRecord | None, update: ArrayRecord | None) -> ArrayRecord | None:
    """`update` with every key it lacks taken from `current` (keys kept local stay as they were)."""
    if current is None:
        return update
    if update is None:
        return None  # nothing aggregated: FedAvg.start keeps the current arrays
    merged = {k: update[k] if k in update else v for k, v in current.items()}
    merged.update({k: v for k, v in update.items() if k not in merged})
    return ArrayRecord({k: Array(v.numpy()) for k, v in merged.items()})


def summarize(
    rows: list[dict[str, float]], accuracy_key: str, weight_key: str, failures: list[str]
) -> PersonalizationResult:
    """Weighted mean (by test size) and std across clients, in percent, of every `acc*` key."""
    if not rows:
        raise RuntimeError(f"personalize round: no client answered ({failures})")
    weights = np.array([r[weight_key] for r in rows], dtype=float)

    def stats(key: str) -> tuple[float, float, float]:
        acc = 100 * np.array([r[key] for r in rows], dtype=float)
        return float(np.average(acc, weights=weights)), float(acc.std()), float(acc.mean())

    mean, std, unweighted = stats(accuracy_key)
    others = sorted({k for r in rows for k in r if k.startswith("acc") and k != accuracy_key})
    means = {k: stats(k)[0] for k in others if all(k in r for r in rows)}
    return PersonalizationResult(rows, mean, std, unweighted, means, failures)

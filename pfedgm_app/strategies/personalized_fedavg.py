"""FedAvg over a partial model: local keys kept, bad updates dropped, a personalize round.

Import-light (flwr + numpy only): any Flower project can use it with its own models and data.
Built on Flower's public strategy hooks (`configure_train`, `aggregate_train`); the wire names
(record keys, message types, metric keys) are those of `pfedgm_app.protocol.wire`.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Iterable, Mapping
from logging import ERROR, INFO, WARNING
from typing import Any

from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Message,
    MessageType,
    MetricRecord,
    MetricRecordValues,
    RecordDict,
)
from flwr.common import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg

from pfedgm_app.protocol import wire

from .admission import ReplyAdmission
from .contract import arrays_problem
from .personalize_round import PersonalizeRound
from .privacy import ClientLevelDP, quiet
from .robust import AGGREGATIONS, combine, merge_arrays, weighted_mean
from .sampling import sample_nodes, wait_for_nodes
from .suspects import MAX_RECORDED, SuspectNaming


class PersonalizedFedAvg(ReplyAdmission, SuspectNaming, PersonalizeRound, FedAvg):
    """FedAvg with what personalized methods need from the server.

    - Keys a client keeps local (absent from its reply) keep their current global value
      instead of vanishing from the global model; a client may send an empty ArrayRecord.
    - A reply that breaks the wire contract (`contract.train_reply_problem`: records, keys,
      shapes, dtypes, finite values, its weight), its extras' contract (`extras_problem`), or
      is rejected by `reject_reason`, is dropped with a warning naming the node; the others'
      replies are averaged key by key (a key a client keeps local is averaged over those that
      sent it). With none left, or an aggregate that breaks an invariant (`aggregate_problem`),
      the round changes nothing.
    - `personalize(grid, arrays, config)` sends `personalize_message_type` to every node (or to
      the `nodes` given) and aggregates the returned accuracies (`PersonalizationResult`).
    - Clients are sampled by `sampling.sample_nodes` with `random.Random(seed)`: with
      `node_partitions` (node id -> its partition id, or any stable client index), runs of
      different methods with the same seed train the same clients in the same rounds; with
      `train_nodes`, only those nodes are ever sampled.
    - Non-model arrays travel in a second ArrayRecord, `wire.EXTRAS`: a reply's extras (client
      statistics) are taken out before averaging and handed to `aggregate_extras`; the server
      adds `extras_for(node_id)` (global statistics, a client's own head) to each message.
      Both hooks do nothing here; FedPAC and pFedFDA override them.
    - `state()` / `load_state(state)`: what a checkpoint needs to continue the rounds.
    - What the server knows bounds what a client claims (docs/robustness.md): one reply per
      sampled node and round; a weight (or test size) at most its node's `reported` one
      (node id -> its `query` metrics), `weight_ratio` times the median of the
      reported sizes (`weight_bound`), and unless the server computed the node's sizes
      (`exact_sizes`), at most `share_ratio` times the round's typical weight, in the average
      and the headline (`share_capped`); the metrics of `metric_keys` only; replies at most
      twice the model's bytes; each reply's step bounded to `clip_ratio` typical clients'
      steps on every key and to pull back at most `pull_bound` of them (`influence`), then
      combined by `aggregation` (`robust`); with `privacy` (`privacy.ClientLevelDP`), DP's
      clip bounds each reply and its noisy mean is the step. `dropped` lists the replies dropped,
      `suspects` those used that moved a round more than one client's worth, `influence`
      each round's shares of the step and bounded nodes, `largest_share` the run's largest.

    Run it with Flower's `start`, or call `configure_train` / `aggregate_train` with the true
    round numbers from a loop of your own (the app's ServerApp does, to checkpoint and
    evaluate between rounds). All keyword arguments of `flwr.serverapp.strategy.FedAvg` are
    accepted.
    """

    # what a client sends besides its shared arrays: outside a DP run's epsilon (`privacy`)
    outside_privacy = "the train metrics (loss, sizes, seconds); the personalize round's accuracies"

    def __init__(
        self,
        *,
        personalize_message_type: str = wire.PERSONALIZE_MESSAGE_TYPE,
        node_partitions: Mapping[int, int] | None = None,
        train_nodes: Collection[int] | None = None,
        seed: int = 0,
        node_wait_timeout: float | None = None,
        reported: Mapping[int, Mapping[str, float]] | None = None,
        exact_sizes: Collection[int] = (),
        weight_ratio: float = 20.0,
        share_ratio: float = 0.0,
        metric_keys: Collection[str] | None = None,
        clip_ratio: float = 5.0,
        pull_bound: float = 1.0,
        aggregation: str = "mean",
        trim_fraction: float = 0.2,
        byzantine_nodes: int = 1,
        privacy: ClientLevelDP | None = None,
        **fedavg_kwargs,
    ) -> None:
        # Federated evaluation is off unless asked for: the paper evaluates once, each client
        # after personalizing (`personalize`), and the app's ClientApp answers no `evaluate`.
        # Flower warns at 0; here that is the default, not a surprise.
        with quiet(enabled="fraction_evaluate" not in fedavg_kwargs, level=ERROR):
            super().__init__(**{"fraction_evaluate": 0.0, **fedavg_kwargs})
        if aggregation not in AGGREGATIONS or (privacy and aggregation != "mean"):
            why = "'mean' under DP" if privacy else f"one of {AGGREGATIONS}"
            raise ValueError(f"aggregation must be {why}, got {aggregation!r}")
        self.privacy = privacy
        self.reported = reported  # node id -> its query metrics: the bounds of its weights
        self.exact_sizes = frozenset(exact_sizes)  # nodes whose `reported` the server computed
        self.weight_ratio, self.share_ratio = weight_ratio, share_ratio
        self.metric_keys = frozenset(
            self.default_metric_keys if metric_keys is None else metric_keys
        )
        self.clip_ratio, self.pull_bound, self.aggregation = clip_ratio, pull_bound, aggregation
        self.trim_fraction, self.byzantine_nodes = trim_fraction, byzantine_nodes
        self.norms: dict[str, list[float]] = {}  # key -> its last typical steps (`influence`)
        self.influence: dict[int, dict[str, Any]] = {}  # round -> its record (`round_influence`)
        self.largest_share: dict[str, float] = {}  # the run's largest: round, node, share, of n
        self.sampled: dict[int, set[int]] = {}  # round -> the nodes its messages went to
        self.dropped: list[str] = []  # "round r: node n: why", for the run's summary
        self.suspects: list[str] = []  # "round r: node n: why" (`SuspectNaming`)
        self.rounds_without_update: dict[int, str] = {}  # round -> why (`server.rounds`)
        self.personalize_message_type = personalize_message_type
        self.node_partitions = node_partitions
        self.train_nodes = None if train_nodes is None else frozenset(train_nodes)
        self.rng = random.Random(seed)
        self.node_wait_timeout = node_wait_timeout
        # aggregate_train sees only the replies; the arrays sent in each round are what a key
        # no client returns keeps.
        self.sent_arrays: dict[int, ArrayRecord] = {}

    def state(self) -> dict[str, Any]:
        """What a checkpoint needs to continue as if never stopped: the sampling RNG, the
        clip's norm history, the problems so far (a resumed run's summary and stop rule count
        them). Subclasses extend it (plain values; per-client entries by partition id)."""
        privacy = {} if self.privacy is None else {"privacy": self.privacy.state()}
        return {"rng": self.rng.getstate(), "norms": dict(self.norms),
                "largest-share": dict(self.largest_share), "dropped": list(self.dropped),
                "suspects": list(self.suspects),
                "rounds-without-update": dict(self.rounds_without_update), **privacy}  # fmt: skip

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Continue from `state` (`state()` of a stopped run)."""
        self.rng.setstate(state["rng"])
        norms = state.get("norms")  # a list in a checkpoint of before the per-key bound
        self.norms = dict(norms) if isinstance(norms, dict) else {}
        self.largest_share = dict(state.get("largest-share", {}))
        # absent from a checkpoint of before they were kept: what this sitting has so far
        self.dropped[:] = state.get("dropped", self.dropped)
        self.suspects[:] = state.get("suspects", self.suspects)
        self.rounds_without_update.update(state.get("rounds-without-update", {}))
        if self.privacy is not None and "privacy" in state:
            self.privacy.load_state(state["privacy"])

    def check_initial(self, arrays: ArrayRecord) -> None:
        """Raise ValueError where `arrays` cannot start this strategy's rounds (none here)."""

    # -- training rounds ----------------------------------------------------------------------
    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        if self.fraction_train == 0.0:
            return []
        self.sent_arrays[server_round] = arrays
        nodes = wait_for_nodes(grid, self.min_available_nodes, timeout=self.node_wait_timeout)
        nodes = sample_nodes(
            nodes,
            self.fraction_train,
            self.min_train_nodes,
            self.rng,
            self.node_partitions,
            self.train_nodes,
        )
        log(INFO, "configure_train: sampled %d nodes", len(nodes))
        self.sampled[server_round] = set(nodes)
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

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """The weighted mean (by `weighted_by_key`) of every array and metric over the replies
        that hold it, summed in the order of the nodes' partition ids (node ids without
        `node_partitions`), merged into the arrays sent (keys no reply holds keep their value);
        the extras go to `aggregate_extras`. A reply that cannot be used is dropped with a
        warning naming its node; with none left, (None, None): the round changes nothing."""
        current = self.sent_arrays.pop(server_round, None)
        replies, seen = list(replies), set[int]()
        used = []
        for msg in replies:
            if problem := self.checked_problem(msg, current, seen, server_round):
                node = msg.metadata.src_node_id
                log(WARNING, "Dropping update of node %d: %s", node, problem)
                if len(self.dropped) < MAX_RECORDED:
                    self.dropped.append(f"round {server_round}: node {node}: {problem}")
            else:
                used.append(msg)
        sampled = sorted(self.sampled.pop(server_round, ()), key=self._order)
        log(INFO, "aggregate_train: %d of %d replies used", len(used), len(replies))
        counts: dict[str, MetricRecordValues] = {"replies-dropped": len(replies) - len(used)}
        if not used and self.privacy is None:  # under DP the noise is released all the same
            return None, MetricRecord(counts)
        # Sums in a fixed order: replies arrive in any order, and float addition is not
        # associative, so the same run would otherwise differ in the last bits from run to run.
        used.sort(key=lambda m: self._order(m.metadata.src_node_id))
        weights = self.round_weights(used)
        records = [
            {k: v.numpy() for k, v in m.content.array_records[self.arrayrecord_key].items()}
            for m in used
        ]
        sent = None if current is None else {k: v.numpy() for k, v in current.items()}
        if self.privacy is not None:  # DP's clip bounds each reply (`privacy`)
            steps = {m.metadata.src_node_id: r for m, r in zip(used, records, strict=True)}
            clip = self.privacy.clipping_norm  # this round's C (adaptive clipping moves it)
            update = self.privacy.step(sampled, steps, sent or {})
            update = None if update is None else self.privatized(update, sent or {})
            counts.update(self.private_records(server_round, used, self.privacy, clip))
            few = "no sampled node or shared array to release"
        else:
            records, bounds = self.bounded_records(server_round, used, weights, records, sent)
            counts.update(bounds)
            update = combine(weights, records, self.aggregation, self.trim_fraction,
                             self.average_transform(), self.byzantine_nodes)  # fmt: skip
            few = f"{len(used)} replies, too few for {self.aggregation} with f = "
            few += str(self.byzantine_nodes)  # Flower's Bulyan: fewer than 4f + 3 replies
        if update is None:
            self.dropped.append(f"round {server_round}: the aggregate: {few}")
            return None, MetricRecord(counts)
        arrays = merge_arrays(current, ArrayRecord({k: Array(v) for k, v in update.items()}))
        extras = {
            m.metadata.src_node_id: (w, m.content.array_records[wire.EXTRAS])
            for w, m in zip(weights, used, strict=True)
            if wire.EXTRAS in m.content.array_records
        }
        if extras:
            arrays = self.aggregate_extras(server_round, arrays, extras)
        if problem := self.aggregate_problem(arrays):
            why = "round %d: the aggregate breaks an invariant (%s); it is not used"
            log(WARNING, why, server_round, problem)
            self.dropped.append(f"round {server_round}: the aggregate: {problem}")
            return None, MetricRecord(counts)
        if not used:  # DP's release of the noise alone: counted, and no reply's metrics
            return arrays, MetricRecord(counts)
        replied = [next(iter(m.content.metric_records.values())) for m in used]
        metrics = [  # numbers, as the contract checked (`metrics_problem`)
            {k: v for k, v in r.items() if k in self.metric_keys and isinstance(v, int | float)}
            for r in replied
        ]
        means = weighted_mean(list(zip(weights, metrics, strict=True)))
        totals = {"num-clients": len(used), self.weighted_by_key + "-total": sum(weights)}
        for key in [k for k in means if k.startswith("seconds-")]:  # client time spent
            totals[key + "-total"] = sum(m.get(key, 0.0) for m in metrics)
        return arrays, MetricRecord({**means, **totals, **counts})

    def _order(self, node: int) -> tuple[int, int]:
        return (self.node_partitions or {}).get(node, -1), node

    def privatized(self, update: dict, sent: dict) -> dict:
        """The noisy mean made usable by post-processing, which costs no privacy (e.g. a
        variance kept positive); as it came by default."""
        return update

    def average_transform(self) -> dict[str, tuple[Callable, Callable]]:
        """{key: (to, back)}: arrays of `key` are averaged as to(x) and the mean mapped back by
        back(), e.g. precisions averaged as covariances (none here: every array as sent)."""
        return {}

    def aggregate_problem(self, arrays: ArrayRecord) -> str | None:
        """Why the new global arrays must not be used (an invariant broken), or None."""
        return arrays_problem(arrays)

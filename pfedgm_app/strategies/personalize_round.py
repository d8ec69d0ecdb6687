"""The personalize round of `PersonalizedFedAvg` (`PersonalizeRound`): the check before round 1
that every ClientApp answers it, and the round itself. flwr only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from logging import ERROR, INFO
from typing import Any, Protocol, TypeVar

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.common import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg, Result

from pfedgm_app.protocol import wire

from .personalization_result import PersonalizationResult, collect
from .privacy import ClientLevelDP
from .probe import missing_handler
from .sampling import wait_for_nodes


class _Host(Protocol):
    """What `PersonalizeRound` reads of its strategy (`PersonalizedFedAvg`): FedAvg's keys and
    nodes, the strategy's options and bounds, the hooks and `ReplyAdmission`'s weights."""

    personalize_message_type: str
    node_wait_timeout: float | None
    min_available_nodes: int
    arrayrecord_key: str
    configrecord_key: str
    reported: Mapping[int, Mapping[str, float]] | None
    privacy: ClientLevelDP | None
    aggregation: str
    clip_ratio: float
    pull_bound: float
    weight_ratio: float
    share_ratio: float

    def check_initial(self, arrays: ArrayRecord) -> None: ...
    def check_personalize_handler(self, grid: Grid, timeout: float = ...) -> None: ...
    def options(self) -> dict[str, Any]: ...
    def messages(
        self, record: RecordDict, node_ids: list[int], message_type: str
    ) -> list[Message]: ...
    def weight_bound(self, node: int, key: str) -> float: ...
    def share_headline(self, result: PersonalizationResult) -> PersonalizationResult: ...


# `start` and `summary` extend FedAvg's (the base): with `self` a type variable bound to `_Host`,
# mypy looks `super()` up in the class's bases; with `self: _Host`, in the protocol.
_HostT = TypeVar("_HostT", bound=_Host)


class PersonalizeRound(FedAvg):
    """Flower's loop around a `PersonalizedFedAvg` (`start`, `summary`) and Phase 2 after it
    (`personalize`): a mixin over FedAvg reading the strategy's message type, nodes, bounds and
    options (`_Host`)."""

    def start(
        self: _HostT,
        grid: Grid,
        initial_arrays: ArrayRecord,
        num_rounds: int = 3,
        timeout: float = 3600,
        train_config: ConfigRecord | None = None,
        evaluate_config: ConfigRecord | None = None,
        evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None = None,
    ) -> Result:
        """Flower's rounds (`FedAvg.start`), after the checks that would otherwise fail only
        after them: the initial arrays (`check_initial`) and the clients' personalize handler.
        The global model is `Result.arrays`; `personalize(grid, result.arrays, config)` then
        gives each client's personalized accuracy (`PersonalizationResult`)."""
        self.check_initial(initial_arrays)
        self.check_personalize_handler(grid, timeout)
        return super().start(  # FedAvg's, after this mixin
            grid, initial_arrays, num_rounds, timeout, train_config, evaluate_config, evaluate_fn
        )

    def summary(self: _HostT) -> None:
        """Flower's summary lines, then the strategy's own options (`options`)."""
        super().summary()
        log(INFO, "\t└──> %s:", type(self).__name__)
        for key, value in self.options().items():
            log(INFO, "\t\t├── %s: %s", key, value)

    def options(self: _Host) -> dict[str, Any]:
        """The options this strategy adds to FedAvg's, for `summary`; subclasses extend it."""
        dp = self.privacy
        privacy = "off" if dp is None else f"z={dp.noise_multiplier:.4g}, C={dp.clipping_norm:g}"
        return {
            "aggregation": self.aggregation,
            "influence bound": f"clip-ratio={self.clip_ratio:g}, pull-bound={self.pull_bound:g}",
            "weights": f"weight-ratio={self.weight_ratio:g}, share-ratio={self.share_ratio:g}",
            "client-level DP": privacy,
            "personalize message": self.personalize_message_type,
        }

    def check_personalize_handler(self: _Host, grid: Grid, timeout: float = 3600) -> None:
        """Before round 1, one node gets a `personalize_message_type` message without arrays:
        a ClientApp with no handler for it (Flower's "No ... function registered") ends the run
        here, in one line naming the decorator to add, not after every round has trained. Any
        other answer (the handler failing on the empty message) passes."""
        node = min(wait_for_nodes(grid, self.min_available_nodes, timeout=self.node_wait_timeout))
        if why := missing_handler(grid, node, self.personalize_message_type, timeout):
            log(ERROR, "pFedGM app: %s", why)  # `pfedgm run` shows the app's line last
            raise RuntimeError(why)

    def personalize(
        self: _Host,
        grid: Grid,
        arrays: ArrayRecord,
        config: ConfigRecord,
        timeout: float = 3600,
        nodes: Iterable[int] | None = None,
    ) -> PersonalizationResult:
        """Send `arrays` to `nodes` (default: every connected node); each personalizes and
        evaluates."""
        nodes = sorted(grid.get_node_ids() if nodes is None else nodes)
        log(
            INFO, "personalize: sending '%s' to %d nodes", self.personalize_message_type, len(nodes)
        )
        content = RecordDict({self.arrayrecord_key: arrays, self.configrecord_key: config})
        messages = self.messages(content, nodes, self.personalize_message_type)
        replies = grid.send_and_receive(messages, timeout=timeout)
        caps = {n: self.weight_bound(n, wire.NUM_TEST) for n in nodes}
        result = collect(
            replies, len(nodes), timeout, self.personalize_message_type, self.reported, caps
        )
        return self.share_headline(result)

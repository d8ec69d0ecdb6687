"""The personalize round of `PersonalizedFedAvg` (`PersonalizeRound`): the check before round 1
that every ClientApp answers it, and the round itself. flwr only.
"""

from __future__ import annotations

from collections.abc import Iterable
from logging import ERROR, INFO

from flwr.app import ArrayRecord, ConfigRecord, RecordDict
from flwr.common import log
from flwr.serverapp import Grid

from pfedgm_app.protocol import wire

from .personalization_result import PersonalizationResult, collect
from .probe import missing_handler
from .sampling import wait_for_nodes


class PersonalizeRound:
    """Phase 2 for a `PersonalizedFedAvg`: a mixin reading its message type, nodes, bounds."""

    def check_personalize_handler(self, grid: Grid, timeout: float = 3600) -> None:
        """Before round 1, one node gets a `personalize_message_type` message without arrays:
        a ClientApp with no handler for it (Flower's "No ... function registered") ends the run
        here, in one line naming the decorator to add, not after every round has trained. Any
        other answer (the handler failing on the empty message) passes."""
        node = min(wait_for_nodes(grid, self.min_available_nodes, timeout=self.node_wait_timeout))
        if why := missing_handler(grid, node, self.personalize_message_type, timeout):
            log(ERROR, "pFedGM app: %s", why)  # `pfedgm run` shows the app's line last
            raise RuntimeError(why)

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

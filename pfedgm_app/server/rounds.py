"""Phase 1's loop below the ServerApp (`Rounds`): the method's training rounds, and the line
that stops a run in which no round could aggregate a reply (`RunStopped`), naming the first
client's cause (`first_failure`) rather than personalizing a model no client trained.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from logging import INFO, WARNING

from flwr.app import ArrayRecord, ConfigRecord, MetricRecord
from flwr.common import log
from flwr.serverapp import Grid

from pfedgm_app.strategies import PersonalizedFedAvg
from pfedgm_app.strategies.client_errors import error_cause


class RunStopped(RuntimeError):
    """No training round of a run could aggregate a reply: the message says why."""


@dataclass
class Rounds:
    """Phase 1's loop: each round the strategy samples and configures (`configure_train`), the
    grid exchanges the messages, the strategy aggregates (`aggregate_train`), then
    `after_round` (outputs, evaluation, checkpoint) sees the round's global arrays. Round
    numbers are the run's own, also after a resume."""

    grid: Grid
    strategy: PersonalizedFedAvg
    last: int  # num-server-rounds
    timeout: float  # round-timeout
    refresh: Callable[[Grid], None] | None = None  # min-nodes: take in SuperNodes that joined

    def run(self, arrays: ArrayRecord, done: int, after_round: AfterRound) -> ArrayRecord:
        """Rounds done+1..last from `arrays`; the global arrays after the last. Stops with
        the reasons when no round of the run could aggregate a reply (every client failed),
        rather than personalize a model no client trained. The rounds without an update are
        the strategy's (`rounds_without_update`): a resumed run's checkpoint restores those
        before the stop, so a run whose first rounds trained goes on to Phase 2 as it would
        have, never stopped."""
        failed = self.strategy.rounds_without_update
        for server_round in range(done + 1, self.last + 1):
            log(INFO, "")
            log(INFO, "[ROUND %d/%d]", server_round, self.last)
            if self.refresh is not None:
                self.refresh(self.grid)
            config = ConfigRecord()
            messages = list(self.strategy.configure_train(server_round, arrays, config, self.grid))
            late = getattr(self.grid, "late", 0)  # `WindowedGrid`'s stragglers, over the run
            stale = getattr(self.grid, "stale", 0)  # and its replies to no message of the round
            replies = list(self.grid.send_and_receive(messages, timeout=self.timeout))
            update, metrics = self.strategy.aggregate_train(server_round, replies)
            if metrics is not None and (late := getattr(self.grid, "late", 0) - late):
                metrics["replies-late"] = late
            if metrics is not None and (stale := getattr(self.grid, "stale", 0) - stale):
                metrics["replies-stale"] = stale
            if update is None or "num-clients" not in (metrics or {}):  # no reply's step
                problem = self.strategy.round_problem(server_round)
                failed[server_round] = problem or first_failure(
                    replies, len(messages), self.strategy.dropped, server_round
                )
                noise = "" if update is None else "; DP released its noise alone"
                log(
                    WARNING,
                    "round %d: no update aggregated (%s)%s",
                    server_round,
                    failed[server_round],
                    noise,
                )
            if update is not None:
                arrays = update
            after_round(server_round, arrays, metrics)
        if len(failed) == self.last and self.last > done:
            first, last = min(failed), max(failed)
            rounds = f"rounds {first}-{last}" if last > first else f"round {first}"
            # a run that resumed has a checkpoint worth continuing once the clients work
            again = " (resume=true continues from the last checkpoint)" if done else ""
            raise RunStopped(
                f"no training round aggregated an update ({rounds}), so no model is "
                f"personalized; fix the clients' failure and run again{again}. The first: "
                f"{failed[first]}"
            )
        return arrays


AfterRound = Callable[[int, ArrayRecord, MetricRecord | None], None]


def first_failure(replies: list, sent: int, dropped: list[str], server_round: int) -> str:
    """Why a round had nothing to aggregate, in one line: the first client error, the first
    reply the strategy dropped (its `dropped`: "round r: node n: why"), or replies missing."""
    for reply in replies:
        if reply.has_error():
            return f"node {reply.metadata.src_node_id}: {error_cause(reply.error.reason)}"
    prefix = f"round {server_round}: "
    if why := next((d[len(prefix) :] for d in dropped if d.startswith(prefix)), None):
        return why
    if len(replies) < sent:
        return f"{sent - len(replies)} of {sent} client(s) did not answer in time"
    return "every reply was dropped (see the warnings above)"

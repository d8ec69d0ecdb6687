"""Which replies moved a round more than one client's worth, named for the run's records
(docs/robustness.md, "Nothing silent"). flwr + numpy only.

A reply that stays inside every bound the server enforces can still steer a round: a weight
claimed above its bound (capped), an update far longer than the others' (`influence.LONG`), or
an update that pulls against the round's progress. None of these is an error, and each may be honest
once; the run names every one, so that a result moved by them is never reported as clean:

- a pull (`influence.pulls`): a contribution's projection on the direction of the others'
  aggregate step, in typical contribution lengths. An honest update pushes the round forward
  or, where its data differ, barely back; one sign-flipped pulls about minus its length times
  its honest cosine. Below `OPPOSED_PULL` (it takes back more than a typical client's whole
  step) it is named, whether or not the pull bound scaled it.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
from flwr.app import Message

from .influence import LONG, Influence, bound_influence
from .privacy import ClientLevelDP
from .robust import WEIGHTED

MAX_RECORDED = 1000  # entries of a strategy's `dropped` and `suspects` kept for the summary
KEPT_ROUNDS = 10  # rounds whose `influence` record waits to be read (`round_influence`)
MIN_CONSENSUS = 3  # replies from which the others' step is a consensus a pull can oppose
OPPOSED_PULL = -1.0  # an update that undoes more than one typical client's push is named


class _Host(Protocol):
    """What `SuspectNaming` reads of its strategy (`PersonalizedFedAvg`): its bounds and
    records, `ReplyAdmission._claim`, and its own steps (subclasses may refine them)."""

    aggregation: str
    clip_ratio: float
    pull_bound: float
    norms: dict[str, list[float]]
    influence: dict[int, dict[str, Any]]
    largest_share: dict[str, float]
    suspects: list[str]
    dropped: list[str]

    def _claim(self, msg: Message) -> float: ...
    def record_influence(
        self, server_round: int, used: list[Message], bounds: Influence
    ) -> None: ...
    def name_suspects(
        self,
        server_round: int,
        used: list[Message],
        weights: list[float],
        long: list[int],
        bounded: list[int],
        pulled: list[float],
    ) -> None: ...


class SuspectNaming:
    """How far each reply moved a round and what its records say of it: the influence bounds
    (`bounded_records`), the replies that moved it (`suspects`), each one's share of the step
    (`round_shares`), why its aggregate was not used (`round_problem`). A mixin of
    `PersonalizedFedAvg`: it reads the strategy's bounds, lists and `_claim`."""

    def bounded_records(
        self: _Host,
        server_round: int,
        used: list[Message],
        weights: list[float],
        records: list[dict[str, np.ndarray]],
        sent: dict[str, np.ndarray] | None,
    ) -> tuple[list[dict[str, np.ndarray]], dict[str, float]]:
        """(the records with each reply's influence bounded (`influence`), the round's counts
        of it for `rounds.jsonl`); the shares and suspects recorded. Weights count where the
        aggregation weighs (`robust.WEIGHTED`), else every reply as one client."""
        ones = [1.0] * len(weights)
        records, bounds = bound_influence(
            weights if self.aggregation in WEIGHTED else ones, records, sent,
            self.clip_ratio, self.pull_bound, self.norms)  # fmt: skip
        self.record_influence(server_round, used, bounds)
        self.name_suspects(server_round, used, weights, bounds.long, bounds.bounded, bounds.pulls)
        counts = {
            "updates-clipped": len(bounds.clipped),
            "update-norm-ratio-max": bounds.ratio,
            "updates-pull-bounded": len(bounds.bounded),
            "update-share-max": max(bounds.shares, default=0.0),
        }
        return records, counts | ({"update-pull-min": min(bounds.pulls)} if bounds.pulls else {})

    def private_records(
        self: _Host, server_round: int, used: list[Message], privacy: ClientLevelDP, clip: float
    ) -> dict[str, float]:
        """A DP round's counts for `rounds.jsonl` (epsilon spent so far, C, the steps
        clipped) and its shares of the step: each reply's step length clipped to C, over
        their sum. A reply longer than C is clipped, not suspect: under DP that is routine."""
        counts = {"dp-epsilon": privacy.spent().epsilon, "dp-clipping-norm": clip}
        if not used:  # the noise alone was released
            return counts
        nodes = [m.metadata.src_node_id for m in used]
        lengths = [min(privacy.norms.get(n, 0.0), clip) for n in nodes]
        total = sum(lengths)
        shares = [x / total if total > 0 else 1 / len(nodes) for x in lengths]
        clipped = [i for i, n in enumerate(nodes) if privacy.norms.get(n, 0.0) > clip]
        self.record_influence(server_round, used, Influence(clipped=clipped, shares=shares))
        return {**counts, "updates-clipped": len(clipped), "update-share-max": max(shares)}

    def name_suspects(
        self: _Host,
        server_round: int,
        used: list[Message],
        weights: list[float],
        long: list[int],
        bounded: list[int],
        pulled: list[float],
    ) -> None:
        """Name in `suspects` ("round r: node n: why") each reply that moved the round more
        than one client's worth: its weight capped, its update `LONG` typical lengths or more
        (`long`), or pulling against the round's progress (`pulled`, as `influence.pulls`
        measured it; `bounded`: scaled to the bound). A pull is named from 3 replies: of two,
        "the others' step" is one client's, which an honest client of other data may oppose
        (the pull bound still scales it, and the round's record says so)."""
        consensus = len(used) >= MIN_CONSENSUS
        for i, msg in enumerate(used):
            why = []
            if (claim := self._claim(msg)) > weights[i]:
                why.append(f"weight {claim:g} capped at {weights[i]:g}")
            if i in long:
                why.append(f"update over {LONG:g} typical lengths")
            if consensus and pulled and pulled[i] < OPPOSED_PULL:
                why.append(f"update pulls against the others' step ({pulled[i]:.1f} clients)")
            if consensus and i in bounded:
                why.append("scaled to the pull bound")
            if why and len(self.suspects) < MAX_RECORDED:
                node = msg.metadata.src_node_id
                self.suspects.append(f"round {server_round}: node {node}: {'; '.join(why)}")

    def record_influence(
        self: _Host, server_round: int, used: list[Message], bounds: Influence
    ) -> None:
        """Keep what the bounds did to the round's replies for its record (`round_influence`),
        and the run's largest share in `largest_share` (with the round's number of replies,
        n: 1/n is an even share)."""
        nodes = [m.metadata.src_node_id for m in used]
        for kept in [r for r in self.influence if r <= server_round - KEPT_ROUNDS]:
            del self.influence[kept]  # a loop that never reads them (Flower's start) keeps few
        self.influence[server_round] = {
            "shares": {str(n): s for n, s in zip(nodes, bounds.shares, strict=True)},
            "clipped": [nodes[i] for i in bounds.clipped],
            "pull-bounded": [nodes[i] for i in bounds.bounded],
        }
        if bounds.shares and max(bounds.shares) > self.largest_share.get("share", 0.0):
            i = int(np.argmax(bounds.shares))
            share = {"round": server_round, "node": nodes[i], "share": bounds.shares[i]}
            self.largest_share = share | {"replies": len(nodes)}

    def round_influence(self: _Host, server_round: int) -> dict[str, Any]:
        """Each node's share of `server_round`'s step, the nodes clipped and pull-bounded; once
        (the round's record keeps it)."""
        return self.influence.pop(server_round, {})

    def round_suspects(self: _Host, server_round: int) -> list[str]:
        """The `suspects` entries of `server_round`."""
        return [s for s in self.suspects if s.startswith(f"round {server_round}: ")]

    def round_problem(self: _Host, server_round: int) -> str | None:
        """Why the aggregate of `server_round` was not used (an invariant broken), or None."""
        prefix = f"round {server_round}: the aggregate: "
        return next((d[len(prefix) :] for d in self.dropped if d.startswith(prefix)), None)

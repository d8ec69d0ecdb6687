"""Which train replies enter a round's aggregate and with what weight: the checks of
`PersonalizedFedAvg` against what the server knows (docs/robustness.md). flwr + numpy only.

`ReplyAdmission` is a mixin of the strategy; it reads the strategy's `reported` (node id ->
its query metrics), `exact_sizes` (the nodes whose reported sizes the server computed itself),
`weight_ratio`, `share_ratio`, `sampled` (round -> the nodes sent to), `weighted_by_key` and
`arrayrecord_key` (`_Host`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import numpy as np
from flwr.app import ArrayRecord, Message, RecordDict

from pfedgm_app.protocol import wire

from .client_errors import error_cause
from .contract import MAX_SAMPLES, record_bytes, train_reply_problem
from .personalization_result import PersonalizationResult, summarize


def share_capped(values: list[float], exact: list[bool], ratio: float) -> list[float]:
    """`values` (a round's weights or test sizes), each not `exact` at most `ratio` times the
    median of the values less the largest: one client of a round counts at most `ratio`
    typical clients' worth, whatever it claims. The largest is left out of the reference so
    that it cannot raise its own bound (with two values, the smaller is the reference); with
    one value, or `ratio` 0, nothing is capped."""
    if not ratio or len(values) < 2:
        return list(values)
    bound = ratio * float(np.median(sorted(values)[:-1]))
    return [v if known else min(v, bound) for v, known in zip(values, exact, strict=True)]


def model_bytes(arrays: ArrayRecord) -> int:
    return sum(len(a.data) for a in arrays.values())


class _Host(Protocol):
    """What `ReplyAdmission` reads of its strategy (`PersonalizedFedAvg`), and its own hooks
    that subclasses refine."""

    reported: Mapping[int, Mapping[str, float]] | None
    exact_sizes: frozenset[int]
    weight_ratio: float
    share_ratio: float
    sampled: dict[int, set[int]]
    suspects: list[str]
    weighted_by_key: str
    arrayrecord_key: str

    def extras_problem(self, extras: ArrayRecord) -> str | None: ...
    def reject_reason(self, content: RecordDict) -> str | None: ...
    def reply_problem(self, msg: Message, current: ArrayRecord | None) -> str | None: ...
    def weight_bound(self, node: int, key: str) -> float: ...
    def _claim(self, msg: Message) -> float: ...
    def _weight(self, msg: Message) -> float: ...


class ReplyAdmission:
    """The hooks that admit a train reply (`checked_problem`) and weigh it (`weight_bound`);
    subclasses refine `extras_problem` and `reject_reason`."""

    def extras_problem(self, extras: ArrayRecord) -> str | None:
        """Why a reply's extras break this strategy's contract, or None. This strategy uses
        none: a reply with extras is refused (FedPAC's and others override)."""
        return "extras this method does not use"

    def reject_reason(self, content: RecordDict) -> str | None:
        """Why a train reply that fits the wire contract must still not enter the aggregate
        (e.g. a statistic outside its domain), or None. Override to add checks."""
        return None

    def reply_problem(self: _Host, msg: Message, current: ArrayRecord | None) -> str | None:
        """Why the train reply `msg` cannot be used, or None: an error reply, the wire
        contract (`contract.train_reply_problem`, weights bounded by `reported`), the
        extras' contract, then `reject_reason`."""
        if msg.has_error():
            return "error reply: " + error_cause(msg.error.reason)
        node, content = msg.metadata.src_node_id, msg.content
        bound = (self.reported or {}).get(node, {}).get(self.weighted_by_key)
        if current is not None and record_bytes(content) > 2 * model_bytes(current) + (1 << 20):
            return f"a reply of {record_bytes(content)} bytes for a model of {model_bytes(current)}"
        problem = train_reply_problem(
            content, current, self.weighted_by_key, bound, self.arrayrecord_key
        )
        if problem is None and wire.EXTRAS in content.array_records:
            problem = self.extras_problem(content.array_records[wire.EXTRAS])
        return problem or self.reject_reason(content)

    def checked_problem(
        self: _Host, msg: Message, current: ArrayRecord | None, seen: set[int], server_round: int
    ) -> str | None:
        """`reply_problem`, a second reply of a node or one from a node not sampled, and
        whatever the checks raise: nothing a reply holds can raise in the server."""
        node = msg.metadata.src_node_id
        if node in seen:
            return "a second reply in this round"
        seen.add(node)
        if (sampled := self.sampled.get(server_round)) is not None and node not in sampled:
            return "a reply from a node not sampled in this round"
        try:
            return self.reply_problem(msg, current)
        except Exception as exc:  # the reply's fault, reported as its node's
            return f"a reply that cannot be checked ({type(exc).__name__})"

    @property
    def default_metric_keys(self) -> tuple[str, ...]:
        """The train metrics taken from replies when `metric_keys` is not given."""
        return wire.TRAIN_METRICS

    def weight_bound(self: _Host, node: int, key: str) -> float:
        """The most `key` (a size: `num-examples`, `num-test`) that counts for `node`: what
        it reported at query, at most `weight_ratio` times the median of all reported (a
        report can lower its bound, never raise it), at most `contract.MAX_SAMPLES`."""
        sizes = [float(r[key]) for r in (self.reported or {}).values() if key in r]
        bound = MAX_SAMPLES
        if sizes:
            bound = min(bound, self.weight_ratio * float(np.median(sizes)))
        own = (self.reported or {}).get(node, {}).get(key)
        return min(bound, float(own)) if own is not None else bound

    def _claim(self: _Host, msg: Message) -> float:
        """The weight a train reply claims (`weighted_by_key`)."""
        claim = next(iter(msg.content.metric_records.values()))[self.weighted_by_key]
        assert isinstance(claim, int | float)  # a number, as the contract checked
        return float(claim)

    def round_weights(self: _Host, used: list[Message]) -> list[float]:
        """The weights of a round's used replies: each `_weight`, and for a node whose sizes
        the server did not compute itself (not in `exact_sizes`), at most `share_ratio` times
        the round's typical weight (`share_capped`)."""
        exact = [m.metadata.src_node_id in self.exact_sizes for m in used]
        return share_capped([self._weight(m) for m in used], exact, self.share_ratio)

    def share_headline(self: _Host, result: PersonalizationResult) -> PersonalizationResult:
        """`result` with each test size of a node not in `exact_sizes` at most `share_ratio`
        times the typical one (`share_capped`), the headline recomputed; each cap named in
        `suspects` ("personalize: node n: ...")."""
        rows = result.clients
        sizes = [float(r[wire.NUM_TEST]) for r in rows]
        exact = [int(r["node-id"]) in self.exact_sizes for r in rows]
        capped = share_capped(sizes, exact, self.share_ratio)
        if capped == sizes:
            return result
        rows = [{**r, wire.NUM_TEST: c} for r, c in zip(rows, capped, strict=True)]
        for row, size, counted in zip(rows, sizes, capped, strict=True):
            if counted < size:
                self.suspects.append(
                    f"personalize: node {row['node-id']}: test size {size:g} counted as {counted:g}"
                )
        return summarize(rows, result.failures)

    def _weight(self: _Host, msg: Message) -> float:
        """A reply's weight: its claim, at most its node's `weight_bound`."""
        return min(
            self._claim(msg), self.weight_bound(msg.metadata.src_node_id, self.weighted_by_key)
        )

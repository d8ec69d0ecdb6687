"""The personalize round's outcome: one row per client, the paper's mean and spread.

numpy + flwr only: any Flower project can use it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from logging import WARNING

import numpy as np
from flwr.app import Message
from flwr.common import log

from pfedgm_app.protocol import wire

from .client_errors import error_cause
from .contract import personalize_row_problem


@dataclass
class PersonalizationResult:
    """Outcome of the personalize round: one row per client plus the paper's metric.

    `mean_accuracy` is the mean of per-client test accuracies weighted by their test-set sizes
    (as pFedFDA reports), `std_accuracy` the standard deviation across clients (unweighted),
    both in percent. `means` holds the same weighted mean for every other `acc*` metric.
    """

    clients: list[dict[str, float]]
    mean_accuracy: float | None  # None: no client could be evaluated (see `failures`)
    std_accuracy: float | None
    unweighted_mean_accuracy: float | None
    means: dict[str, float] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)


def collect(
    replies: Iterable[Message],
    asked: int,
    timeout: float,
    message_type: str,
    reported: Mapping[int, Mapping[str, float]] | None = None,
    caps: Mapping[int, float] | None = None,
) -> PersonalizationResult:
    """The result of the personalize replies to `asked` messages: a row per client whose
    metrics fit the contract (`contract.personalize_row_problem`; its test size bounded by
    what it `reported` at query, and counted at most `caps[node]`, the server's bound), a
    failure, logged with its node, per other reply, second reply of a node, or missing
    answer. Raises when no client answered at all (the ClientApps lack the handler)."""
    rows, failures, answered, seen = [], [], 0, set()
    for reply in replies:
        node = reply.metadata.src_node_id
        if reply.has_error():
            failures.append(f"node {node}: {error_cause(reply.error.reason)}")
            continue
        answered += 1
        if node in seen:
            failures.append(f"node {node}: a second reply")
            continue
        seen.add(node)
        records = list(reply.content.metric_records.values())
        metrics = dict(records[0]) if len(records) == 1 else {}
        bound = (reported or {}).get(node, {}).get(wire.NUM_TEST)
        problem = "not one metric record" if len(records) != 1 else None
        if problem := problem or personalize_row_problem(metrics, bound):
            failures.append(f"node {node}: {problem}")
            continue
        row = {k: v for k, v in metrics.items() if isinstance(v, int | float)}  # all, checked
        if caps and node in caps:
            row[wire.NUM_TEST] = min(row[wire.NUM_TEST], caps[node])
        rows.append({**row, "node-id": node})
    for failure in failures:
        log(WARNING, "personalize failed on %s", failure)
    if missing := asked - len(rows) - len(failures):
        failures.append(f"{missing} node(s) did not answer within {timeout}s")
    if not answered:
        kind, action = message_type.partition(".")[::2]
        raise RuntimeError(
            f"personalize round: no client answered ({'; '.join(failures[:3])}). Every "
            f"ClientApp needs a handler for '{message_type}': `@app.{kind}(\"{action}\")` "
            "returning `pfedgm_app.protocol.replies.personalize_reply(msg, {'accuracy': a, "
            "'num-test': n})` with a in [0, 1] (see examples/quickstart-pfedgm/README.md)"
        )
    return summarize(rows, failures)


def accuracy_stats(accuracies: list[float], weights: list[float]) -> tuple[float, float, float]:
    """Per-client accuracies -> (mean weighted by test size, std across clients, unweighted
    mean): the figures of a run's summary, and of a table's cell (`paper.cells`)."""
    acc = np.array(accuracies, dtype=float)
    return float(np.average(acc, weights=weights)), float(acc.std()), float(acc.mean())


def summarize(rows: list[dict[str, float]], failures: list[str]) -> PersonalizationResult:
    """Weighted mean (by test size) and std across clients, in percent, of every `acc*` key;
    with no row, no mean (None) and the failures that explain why."""
    if not rows:
        log(WARNING, "personalize round: no usable reply (%s)", "; ".join(failures[:3]))
        return PersonalizationResult([], None, None, None, {}, failures)
    weights = [r[wire.NUM_TEST] for r in rows]

    def stats(key: str) -> tuple[float, float, float]:
        return accuracy_stats([100 * r[key] for r in rows], weights)

    mean, std, unweighted = stats(wire.ACCURACY)
    others = sorted({k for r in rows for k in r if k.startswith("acc") and k != wire.ACCURACY})
    means = {k: stats(k)[0] for k in others if all(k in r for r in rows)}
    return PersonalizationResult(rows, mean, std, unweighted, means, failures)

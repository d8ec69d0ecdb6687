"""The personalize round's outcome: one row per client, the paper's mean and spread.

numpy + flwr only: any Flower project can use it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from logging import WARNING

import numpy as np
from flwr.app import Message
from flwr.common import log

from .. import wire


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


def collect(
    replies: Iterable[Message], asked: int, timeout: float, message_type: str
) -> PersonalizationResult:
    """The result of the personalize replies to `asked` messages: a row per client that
    answered (`wire.ACCURACY`, `wire.NUM_TEST` and its other metrics), a failure per error
    reply or missing answer."""
    rows, failures = [], []
    for reply in replies:
        node = reply.metadata.src_node_id
        if reply.has_error():
            failures.append(f"node {node}: {reply.error.reason}")
            continue
        metrics = dict(next(iter(reply.content.metric_records.values())))
        rows.append({"node-id": node, **metrics})
    for failure in failures:
        log(WARNING, "personalize failed on %s", failure)
    if missing := asked - len(rows) - len(failures):
        failures.append(f"{missing} node(s) did not answer within {timeout}s")
    if not rows:
        kind, action = message_type.partition(".")[::2]
        raise RuntimeError(
            f"personalize round: no client answered ({'; '.join(failures[:3])}). Every "
            f"ClientApp needs a handler for '{message_type}': `@app.{kind}(\"{action}\")` "
            "returning `pfedgm_app.replies.personalize_reply(msg, {'accuracy': a, "
            "'num-test': n})` with a in [0, 1] (see examples/quickstart-pfedgm/README.md)"
        )
    return summarize(rows, failures)


def summarize(rows: list[dict[str, float]], failures: list[str]) -> PersonalizationResult:
    """Weighted mean (by test size) and std across clients, in percent, of every `acc*` key."""
    if not rows:
        raise RuntimeError(f"personalize round: no client answered ({failures})")
    weights = np.array([r[wire.NUM_TEST] for r in rows], dtype=float)

    def stats(key: str) -> tuple[float, float, float]:
        acc = 100 * np.array([r[key] for r in rows], dtype=float)
        return float(np.average(acc, weights=weights)), float(acc.std()), float(acc.mean())

    mean, std, unweighted = stats(wire.ACCURACY)
    others = sorted({k for r in rows for k in r if k.startswith("acc") and k != wire.ACCURACY})
    means = {k: stats(k)[0] for k in others if all(k in r for r in rows)}
    return PersonalizationResult(rows, mean, std, unweighted, means, failures)

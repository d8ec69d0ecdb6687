"""Which replies moved a round more than one client's worth, named for the run's records
(docs/robustness.md, "Nothing silent"). numpy only.

A reply that stays inside every bound the server enforces can still steer a round: a weight
claimed above its bound (capped), an update clipped to the round's norm bound, or an update
that points against the round's consensus. None of these is an error, and each may be honest
once; the run names every one, so that a result moved by them is never reported as clean:

- `opposition`: the cosine of each update with the coordinate-wise median of the round's
  updates (the median, since the mean moves with the updates it judges: two colluders of six
  pull the mean, not the median). An honest update agrees with the round's direction
  (`rounds.jsonl`'s `update-cosine-min` over the paper's runs stays above 0); a sign-flipped
  one scores near -1. Below `OPPOSED_COSINE` it is named.
"""

from __future__ import annotations

import numpy as np
from flwr.app import ArrayRecord, Message

MAX_RECORDED = 1000  # entries of a strategy's `dropped` and `suspects` kept for the summary
OPPOSED_COSINE = -0.5  # an update this far against the round's median direction is named
SAMPLED_COORDINATES = 1 << 16  # the cosines read every k-th coordinate, at most this many


def flat_updates(records: list[dict[str, np.ndarray]], sent: dict[str, np.ndarray]) -> np.ndarray:
    """(n, m) float64: each record's update (minus `sent`) over the keys every record holds,
    in sorted order, read every k-th coordinate so that m <= `SAMPLED_COORDINATES`: a strided
    sample, the same coordinates for every record, whose cosines estimate the whole model's
    at a fraction of the cost (a median over 30 updates of 500k values costs about 0.3 s)."""
    keys = sorted(set.intersection(*(set(r) for r in records)) & set(sent))
    total = sum(int(np.prod(sent[k].shape)) for k in keys)
    stride = max(1, -(-total // SAMPLED_COORDINATES))
    rows = []
    for record in records:
        flat = np.concatenate(
            [(record[k].astype(np.float64) - sent[k]).ravel() for k in keys] or [np.zeros(0)]
        )
        rows.append(flat[::stride])
    return np.stack(rows)


def opposition(updates: np.ndarray) -> list[float]:
    """The cosine of each row of `updates` with their coordinate-wise median (0 where either
    is zero); with fewer than 3 rows there is no median to stand for the round: all 1."""
    if len(updates) < 3:
        return [1.0] * len(updates)
    median = np.median(updates, axis=0)
    norms = np.linalg.norm(updates, axis=1) * np.linalg.norm(median)
    dots = updates @ median
    return [float(d / n) if n > 0 else 0.0 for d, n in zip(dots, norms, strict=True)]


class SuspectNaming:
    """What a round's records say of it: the replies that moved it (`suspects`), why its
    aggregate was not used (`round_problem`). A mixin of `PersonalizedFedAvg`: it reads the
    strategy's `suspects` and `dropped` lists and `_claim`."""

    def name_suspects(
        self,
        server_round: int,
        used: list[Message],
        weights: list[float],
        records: list[dict],
        clipped: list[int],
        current: ArrayRecord | None,
    ) -> list[float]:
        """Name in `suspects` ("round r: node n: why") each reply that moved the round more
        than one client's worth (`suspects.py`): its weight capped, its update clipped or
        opposed to the round's; returns the updates' cosines to the round's median."""
        sent = {k: v.numpy() for k, v in (current or ArrayRecord()).items()}
        cosines = opposition(flat_updates(records, sent)) if sent and len(records) >= 3 else []
        for i, msg in enumerate(used):
            why = []
            if (claim := self._claim(msg)) > weights[i]:
                why.append(f"weight {claim:g} capped at {weights[i]:g}")
            if i in clipped:
                why.append("update clipped to the round's norm bound")
            if cosines and cosines[i] < OPPOSED_COSINE:
                why.append(f"update opposed to the round's median (cosine {cosines[i]:.2f})")
            if why and len(self.suspects) < MAX_RECORDED:
                node = msg.metadata.src_node_id
                self.suspects.append(f"round {server_round}: node {node}: {'; '.join(why)}")
        return cosines

    def round_suspects(self, server_round: int) -> list[str]:
        """The `suspects` entries of `server_round`."""
        return [s for s in self.suspects if s.startswith(f"round {server_round}: ")]

    def round_problem(self, server_round: int) -> str | None:
        """Why the aggregate of `server_round` was not used (an invariant broken), or None."""
        prefix = f"round {server_round}: the aggregate: "
        return next((d[len(prefix) :] for d in self.dropped if d.startswith(prefix)), None)

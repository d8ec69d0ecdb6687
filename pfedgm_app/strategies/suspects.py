"""Which replies moved a round more than one client's worth, named for the run's records
(docs/robustness.md, "Nothing silent"). flwr + numpy only.

A reply that stays inside every bound the server enforces can still steer a round: a weight
claimed above its bound (capped), an update clipped to the round's norm bound, or an update
that pulls against the round's consensus. None of these is an error, and each may be honest
once; the run names every one, so that a result moved by them is never reported as clean:

- `pulls`: each update's projection on the direction of the others' consensus (the
  coordinate-wise median of the other updates, left out of its own judge: with a handful of
  replies a large update drags every coordinate's median one rank its way), in units of a
  typical other update's length (their median norm). An honest update pushes the round
  forward or, where its data differ, barely back: its length is about a typical one and its
  cosine with the others' consensus small when negative. An update sign-flipped and scaled by
  s pulls about -s times its honest cosine. Below `OPPOSED_PULL` (it takes back more than a
  typical update's whole length) it is named. Cosines alone do not tell them apart: honest
  updates of non-IID clients meet the others' consensus at cosines of 0.2 to 0.6 once they
  learn, and near 0 before, a flipped one at minus that, whatever its length.
"""

from __future__ import annotations

import numpy as np
from flwr.app import Message

MAX_RECORDED = 1000  # entries of a strategy's `dropped` and `suspects` kept for the summary
OPPOSED_PULL = -1.0  # an update that undoes more than one typical client's push is named
SAMPLED_COORDINATES = 1 << 14  # the projections read every k-th coordinate, at most this many


def flat_updates(records: list[dict[str, np.ndarray]], sent: dict[str, np.ndarray]) -> np.ndarray:
    """(n, m) float64: each record's update (minus `sent`) over the keys every record holds,
    in sorted order, read every k-th coordinate so that m <= `SAMPLED_COORDINATES`: a strided
    sample, the same coordinates for every record, whose projections estimate the whole
    model's (to about 1/sqrt(m)) at a fraction of the cost of n medians over every value."""
    keys = sorted(set.intersection(*(set(r) for r in records)) & set(sent))
    total = sum(int(np.prod(sent[k].shape)) for k in keys)
    stride = max(1, -(-total // SAMPLED_COORDINATES))

    def sampled(arrays: dict[str, np.ndarray]) -> np.ndarray:  # one copy, then every k-th
        flat = np.concatenate([arrays[k].ravel() for k in keys] or [np.zeros(0)])
        return flat[::stride].astype(np.float64)

    base = sampled(sent)
    rows = [sampled(record) - base for record in records]
    return np.stack(rows)


def pulls(updates: np.ndarray) -> list[float]:
    """Each row's projection on the direction of the coordinate-wise median of the other rows,
    divided by the other rows' median norm (module docstring); with fewer than 3 rows there is
    no consensus to stand for the round: all 0. A zero consensus or length gives 0."""
    n = len(updates)
    if n < 3:
        return [0.0] * n
    norms = np.linalg.norm(updates, axis=1)
    out = []
    for i in range(n):
        others = np.delete(updates, i, axis=0)
        direction = np.median(others, axis=0)
        scale = np.linalg.norm(direction) * float(np.median(np.delete(norms, i)))
        out.append(float(updates[i] @ direction) / scale if scale > 0 else 0.0)
    return out


class SuspectNaming:
    """What a round's records say of it: the replies that moved it (`suspects`), why its
    aggregate was not used (`round_problem`). A mixin of `PersonalizedFedAvg`: it reads the
    strategy's `suspects` and `dropped` lists and `_claim`."""

    def name_suspects(
        self,
        server_round: int,
        used: list[Message],
        weights: list[float],
        clipped: list[int],
        bounded: list[int],
        pulled: list[float],
    ) -> None:
        """Name in `suspects` ("round r: node n: why") each reply that moved the round more
        than one client's worth: its weight capped, its update clipped, or pulling against the
        round's consensus (`pulled`, as `pulls` measured it; `bounded`: scaled to the bound)."""
        for i, msg in enumerate(used):
            why = []
            if (claim := self._claim(msg)) > weights[i]:
                why.append(f"weight {claim:g} capped at {weights[i]:g}")
            if i in clipped:
                why.append("update clipped to the round's norm bound")
            if pulled and pulled[i] < OPPOSED_PULL:
                why.append(f"update pulls against the others' consensus ({pulled[i]:.1f} clients)")
            if i in bounded:
                why.append("scaled to the pull bound")
            if why and len(self.suspects) < MAX_RECORDED:
                node = msg.metadata.src_node_id
                self.suspects.append(f"round {server_round}: node {node}: {'; '.join(why)}")

    def round_suspects(self, server_round: int) -> list[str]:
        """The `suspects` entries of `server_round`."""
        return [s for s in self.suspects if s.startswith(f"round {server_round}: ")]

    def round_problem(self, server_round: int) -> str | None:
        """Why the aggregate of `server_round` was not used (an invariant broken), or None."""
        prefix = f"round {server_round}: the aggregate: "
        return next((d[len(prefix) :] for d in self.dropped if d.startswith(prefix)), None)

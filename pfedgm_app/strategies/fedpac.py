"""Server side of FedPAC (Xu, Tong & Huang, ICLR 2023): generator averaging, global prototypes and
the per-client classifier combination.

Usable by any Flower project whose clients put, in the reply's `wire.EXTRAS` ArrayRecord, their head
arrays (names given by `head_keys`), `protos` (K, d) class means, `class-counts` (K,),
`variance` (1,) = V_i and `h-ref` (K, d) = H_i (FedPAC's feature statistics). The generator travels
in the usual "arrays" record and is averaged by `num-examples`. Each message to a node then
carries, in `wire.EXTRAS`, the global prototypes (`protos`, `protos-count`) and, once the node has
trained, the head combined for it.

What the server knows bounds the statistics (docs/robustness.md): a reply's class counts sum to at
most its `num-examples` (`reply_problem`), and the rows of `protos` and `h-ref` and the variance
are clipped to the round's scale (`prototype_bound`, `FedPAC.bounded`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from logging import WARNING
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, Message
from flwr.common import log

from pfedgm_app.protocol import wire

from .contract import arrays_problem
from .personalized_fedavg import PersonalizedFedAvg


def simplex_qp(P: np.ndarray, iterations: int = 5000, tol: float = 1e-10) -> np.ndarray:
    """argmin_a a^T P a subject to a >= 0, sum(a) = 1, for a symmetric PSD P.

    Accelerated projected gradient (FISTA) with step 1/L, L = 2 lambda_max(P); the problem is
    small (one variable per participating client), so this replaces a generic QP solver.
    """
    m = len(P)
    step = 1.0 / max(2 * np.linalg.eigvalsh(P).max(), 1e-12)
    a = prev = np.full(m, 1.0 / m)
    t = 1.0
    for _ in range(iterations):
        t_next = (1 + np.sqrt(1 + 4 * t * t)) / 2
        v = a + (t - 1) / t_next * (a - prev)
        prev, a = a, project_simplex(v - step * 2 * P @ v)
        t = t_next
        if np.abs(a - prev).max() < tol:
            break
    return a


def project_simplex(v: np.ndarray) -> np.ndarray:
    """Euclidean projection onto the probability simplex (Duchi et al., 2008)."""
    u = np.sort(v)[::-1]
    css = np.cumsum(u) - 1
    rho = np.nonzero(u * np.arange(1, len(v) + 1) > css)[0][-1]
    return np.maximum(v - css[rho] / (rho + 1), 0.0)


def combination_weights(
    variances: np.ndarray, h_refs: np.ndarray, i: int, threshold: float = 1e-3
) -> np.ndarray:
    """FedPAC's classifier-combination weights alpha_i over the m participants (Eq. 11 of the
    FedPAC paper, as solved by the authors' `get_head_agg_weight`).

    Minimizes alpha^T P alpha on the simplex with P = diag(V) + D D^T, D_j = vec(H_i - H_j), i.e.
    sum_j alpha_j^2 V_j + ||sum_j alpha_j (H_i - H_j)||_F^2: the estimated test loss bound of
    client i when its head is sum_j alpha_j w_j. Negative eigenvalues (round-off) are clipped;
    weights below `threshold` are zeroed and the rest renormalized, as in the authors' code.
    """
    d = (h_refs[i][None] - h_refs).reshape(len(h_refs), -1)
    P = np.diag(variances) + d @ d.T
    vals, vecs = np.linalg.eigh((P + P.T) / 2)
    P = (vecs * np.clip(vals, 0, None)) @ vecs.T
    alpha = simplex_qp(P)
    alpha = np.where(alpha > threshold, alpha, 0.0)
    return alpha / alpha.sum()


# The statistics' bound, in the round's median client: a vote each, not a step (the influence
# bound's c, `clip-ratio`, bounds the updates and may go down to 1, where half of the honest
# class means would be scaled); 5 stays above every honest round measured (3.1 at most).
STATISTICS_RATIO = 5.0


def prototype_bound(protos: np.ndarray, counts: np.ndarray, clip_ratio: float) -> float | None:
    """The most a row of `protos` (m, K, d) or of `h-ref` may weigh this round: `clip_ratio`
    times the median over clients of each one's median norm of the class means it holds
    (count > 0). One number per client, so that a client's many rows are one vote. None
    (nothing clipped) with fewer than three voters or a zero median: no scale to stand for the
    round, as in `influence.typical`.

    Honest class means of one round have norms of one scale (post-LeakyReLU CNN features of one
    generator): on CIFAR-10/100 partitions, at initialization, after training and after one
    local epoch per client, the largest held row was at most 3.1 times this median (so was one
    sample's feature: a class held by one sample) and the largest `h-ref` row (p_k mu_k, never
    above the mean's norm) 1.1 times, in every round of 10 clients drawn, so the default ratio
    10 leaves honest rows as sent."""
    norms = np.linalg.norm(protos.astype(np.float64), axis=-1)  # (m, K)
    held = counts > 0
    votes = [float(np.median(n[h])) for n, h in zip(norms, held, strict=True) if h.any()]
    if not clip_ratio or len(votes) < 3 or (median := float(np.median(votes))) <= 0:
        return None
    return clip_ratio * median


def clip_rows(x: np.ndarray, bound: float) -> tuple[np.ndarray, np.ndarray]:
    """(x (m, ..., d) with every row of norm above `bound` > 0 scaled down to it, its direction
    kept and every other row as sent, to the last bit; which of the m clients had one scaled)."""
    norms = np.linalg.norm(x.astype(np.float64), axis=-1, keepdims=True)
    scaled = (norms > bound).reshape(len(x), -1).any(1)
    return (x * (bound / np.maximum(norms, bound))).astype(x.dtype), scaled


class FedPAC(PersonalizedFedAvg):
    """FedPAC: FedAvg of the generator; global prototypes c_k = sum_i n_ik c_ik / sum_i n_ik over
    this round's participants; each participant's next head = sum_j alpha_ij w_j over the
    participants' post-training heads (`combination_weights`).

    Parameters
    ----------
    head_keys : names of the head's arrays in the clients' extras.
    weight_threshold : combination weights below it are dropped (1e-3 as in FedPAC's code).
    **kwargs : any argument of `PersonalizedFedAvg` / `flwr.serverapp.strategy.FedAvg`.
    """

    outside_privacy = PersonalizedFedAvg.outside_privacy + "; the extras: each client's head, "
    outside_privacy += "class prototypes and counts, and feature statistics"

    def __init__(
        self,
        *,
        head_keys: Sequence[str] = ("head.weight", "head.bias"),
        weight_threshold: float = 1e-3,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        self.head_keys = tuple(head_keys)
        self.weight_threshold = weight_threshold
        self.global_protos: np.ndarray | None = None
        self.protos_count: np.ndarray | None = None
        self.heads: dict[int, dict[str, np.ndarray]] = {}
        self.last_weights: dict[int, dict[int, float]] = {}  # node -> {node: alpha}, for logs

    def state(self) -> dict[str, Any]:
        """The global prototypes and each client's combined head (by its partition id), with
        the sampling state."""
        by = self.node_partitions
        heads = {n if by is None else by[n]: h for n, h in self.heads.items()}
        return {
            **super().state(),
            "protos": self.global_protos,
            "protos-count": self.protos_count,
            "heads": heads,
        }

    def load_state(self, state: Mapping[str, Any]) -> None:
        super().load_state(state)
        self.global_protos, self.protos_count = state["protos"], state["protos-count"]
        node = {p: n for n, p in (self.node_partitions or {}).items()}
        self.heads = {node.get(p, p): h for p, h in state["heads"].items()}

    def extras_problem(self, extras: ArrayRecord) -> str | None:
        """The statistics FedPAC's combination needs, of consistent shapes: `protos` and
        `h-ref` (K, d) as the global prototypes', `class-counts` (K,) and `variance` (1,)
        non-negative, the counts whole numbers, and the head's arrays."""
        needed = [wire.PROTOS, wire.CLASS_COUNTS, wire.VARIANCE, wire.H_REF, *self.head_keys]
        if missing := [k for k in needed if k not in extras]:
            return f"extras lack {missing}"
        if problem := arrays_problem(extras):
            return problem
        protos = extras[wire.PROTOS].numpy()
        expected = self.global_protos.shape if self.global_protos is not None else protos.shape
        shapes = {
            wire.PROTOS: expected,
            wire.H_REF: expected,
            wire.CLASS_COUNTS: expected[:1],
            wire.VARIANCE: (1,),
        }
        for key, shape in shapes.items():
            if len(expected) != 2 or tuple(extras[key].shape) != tuple(shape):
                return f"extras '{key}' has shape {tuple(extras[key].shape)}, expected {shape}"
        for key in (wire.CLASS_COUNTS, wire.VARIANCE):
            if (extras[key].numpy() < 0).any():
                return f"extras '{key}' has negative entries"
        counts = extras[wire.CLASS_COUNTS].numpy()
        if (counts != np.round(counts)).any():
            return f"extras '{wire.CLASS_COUNTS}' are not whole numbers"
        return None

    def reply_problem(self, msg: Message, current: ArrayRecord | None) -> str | None:
        """`ReplyAdmission.reply_problem`, then the class counts against the reply's weight:
        they count the client's training samples (FedPAC's n_i = sum_k n_ik), so they sum to at
        most its `num-examples` claim, itself at most what its node reported (the contract).
        Counts above that are a broken contract, the reply dropped; counts within the claim but
        above the federation's cap on it (`weight_bound`) are scaled with the weight
        (`bounded`), as the weight is capped, not refused."""
        problem = super().reply_problem(msg, current)
        if problem or wire.EXTRAS not in msg.content.array_records:
            return problem
        counts = msg.content.array_records[wire.EXTRAS][wire.CLASS_COUNTS].numpy()
        total = float(counts.sum(dtype=np.float64))
        claim = self._claim(msg)
        if total > claim:
            return f"class counts sum to {total:g}, above its {self.weighted_by_key} ({claim:g})"
        return None

    def bounded(
        self, server_round: int, nodes: list[int], weights: np.ndarray, stats: dict[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        """The round's stacked statistics (`class-counts` (m, K), `protos` and `h-ref`
        (m, K, d), `variance` (m,)) within what the server knows; a warning names each client
        whose statistics were scaled. Honest rounds pass unchanged, to the last bit.

        - counts: at most the reply's weight (its claim capped by `weight_bound`) in sum.
        - `protos` rows at most `prototype_bound`: c_k is a convex combination of the clients'
          means, so one far mean moves it without bound. Clipped (as `influence`
          clips an update) rather than dropped: the bound needs every admitted reply, whose
          generators are averaged by now, and a clipped row moves c_k no further than a row
          at the bound, which the client could send anyway.
        - `h-ref` rows at the same bound, and V_i at most `STATISTICS_RATIO` times the round's
          median of V_j n_j, over n_i (V_i is a 1/n_i-scaled feature energy: 2.9x the median at
          most on the measured partitions). A huge H_j or V_j only lowers client j's own
          alpha_ij, but sets `simplex_qp`'s step (1 / lambda_max(P)): with H_j or V_j of 1e6
          the honest clients' weights stay near the uniform start (measured: alphas off by up
          to 0.9 for ten honest clients), so an unbounded one degrades everyone's head.
        """
        n = stats[wire.CLASS_COUNTS].sum(1, dtype=np.float64)
        over = n > weights
        if over.any():
            stats[wire.CLASS_COUNTS] = (
                stats[wire.CLASS_COUNTS] * np.where(over, weights / np.maximum(n, 1), 1.0)[:, None]
            )
        scaled = {wire.CLASS_COUNTS: over}
        ratio = STATISTICS_RATIO if self.clip_ratio else 0.0  # clip-ratio 0: nothing bounded
        bound = prototype_bound(stats[wire.PROTOS], stats[wire.CLASS_COUNTS], ratio)
        if bound is not None:
            for key in (wire.PROTOS, wire.H_REF):
                stats[key], scaled[key] = clip_rows(stats[key], bound)
            v, n = stats[wire.VARIANCE], np.maximum(n, 1)
            v_bound = ratio * float(np.median(v * n)) / n
            stats[wire.VARIANCE], scaled[wire.VARIANCE] = np.minimum(v, v_bound), v > v_bound
        for i, node in enumerate(nodes):
            if names := [key for key, hit in scaled.items() if hit[i]]:
                log(WARNING, "round %d: node %d's %s scaled down to the round's bound",
                    server_round, node, ", ".join(names))  # fmt: skip
        return stats

    def extras_for(self, node_id: int) -> ArrayRecord | None:
        arrays: dict[str, np.ndarray] = dict(self.heads.get(node_id, {}))
        if self.global_protos is not None:
            assert self.protos_count is not None  # set with the prototypes
            arrays[wire.PROTOS] = self.global_protos
            arrays[wire.PROTOS_COUNT] = self.protos_count
        return ArrayRecord({k: Array(v) for k, v in arrays.items()}) if arrays else None

    def aggregate_extras(
        self, server_round: int, arrays: ArrayRecord, extras: dict[int, tuple[float, ArrayRecord]]
    ) -> ArrayRecord:
        nodes = sorted(extras)
        stats = {n: {k: v.numpy() for k, v in extras[n][1].items()} for n in nodes}
        keys = (wire.CLASS_COUNTS, wire.PROTOS, wire.H_REF)  # (m, K), (m, K, d), (m, K, d)
        # Shapes are checked against the global prototypes only once there are some, and the
        # heads' never: replies of another shape (K, d or a head's) would make np.stack raise
        # in the server. The round's most common shapes are combined; the others' generators
        # are averaged, their statistics and heads not used.
        shapes = {n: tuple(stats[n][k].shape for k in (*keys, *self.head_keys)) for n in nodes}
        common = Counter(shapes.values()).most_common(1)[0][0]
        if odd := [n for n in nodes if shapes[n] != common]:
            why = "round %d: statistics of nodes %s are of other shapes than the round's: unused"
            log(WARNING, why, server_round, odd)
            nodes = [n for n in nodes if shapes[n] == common]
        stacked = {k: np.stack([stats[n][k] for n in nodes]) for k in keys}
        stacked[wire.VARIANCE] = np.array([float(stats[n][wire.VARIANCE][0]) for n in nodes])
        weights = np.array([extras[n][0] for n in nodes])
        stacked = self.bounded(server_round, nodes, weights, stacked)
        counts, protos = stacked[wire.CLASS_COUNTS], stacked[wire.PROTOS]
        total = counts.sum(0)
        mean = (counts[..., None] * protos).sum(0) / np.maximum(total, 1)[:, None]
        self.global_protos = mean.astype(protos.dtype)
        self.protos_count = total
        variances, h_refs = stacked[wire.VARIANCE], stacked[wire.H_REF]
        heads = {k: np.stack([stats[n][k] for n in nodes]) for k in self.head_keys}
        for i, node in enumerate(nodes):
            alpha = combination_weights(variances, h_refs, i, self.weight_threshold)
            self.heads[node] = {
                k: np.tensordot(alpha, h, axes=1).astype(h.dtype) for k, h in heads.items()
            }
            self.last_weights[node] = {nodes[j]: float(a) for j, a in enumerate(alpha) if a > 0}
        return arrays

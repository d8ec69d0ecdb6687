"""Server side of FedPAC (Xu, Tong & Huang, ICLR 2023): generator averaging, global prototypes and
the per-client classifier combination.

Usable by any Flower project whose clients put, in the reply's `wire.EXTRAS` ArrayRecord, their head
arrays (names given by `head_keys`), `protos` (K, d) class means, `class-counts` (K,),
`variance` (1,) = V_i and `h-ref` (K, d) = H_i (FedPAC's feature statistics). The generator travels
in the usual "arrays" record and is averaged by `num-examples`. Each message to a node then
carries, in `wire.EXTRAS`, the global prototypes (`protos`, `protos-count`) and, once the node has
trained, the head combined for it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord

from .. import wire
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
        non-negative, and the head's arrays."""
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
        return None

    def extras_for(self, node_id: int) -> ArrayRecord | None:
        arrays: dict[str, np.ndarray] = dict(self.heads.get(node_id, {}))
        if self.global_protos is not None:
            arrays[wire.PROTOS] = self.global_protos
            arrays[wire.PROTOS_COUNT] = self.protos_count
        return ArrayRecord({k: Array(v) for k, v in arrays.items()}) if arrays else None

    def aggregate_extras(
        self, server_round: int, arrays: ArrayRecord, extras: dict[int, tuple[float, ArrayRecord]]
    ) -> ArrayRecord:
        nodes = sorted(extras)
        stats = {n: {k: v.numpy() for k, v in extras[n][1].items()} for n in nodes}
        counts = np.stack([stats[n][wire.CLASS_COUNTS] for n in nodes])  # (m, K)
        protos = np.stack([stats[n][wire.PROTOS] for n in nodes])  # (m, K, d)
        total = counts.sum(0)
        mean = (counts[..., None] * protos).sum(0) / np.maximum(total, 1)[:, None]
        self.global_protos = mean.astype(protos.dtype)
        self.protos_count = total
        variances = np.array([float(stats[n][wire.VARIANCE].reshape(-1)[0]) for n in nodes])
        h_refs = np.stack([stats[n][wire.H_REF] for n in nodes])
        heads = {k: np.stack([stats[n][k] for n in nodes]) for k in self.head_keys}
        for i, node in enumerate(nodes):
            alpha = combination_weights(variances, h_refs, i, self.weight_threshold)
            self.heads[node] = {
                k: np.tensordot(alpha, h, axes=1).astype(h.dtype) for k, h in heads.items()
            }
            self.last_weights[node] = {nodes[j]: float(a) for j, a in enumerate(alpha) if a > 0}
        return arrays

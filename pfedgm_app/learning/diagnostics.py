"""What Phase 1 is doing on a client, as numbers per round (torch only).

The quantities that explain pFedGM's training dynamics (`train_round` returns them as metrics;
the strategy averages them over the round's clients by weight into `rounds.jsonl`):

- `loss-shared`, `loss-personalized`: H (Eq. LossH) and R_c (Eq. LossR) apart, each the mean
  over the round's sample-passes (R_c unweighted by lambda);
- `saturated-fraction`: the share of the round's sample-passes whose P_y > `SATURATED`, where
  H's gradient on z, mu_y - sum_i P_i mu_i, has all but vanished;
- at the round's start, on the global model received (eval mode, no dropout, one batch or the
  features the prototypes are computed from: no random draw, so no number of training
  changes): `z-norm` (mean ||z||), `mu-norm` (mean ||mu_k||), `within-class-variance` (mean
  over samples of ||z - upsilon_y||^2 / d, what R_c shrinks), `saturated-fraction-start` and
  `covariance-norm` (||A||, Frobenius); the navigator's regime: `mu-centroid-distance` and
  `mu-centroid-cosine` (||mu_k - upsilon_k|| and cos(mu_k, upsilon_k), averaged over the classes
  the client holds: do the means reach their class centroids, as the paper's Fig. Navigation
  says they align?), `centroid-norm` (mean ||upsilon_k|| over those classes, the scale mu_k
  would reach), `logit-margin` (mean over samples of the navigator's logit of the true class
  minus the best other's: the logits' scale) and `covariance-deviation` (mean |A - 1|, how far
  nu has moved from nu^0 = E); with run-config `gradient-diagnostics`, also
  `grad-norm-shared` and `grad-norm-personalized`, the norms over phi of the gradients of H
  and of lambda R_c on the client's first batch, and `grad-share-personalized` =
  |lambda grad R_c| / (|grad H| + |lambda grad R_c|).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from pfedgm_app.protocol.wire import PFEDGM_METRICS

from .gaussian import GaussianHead, gaussian_logits, personalized_objective, shared_objective
from .training import evaluating

SATURATED = 0.99  # P_y above this: H is saturated on the sample
KEYS = PFEDGM_METRICS[:-1]  # the wire's names of what this module reports


def saturated(nll: torch.Tensor) -> torch.Tensor:
    """How many samples have P_y > `SATURATED`, from their H = -log P_y (`nll`, per sample, as
    the step computes it: no second softmax), a 0-d tensor: no host sync per batch."""
    return (nll.detach() < -math.log(SATURATED)).sum()


class RoundMeter:
    """Sums of H, R_c and saturated samples over a round's steps, kept as tensors."""

    def __init__(self) -> None:
        self.sums: dict[str, torch.Tensor | float] = {}
        self.passes = 0

    def add(self, n: int, **values: torch.Tensor) -> None:
        for key, value in values.items():
            self.sums[key] = self.sums.get(key, 0.0) + value.detach() * n
        self.passes += n

    def add_count(self, key: str, count: torch.Tensor) -> None:
        self.sums[key] = self.sums.get(key, 0.0) + count

    def means(self) -> dict[str, float]:
        return {key: float(total) / max(self.passes, 1) for key, total in self.sums.items()}


def round_start(
    head: GaussianHead, z: torch.Tensor, y: torch.Tensor, prototypes: torch.Tensor
) -> dict[str, float]:
    """The round-start statistics (module docstring) of the global model on one client: `z`,
    `y` its training features and labels, `prototypes` their class means."""
    with torch.no_grad():
        logits = gaussian_logits(z, head.mu, head.b, per_sample=False)
        nll = F.cross_entropy(logits, y, reduction="none")
        return {
            "z-norm": float(z.norm(dim=1).mean()),
            "mu-norm": float(head.mu.norm(dim=1).mean()),
            "within-class-variance": float(((z - prototypes[y]) ** 2).mean()),
            "saturated-fraction-start": float(saturated(nll)) / max(len(y), 1),
            "covariance-norm": float(head.A.norm()),
            **_regime(head, logits, y, prototypes),
        }


def _regime(
    head: GaussianHead, logits: torch.Tensor, y: torch.Tensor, prototypes: torch.Tensor
) -> dict[str, float]:
    """The navigator's regime (module docstring): means against the client's centroids over the
    classes it holds, the logits' margin, nu's distance from E."""
    held = torch.bincount(y, minlength=head.mu.shape[0]) > 0
    mu, centroids = head.mu[held], prototypes[held]
    true = logits.gather(1, y[:, None]).squeeze(1)
    others = logits.scatter(1, y[:, None], float("-inf")).max(1).values
    return {
        "mu-centroid-distance": float((mu - centroids).norm(dim=1).mean()),
        "mu-centroid-cosine": float(F.cosine_similarity(mu, centroids, dim=1).mean()),
        "centroid-norm": float(centroids.norm(dim=1).mean()),
        "logit-margin": float((true - others).mean()) if len(y) and len(held) > 1 else 0.0,
        "covariance-deviation": float((head.A - 1).abs().mean()),
    }


def gradient_share(
    generator: nn.Module,
    head: GaussianHead,
    prototypes: torch.Tensor,
    batch: tuple[torch.Tensor, torch.Tensor],
    lambda_: float,
    objective_scale: str = "mean",
) -> dict[str, float]:
    """The round-start gradients (module docstring) of H and lambda R_c on phi, taken on
    `batch`: one forward and two backward passes, so only when asked (`gradient-diagnostics`)."""
    params = [p for p in generator.parameters() if p.requires_grad]
    xb, yb = batch
    with evaluating(generator), torch.enable_grad():
        zb = generator(xb)
        h = shared_objective(zb, yb, head)
        g_shared = torch.autograd.grad(h, params, retain_graph=True, allow_unused=True)
        r = lambda_ * personalized_objective(zb, yb, prototypes, objective_scale)
        g_personal = torch.autograd.grad(r, params, allow_unused=True)
    shared, personal = _norm(g_shared), _norm(g_personal)
    return {
        "grad-norm-shared": shared,
        "grad-norm-personalized": personal,
        "grad-share-personalized": personal / (shared + personal) if shared + personal else 0.0,
    }


def _norm(grads: tuple[torch.Tensor | None, ...]) -> float:
    squares = [g.pow(2).sum() for g in grads if g is not None]
    return float(torch.stack(squares).sum().sqrt()) if squares else 0.0

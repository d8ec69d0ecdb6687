"""pFedGM math, Phase 1: the Gaussian classifier, its objectives and the class prototypes.

Depends on torch only, so any generator (phi) producing a representation z can use it.

Notation (paper, Sec. Method): K classes, z in R^d. The navigator psi = {mu_k, b_k} and the
diagonal covariance nu = {A_k} (A_k = S_k^-1, kept positive) define

    rho_k(z) = exp(-1/2 (z - mu_k)^T A_k (z - mu_k) + b_k),   P_k = rho_k / sum_i rho_i,
    H(phi, psi, nu) = -log P_y.

Phase 1 trains phi and psi on H with A = I (Eq. LossH) plus lambda * R_c (Eq. LossR), while nu
is co-updated on H with phi and psi held fixed (Eq. cov_approx). Phase 2's head, fitted on
these with phi frozen, is `adaptation.PersonalizedHead`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from pfedgm_app.runconfig.readings import OBJECTIVE_SCALES, PROTOTYPE_STEPS, check_choice

POSITIVE_FLOOR = 1e-4
"""The smallest diagonal precision `project_` keeps after each step (A stays positive)."""


def gaussian_logits(
    z: torch.Tensor,
    mu: torch.Tensor,
    b: torch.Tensor | float,
    A: torch.Tensor | None = None,
    per_sample: bool = True,
) -> torch.Tensor:
    """log rho_k(z) = -1/2 (z - mu_k)^T diag(A_k) (z - mu_k) + b_k, shape (n, K).

    A is (K, d), (d,) shared by all classes, or None for the identity (Eq. LossH). Expanded
    into matmuls (addmm) so the cost is that of a linear layer, not an (n, K, d) tensor:

        log rho_k(z) = z^T (A_k mu_k) - 1/2 (z * z)^T A_k + (b_k - 1/2 mu_k^T A_k mu_k).

    With A = I the term -1/2 z^T z is the same for every class: the softmax, its argmax and
    H do not see it, and `per_sample=False` leaves it out (a training step's fewer ops).
    """
    if A is None:
        logits = torch.addmm(b - 0.5 * (mu * mu).sum(1), z, mu.T)
        return logits - 0.5 * (z * z).sum(1, keepdim=True) if per_sample else logits
    A = A.expand_as(mu)
    a_mu = A * mu
    logits = torch.addmm(b - 0.5 * (a_mu * mu).sum(1), z, a_mu.T)
    return torch.addmm(logits, z * z, A.T, alpha=-0.5)


# The scale of mu^0's Gaussian, the one choice Algorithm 1 leaves open in psi^0 ("random
# Gaussian weights"): run-config `navigator-std`, the standard deviation of mu^0's coordinates.
# - 1/sqrt(d) (the default; 0.088 for the 128-d CNNs, 0.044 for TinyImageNet's 512-d): a
#   layer-style init with ||mu_k|| near 1 (`navigator_std=None`, run-config 0).
# - 1: N(0, 1), the literal reading, every run before the study. ||mu_k|| starts near sqrt(d).
# b_k trains, so the -1/2 ||mu_k||^2 of the logits is absorbed in the bias and with A = I the
# navigator acts as a linear layer of weights mu: the std sets that layer's starting scale,
# and with it H's gradient on z (mu_y - sum_i P_i mu_i) against R_c's.
# docs/notes/navigator-init.md compares 1 and 1/sqrt(d) at 30 rounds on the test sets;
# docs/notes/navigator-std.md is the 200-round study on validation that chose 1/sqrt(d): 3.26
# points per client above 1 on CIFAR-100 Dir(0.5) (se 0.61), where R_c then counts.


class GaussianHead(nn.Module):
    """Navigator psi = {mu (K, d), b (K)} and covariance nu = {A (K, d), diagonal precision}.

    `forward` gives the navigator's logits (A = I), the classifier Phase 1 trains and that
    FedAvg-style evaluation of the global model uses; `covariance_logits` uses nu.
    """

    def __init__(self, num_classes: int, dim: int, navigator_std: float | None = None) -> None:
        super().__init__()
        # Algorithm 1: psi^0 "random Gaussian weights", nu^0 = identity. The paper gives no
        # scale: `navigator_std` is mu^0's, None 1/sqrt(d) (`navigator-std`, comment above).
        std = dim**-0.5 if navigator_std is None else navigator_std
        if not std > 0:
            raise ValueError(f"navigator_std must be > 0 (None: 1/sqrt(d)), got {std!r}")
        self.mu = nn.Parameter(torch.randn(num_classes, dim) * std)
        """The class means (K, d), the navigator's; averaged by the strategy as `head.mu`."""
        self.b = nn.Parameter(torch.zeros(num_classes))
        """The class biases (K), the navigator's; `head.b`, the strategy's `bias_key`."""
        self.A = nn.Parameter(torch.ones(num_classes, dim))
        """The diagonal precisions (K, d), the covariance nu; `head.A`, kept positive."""

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """The navigator's logits of features `z` (N, d) -> (N, K), with A = identity."""
        return gaussian_logits(z, self.mu, self.b)

    def covariance_logits(self, z: torch.Tensor) -> torch.Tensor:
        """The logits of features `z` (N, d) -> (N, K) with the covariance A (nu)."""
        return gaussian_logits(z, self.mu, self.b, self.A)

    @torch.no_grad()
    def project_(self) -> None:
        """Keep the diagonal precision positive (projected gradient step)."""
        self.A.clamp_(min=POSITIVE_FLOOR)


def shared_objective(z: torch.Tensor, y: torch.Tensor, head: GaussianHead) -> torch.Tensor:
    """Eq. (LossH): H(phi, psi, E), the negative log posterior with identity covariance (the
    logits' per-sample constant -1/2 z^T z left out: H and its gradients are the same)."""
    return F.cross_entropy(gaussian_logits(z, head.mu, head.b, per_sample=False), y)


def covariance_objective(z: torch.Tensor, y: torch.Tensor, head: GaussianHead) -> torch.Tensor:
    """Eq. (cov_approx): H(phi, psi, nu) minimized w.r.t. nu alone (z, mu, b detached)."""
    logits = gaussian_logits(z.detach(), head.mu.detach(), head.b.detach(), head.A)
    return F.cross_entropy(logits, y)


# The scale at which the personalized terms enter, a reading the paper leaves open. Eq. (LossR)
# divides R_c by d ("d is the feature dimension used to scale the function value") and zeta
# of Eq. (LossC) carries lambda/d, while the shared objective H sums its quadratic form over
# the d coordinates undivided; so with lambda = 1 R_c weighs 1/d of a term of H's size.
# - "mean": the 1/d as printed (the default): R_c = 1/d E||z - upsilon||^2, zeta's lambda/d;
# - "sum": without it, R_c = E||z - upsilon||^2 and zeta's lambda, on H's scale
#   (`readings.OBJECTIVE_SCALES`).


def personalized_objective(
    z: torch.Tensor, y: torch.Tensor, prototypes: torch.Tensor, objective_scale: str = "mean"
) -> torch.Tensor:
    """Eq. (LossR): R_c = 1/d E[||z - E[z | y, c]||^2 | c], with the prototypes upsilon in place of
    E[z | y, c] and held constant: Theorem 1 shows this gives the gradient of R_c. The mean
    squared error over all n x d entries is exactly 1/n sum_j 1/d ||z_j - upsilon_{y_j}||^2;
    `objective_scale` "sum" drops the 1/d (`OBJECTIVE_SCALES`).
    """
    check_choice("objective_scale", objective_scale, OBJECTIVE_SCALES)
    loss = F.mse_loss(z, prototypes.detach()[y])
    return loss if objective_scale == "mean" else loss * z.shape[1]


@torch.no_grad()
def class_means(
    z: torch.Tensor, y: torch.Tensor, num_classes: int, fallback: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-class means of z (K, d) and counts (K,); classes with no sample take `fallback`."""
    onehot = F.one_hot(y, num_classes).to(z.dtype)  # sums and counts in one matmul
    counts = onehot.sum(0)
    means = torch.where(counts[:, None] > 0, onehot.T @ z / counts.clamp(min=1)[:, None], fallback)
    return means, counts


# Algorithm 1 updates upsilon "with a stepsize" and gives none. The readings:
# - "epoch" (the default): eta_k = n_k(batch) / N_k(client), a moving average whose memory is
#   about one local epoch: every sample of class k enters once an epoch, so the estimate is
#   refreshed at the rate the data are revisited, and a small class is not one batch's mean;
# - "batch": eta_k = 1, upsilon_k becomes the batch's mean of class k (memory of one batch);
# - "none": eta_k = 0, upsilon stays the exact means of the round's start
#   (`readings.PROTOTYPE_STEPS`).


@torch.no_grad()
def update_prototypes_(
    prototypes: torch.Tensor,
    z: torch.Tensor,
    y: torch.Tensor,
    class_counts: torch.Tensor,
    step: str = "epoch",
) -> None:
    """Algorithm 1, "update upsilon using D_i^{r,j,s} with a stepsize", in place, with the step
    size `step` (`PROTOTYPE_STEPS`). A class absent from the batch keeps its prototype."""
    check_choice("prototype_step", step, PROTOTYPE_STEPS)
    if step == "none":
        return
    batch_means, batch_counts = class_means(z.detach(), y, prototypes.shape[0], prototypes)
    if step == "batch":
        eta = (batch_counts > 0).to(z.dtype)[:, None]
    else:
        eta = (batch_counts / class_counts.clamp(min=1)).clamp(max=1.0)[:, None]
    prototypes.mul_(1 - eta).add_(eta * batch_means)

"""pFedGM's Phase 2 math, Personalized Classifier Adaptation (paper, Sec. Method): the
personalized Gaussian head of Eq. (LossC) / (ctest), its fine-tuning by SGD and the granular
adaptation of its biases by L-BFGS. Torch only; the global head it starts from is
`gaussian.GaussianHead` (psi*, nu* of Phase 1).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from pfedgm_app.runconfig.readings import LBFGS_LINE_SEARCHES, OBJECTIVE_SCALES, check_choice

from .gaussian import POSITIVE_FLOOR, gaussian_logits


class PersonalizedHead(nn.Module):
    """Phase 2 classifier, Eq. (LossC) / (ctest): logits_i = xi_i + zeta_i + beta_i with

        xi_i   = -1/2 (z - mu*_i - mu_i)^T A_g A*_i (z - mu*_i - mu_i)     (global knowledge)
        zeta_i = -lambda/d (z - upsilon*_i)^T A_c (z - upsilon*_i)          (local knowledge)
        beta_i = b*_i + b_i

    Trainable: psi offsets {mu_i, b_i} (init 0) and A_g, A_c (diagonal, shared by all classes as
    the paper's notation has no class index, init identity, kept positive). mu*, b*, A* come from
    Phase 1, upsilon* from the client's features. `objective_scale` "sum" drops zeta's 1/d
    (`OBJECTIVE_SCALES`).
    """

    mu_star: torch.Tensor  # Phase 1's mu*, b*, A* and the features' upsilon*: buffers
    b_star: torch.Tensor
    A_star: torch.Tensor
    upsilon: torch.Tensor

    def __init__(
        self,
        mu_star: torch.Tensor,
        b_star: torch.Tensor,
        A_star: torch.Tensor,
        upsilon: torch.Tensor,
        lambda_: float,
        objective_scale: str = "mean",
    ) -> None:
        super().__init__()
        check_choice("objective_scale", objective_scale, OBJECTIVE_SCALES)
        num_classes, dim = mu_star.shape
        for name, t in (("mu_star", mu_star), ("b_star", b_star), ("A_star", A_star)):
            self.register_buffer(name, t.detach().clone())
        self.register_buffer("upsilon", upsilon.detach().clone())
        self.lambda_, self.objective_scale = lambda_, objective_scale
        self.mu = nn.Parameter(mu_star.new_zeros(num_classes, dim))  # mu*'s device and dtype
        """The offsets mu_i of the global means mu* (K, d), trained by Phase 2's SGD."""
        self.b = nn.Parameter(mu_star.new_zeros(num_classes))
        """The offsets b_i of the global biases b* (K): SGD, then L-BFGS (`refine_biases_`)."""
        self.a_g = nn.Parameter(mu_star.new_ones(dim))
        """A_g (d): the diagonal scaling of the global precisions A*, kept positive."""
        self.a_c = nn.Parameter(mu_star.new_ones(dim))
        """A_c (d): the diagonal precision of the local term zeta, kept positive."""

    @property
    def local_precision(self) -> torch.Tensor:
        """zeta as a Gaussian term: -lambda/d q^T A_c q = -1/2 q^T (2 lambda / d) A_c q (with
        `objective_scale` "sum": -lambda q^T A_c q, `OBJECTIVE_SCALES`)."""
        if self.objective_scale == "sum":
            return (2 * self.lambda_) * self.a_c
        return (2 * self.lambda_ / self.mu.shape[1]) * self.a_c

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """The logits xi + zeta + beta of features `z` (N, d) -> (N, K)."""
        return self.logits_but_b(z) + self.b

    def logits_but_b(self, z: torch.Tensor) -> torch.Tensor:
        """xi_i + zeta_i + b*_i: the logits without the trainable bias offsets b."""
        xi = gaussian_logits(z, self.mu_star + self.mu, 0.0, self.a_g * self.A_star)
        zeta = gaussian_logits(z, self.upsilon, 0.0, self.local_precision)
        return xi + zeta + self.b_star

    @torch.no_grad()
    def project_(self) -> None:
        """Keep A_g and A_c positive (projected gradient step, after every step)."""
        self.a_g.clamp_(min=POSITIVE_FLOOR)
        self.a_c.clamp_(min=POSITIVE_FLOOR)

    @torch.no_grad()
    def gaussian_form(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(S_hat, mu_hat, b_hat), each per class, with logits = log rho(z; mu_hat, S_hat^-1, b_hat)
        exactly (the product of the two Gaussian terms, paper's "updated covariance, mean, bias"):

            S_hat_i  = (A_g A*_i + 2 lambda/d A_c)^-1
            mu_hat_i = S_hat_i (A_g A*_i (mu*_i + mu_i) + 2 lambda/d A_c upsilon*_i)
            b_hat_i  = b*_i + b_i - 1/2 [m_i^T A_g A*_i m_i + 2 lambda/d upsilon*_i^T A_c upsilon*_i
                                         - mu_hat_i^T S_hat_i^-1 mu_hat_i],   m_i = mu*_i + mu_i.

        The paper prints b_hat without the factor -1/2 in front of the bracket; completing the
        square gives it, and the tests check this form against the logits.
        """
        m = self.mu_star + self.mu
        p_g = self.a_g * self.A_star
        p_c = self.local_precision.expand_as(p_g)
        precision = p_g + p_c
        mu_hat = (p_g * m + p_c * self.upsilon) / precision
        bracket = (p_g * m * m).sum(1) + (p_c * self.upsilon**2).sum(1)
        bracket = bracket - (precision * mu_hat**2).sum(1)
        return 1 / precision, mu_hat, self.b_star + self.b - 0.5 * bracket


def fine_tune_(
    head: PersonalizedHead,
    z: torch.Tensor,
    y: torch.Tensor,
    run_epochs: Callable[..., dict],
    epochs: int,
    lr: float,
    momentum: float,
    weight_decay: float,
) -> dict:
    """Phase 2 step 1: SGD on Eq. (LossC) over psi offsets, A_g and A_c, phi frozen."""
    opt = torch.optim.SGD(head.parameters(), lr=lr, momentum=momentum, weight_decay=weight_decay)
    return run_epochs(
        lambda zb, yb: F.cross_entropy(head(zb), yb), z, y, opt, epochs, after_step=head.project_
    )


# L-BFGS's step, a choice the paper leaves open ("The L-BFGS optimizer is run with a learning
# rate of 0.05, and a maximum of 10 internal iterations, for a total of 5 full training
# cycles", Sec. Training Setup): "none" takes each step at the learning rate as torch's L-BFGS
# does by default (the paper's "learning rate" read literally, the default); "strong-wolfe"
# searches each step's length under the strong Wolfe conditions, the rate only its first trial
# (`readings.LBFGS_LINE_SEARCHES`).


def refine_biases_(
    head: PersonalizedHead,
    z: torch.Tensor,
    y: torch.Tensor,
    lr: float,
    max_iter: int,
    cycles: int,
    line_search: str = "none",
) -> float:
    """Phase 2 step 2, the granular adaptation: L-BFGS on the biases b alone, Eq. (LossC) over all
    of the client's features, `cycles` calls of `max_iter` inner iterations, each step's length
    by `line_search` (`LBFGS_LINE_SEARCHES`, comment above). Returns the loss.

    b enters the logits as a sum, so the rest (`logits_but_b`) is computed once: each of the
    L-BFGS evaluations is then a softmax, with the same loss and gradient as the full head's.

    It runs on the CPU whatever the head's device: L-BFGS waits for the host at every
    evaluation, and on a GPU shared by several ClientApps each wait is a turn behind the
    others' kernels, while the problem is K numbers over an n x K table, small work for one
    CPU core. Only b goes back.
    """
    check_choice("line_search", line_search, LBFGS_LINE_SEARCHES)
    with torch.no_grad():
        fixed, target = head.logits_but_b(z).cpu(), y.cpu()
    b = head.b.detach().cpu().clone().requires_grad_()
    search = "strong_wolfe" if line_search == "strong-wolfe" else None
    opt = torch.optim.LBFGS([b], lr=lr, max_iter=max_iter, line_search_fn=search)

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = F.cross_entropy(fixed + b, target)
        loss.backward()
        return loss

    for _ in range(cycles):
        opt.step(closure)
    with torch.no_grad():
        head.b.copy_(b)
        return float(F.cross_entropy(fixed + b, target))  # = the head's loss, no second pass

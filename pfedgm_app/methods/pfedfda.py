"""pFedFDA (McLaughlin et al., NeurIPS 2024): personalized FL via feature distribution adaptation.

The head is a linear discriminant (LDA) classifier derived from Gaussian class-conditional
statistics: class means mu (K, d), one shared covariance Sigma (d, d), and the client's label
priors pi. Each round a client trains the generator only, with the head derived from the global
(mu, Sigma) and held fixed; it then estimates its local statistics from the features seen during
training, interpolates them with the global ones, beta * local + (1 - beta) * global (one beta
for the means, one for the covariance, chosen by `pfedfda-cv-folds`-fold cross-validation on
its own features), and sends the generator and the interpolated statistics; the server averages
both by `num-examples` (`strategies.PFedFDA`).

Reference: cj-mclaughlin/pFedFDA, `clients/client_fedfda.py: ClientFedFDA` (`train`,
`solve_beta`, `update`) and `servers/server_fedfda.py: ServerFedFDA.aggregate_models`; the
settings follow it.
"""

from __future__ import annotations

import operator
from functools import reduce

import torch
import torch.nn.functional as F
from torch import nn

from pfedgm_app.learning.models import Model, build_model
from pfedgm_app.learning.training import accuracy, apply_batched
from pfedgm_app.runconfig.method_settings import PFedFDASettings

from .base import ClientPlugin, ClientTask, Personalized, Reply

SHRINKAGE = 1e-4  # LDA's Sigma' = (1 - eps) Sigma + eps tr(Sigma)/d I, and the prior floor
COVARIANCE_RIDGE = 1.0  # identity added to the estimated covariance, as the authors' code does


class LDAHead(nn.Module):
    """logits = z W^T + c with W_k = Sigma'^-1 mu_k, c_k = -1/2 mu_k^T Sigma'^-1 mu_k + log pi_k.

    `mu` and `cov` (persistent buffers, what the server averages) hold the statistics; `weight`
    and `bias` (not persistent) the classifier `fit_` derived from them. No trainable parameter.
    """

    mu: torch.Tensor  # the buffers, as `register_buffer` sets them
    cov: torch.Tensor
    weight: torch.Tensor
    bias: torch.Tensor

    def __init__(self, num_classes: int, dim: int) -> None:
        super().__init__()
        self.register_buffer("mu", torch.rand(num_classes, dim))  # pFedFDA: uniform [0, 1)
        self.register_buffer("cov", torch.eye(dim))
        self.register_buffer("weight", torch.zeros(num_classes, dim), persistent=False)
        self.register_buffer("bias", torch.zeros(num_classes), persistent=False)
        self.fit_(self.mu, self.cov, torch.full((num_classes,), 1.0 / num_classes))

    @torch.no_grad()
    def fit_(self, mu: torch.Tensor, cov: torch.Tensor, priors: torch.Tensor) -> None:
        w, b = lda_parameters(mu, cov, priors)
        self.weight.copy_(w)
        self.bias.copy_(b)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return z @ self.weight.T + self.bias


def lda_parameters(
    mu: torch.Tensor, cov: torch.Tensor, priors: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(W, c) of the LDA classifier: the Gaussian log posterior up to a per-sample constant."""
    d = cov.shape[0]
    shrunk = (1 - SHRINKAGE) * cov + SHRINKAGE * torch.trace(cov) / d * torch.eye(d).to(cov)
    w = torch.linalg.solve(shrunk, mu.T).T
    return w, -0.5 * (mu * w).sum(1) + torch.log(priors)


def local_priors(y: torch.Tensor, num_classes: int) -> torch.Tensor:
    """The client's label distribution, floored at SHRINKAGE so no class is impossible."""
    p = torch.bincount(y, minlength=num_classes).float() / len(y) + SHRINKAGE
    return p / p.sum()


def gaussian_statistics(
    z: torch.Tensor, y: torch.Tensor, fallback_mu: torch.Tensor, min_count: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Local class means (the fallback for classes with <= `min_count` samples) and the pooled
    within-class covariance S / (N - 1) + COVARIANCE_RIDGE * I.
    """
    num_classes = fallback_mu.shape[0]
    counts = torch.bincount(y, minlength=num_classes).to(z.dtype)
    sums = z.new_zeros(num_classes, z.shape[1]).index_add_(0, y, z)
    sample_means = sums / counts.clamp(min=1)[:, None]
    centered = z - sample_means[y]
    cov = centered.T @ centered / max(len(z) - 1, 1)
    cov = cov + COVARIANCE_RIDGE * torch.eye(z.shape[1]).to(z)
    means = torch.where((counts > min_count)[:, None], sample_means, fallback_mu)
    return means, cov


def stratified_folds(y: torch.Tensor, folds: int, rng: torch.Generator) -> torch.Tensor:
    """A fold index per sample: within each class, a seeded shuffle dealt round-robin."""
    fold = torch.empty_like(y)
    for k in torch.unique(y):
        idx = torch.nonzero(y == k).flatten()
        idx = idx[torch.randperm(len(idx), generator=rng).to(idx.device)]
        fold[idx] = torch.arange(len(idx), device=y.device) % folds
    return fold


def choose_betas(
    z: torch.Tensor,
    y: torch.Tensor,
    global_mu: torch.Tensor,
    global_cov: torch.Tensor,
    priors: torch.Tensor,
    folds: int,
    rng: torch.Generator,
) -> tuple[float, float]:
    """pFedFDA's interpolation coefficients (beta_mu, beta_Sigma), each in [0, 1]: minimize the
    k-fold cross-validated cross-entropy of the LDA classifier built from
    beta * local + (1 - beta) * global statistics, by L-BFGS from 0.5 (10 iterations), as the
    authors do. Classes with fewer than `folds` samples are left out of the validation; with
    fewer than two classes left there is nothing to validate and the global statistics are used
    (beta = 0, as in the authors' code).
    """
    counts = torch.bincount(y, minlength=global_mu.shape[0])
    keep = counts[y] >= folds
    z, y = z[keep], y[keep]
    if torch.unique(y).numel() < 2:
        return 0.0, 0.0
    fold = stratified_folds(y, folds, rng)
    splits = []
    for f in range(folds):
        train, test = fold != f, fold == f
        mu, cov = gaussian_statistics(z[train], y[train], global_mu, folds)
        splits.append((mu, cov, z[test], y[test]))
    beta = torch.full((2,), 0.5, device=z.device, requires_grad=True)

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        b = beta.clamp(0, 1)
        loss: torch.Tensor = reduce(
            operator.add,
            (
                F.cross_entropy(z_te @ w.T + c, y_te)
                for mu, cov, z_te, y_te in splits
                for w, c in [lda_parameters(*_mix(b, mu, cov, global_mu, global_cov), priors)]
            ),
        )
        loss.backward()
        return loss

    optimizer = torch.optim.LBFGS(
        [beta], lr=1, max_iter=10, tolerance_grad=1e-3, line_search_fn="strong_wolfe"
    )
    with torch.enable_grad():
        optimizer.step(closure)
    b = beta.detach().clamp(0, 1)
    return float(b[0]), float(b[1])


def _mix(
    beta: torch.Tensor | tuple[float, float],
    mu: torch.Tensor,
    cov: torch.Tensor,
    global_mu: torch.Tensor,
    global_cov: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    return beta[0] * mu + (1 - beta[0]) * global_mu, beta[1] * cov + (1 - beta[1]) * global_cov


def lda_head(model: Model) -> LDAHead:
    """`model`'s head, the `LDAHead` that `PFedFDAClient.build_model` gives it."""
    assert isinstance(model.head, LDAHead)
    return model.head


class PFedFDAClient(ClientPlugin):
    """pFedFDA client: the generator trained under the fixed global LDA head; statistics adapted
    locally."""

    settings: PFedFDASettings  # what the registry gives it (`methods.METHODS`)

    def build_model(self, image_shape: tuple[int, int, int], num_classes: int) -> Model:
        return build_model(image_shape, lambda dim: LDAHead(num_classes, dim))

    def train(self, model: Model, task: ClientTask) -> Reply:
        generator, head, data = model.generator, lda_head(model), task.data
        priors = local_priors(data.y_train, data.num_classes)
        head.fit_(head.mu, head.cov, priors)
        seen_z, seen_y = [], []

        def step(xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
            z = generator(xb)
            seen_z.append(z.detach())
            seen_y.append(yb)
            return F.cross_entropy(head(model.dropout(z)), yb)

        metrics = task.epochs(step, generator.parameters(), task.cfg.local_epochs)
        # The statistics come from the features seen while training (all epochs), as in
        # pFedFDA's code: no extra forward pass.
        betas = self._adapt_(head, torch.cat(seen_z), torch.cat(seen_y), priors, task)
        return self.send(model, task, {**metrics, **betas})

    def personalize(self, model: Model, task: ClientTask) -> Personalized:
        """Statistics from the final generator's features of the train split, adapted as in
        training; the model is the final generator under the adapted LDA head."""
        head, data = lda_head(model), task.data
        z_train = apply_batched(model.generator, data.x_train)
        z_test = apply_batched(model.generator, data.x_test)
        uniform = torch.full((data.num_classes,), 1.0 / data.num_classes).to(z_train)
        head.fit_(head.mu, head.cov, uniform)
        result = {"acc-global": accuracy(head, z_test, data.y_test)}
        priors = local_priors(data.y_train, data.num_classes).to(z_train)
        result.update(self._adapt_(head, z_train, data.y_train, priors, task))
        return Personalized({**result, "accuracy": accuracy(head, z_test, data.y_test)}, model)

    def _adapt_(self, head: LDAHead, z: torch.Tensor, y: torch.Tensor, priors, task: ClientTask):
        """Set head.mu / head.cov to the interpolated statistics and fit the classifier."""
        folds = self.settings.cv_folds
        local_mu, local_cov = gaussian_statistics(z, y, head.mu, folds)
        b_mu, b_cov = choose_betas(z, y, head.mu, head.cov, priors, folds, task.rng)
        mu, cov = _mix((b_mu, b_cov), local_mu, local_cov, head.mu, head.cov)
        head.mu.copy_(mu)
        head.cov.copy_(cov)
        head.fit_(mu, cov, priors)
        return {"pfedfda-beta-mean": b_mu, "pfedfda-beta-cov": b_cov}

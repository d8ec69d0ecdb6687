"""The math of FedPAC, pFedMe and pFedFDA against closed forms and direct computation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from pfedgm_app.methods.fedpac import feature_statistics
from pfedgm_app.methods.pfedfda import (
    choose_betas,
    gaussian_statistics,
    lda_parameters,
    stratified_folds,
)
from pfedgm_app.methods.pfedme import moreau_step_
from pfedgm_app.strategies.fedpac import combination_weights, project_simplex, simplex_qp

# -- pFedMe: the inner problem ---------------------------------------------------------------


def _regression(lambda_=5.0, wd=0.1, n=40, d=6):
    g = torch.Generator().manual_seed(0)  # float64: the tolerance is not at float32's floor
    X = torch.randn(n, d, generator=g, dtype=torch.float64)
    t = torch.randn(n, generator=g, dtype=torch.float64)
    model = nn.Linear(d, 1, bias=False).double()
    w = torch.randn(1, d, generator=g, dtype=torch.float64)
    model.weight.data.copy_(w)

    def loss():
        return 0.5 * (model(X).squeeze(1) - t).pow(2).mean()

    # argmin 1/(2n)||X theta - t||^2 + lambda/2 ||theta - w||^2 + wd/2 ||theta||^2
    A = X.T @ X / n + (lambda_ + wd) * torch.eye(d, dtype=torch.float64)
    exact = torch.linalg.solve(A, X.T @ t / n + lambda_ * w.flatten())
    return model, [w], loss, exact


def test_pfedme_inner_problem_is_solved_to_the_stated_tolerance():
    model, anchor, loss, exact = _regression()
    _, norm = moreau_step_(model, anchor, loss, 5.0, 0.05, steps=10_000, tolerance=1e-8,
                           weight_decay=0.1)  # fmt: skip
    assert norm <= 1e-8
    # h is (lambda + wd)-strongly convex: ||theta - theta*|| <= ||grad h|| / (lambda + wd)
    torch.testing.assert_close(model.weight.data.flatten(), exact, atol=1e-8 / 5.1, rtol=0)


def test_pfedme_takes_k_gradient_evaluations_and_reports_the_last_one():
    model, anchor, loss, _ = _regression()
    calls = []

    def counted():
        calls.append(1)
        return loss()

    _, norm = moreau_step_(model, anchor, counted, 5.0, 0.05, steps=3, weight_decay=0.1)
    assert len(calls) == 3  # K = 3 forward/backward passes, as pFedMe's code
    # the norm reported is ||grad h|| where it was last evaluated: after 2 of the 3 steps
    before_last, anchor, loss, _ = _regression()  # the same problem, afresh
    moreau_step_(before_last, anchor, loss, 5.0, 0.05, steps=2, weight_decay=0.1)
    theta = before_last.weight
    h = loss() + 2.5 * (theta - anchor[0]).pow(2).sum() + 0.05 * theta.pow(2).sum()
    (grad,) = torch.autograd.grad(h, theta)
    assert norm == pytest.approx(grad.norm().item(), rel=1e-5)
    assert norm > 1e-3  # 3 steps do not converge: the tolerance is reported, not assumed
    assert not torch.equal(model.weight, before_last.weight)  # the 3rd step was taken
    with pytest.raises(ValueError, match="steps must be >= 1"):
        moreau_step_(model, anchor, loss, 5.0, 0.05, steps=0)


def test_pfedme_without_data_term_stays_at_the_global_model():
    model, anchor, _, _ = _regression()
    _, norm = moreau_step_(model, anchor, lambda: model.weight.sum() * 0, 5.0, 0.1, steps=5)
    assert norm == 0 and torch.equal(model.weight.data, anchor[0])


# -- FedPAC: statistics and classifier combination -------------------------------------------


def test_fedpac_feature_statistics_match_the_definition():
    g = torch.Generator().manual_seed(1)
    z, y, K = torch.randn(50, 5, generator=g), torch.randint(0, 3, (50,), generator=g), 4
    v, h, means = feature_statistics(z, y, K)
    n, v_ref = len(y), 0.0
    for k in range(K):
        zk = z[y == k]
        p = len(zk) / n
        if len(zk) == 0:
            assert not h[k].any()
            continue
        mu = zk.mean(0)
        torch.testing.assert_close(means[k], mu)
        torch.testing.assert_close(h[k], p * mu)
        v_ref += p * torch.trace(zk.T @ zk / len(zk)) - p**2 * (mu * mu).sum()
    assert v.item() == pytest.approx(v_ref.item() / n, rel=1e-5)


def test_simplex_projection_and_qp():
    rng = np.random.default_rng(0)
    p = project_simplex(rng.normal(size=7))
    assert p.min() >= 0 and p.sum() == pytest.approx(1)
    q = np.array([0.2, 0.5, 0.3])
    np.testing.assert_allclose(project_simplex(q), q)  # already on the simplex
    # diagonal P: a_j proportional to 1 / P_jj (Lagrange conditions, all weights positive)
    d = np.array([1.0, 2.0, 4.0])
    np.testing.assert_allclose(simplex_qp(np.diag(d)), (1 / d) / (1 / d).sum(), atol=1e-6)
    # a general PSD P: KKT conditions of min a^T P a on the simplex
    m = rng.normal(size=(6, 3))
    P = m @ m.T + np.diag(rng.uniform(0, 0.1, 6))
    a = simplex_qp(P)
    grad = 2 * P @ a
    active = a > 1e-8
    assert np.ptp(grad[active]) < 1e-5 and (grad[~active] >= grad[active].min() - 1e-5).all()


def test_fedpac_combination_weights():
    h = np.random.default_rng(0).normal(size=(4, 3, 5))
    # no variance term: the client's own head is unbeatable (zero bias, zero variance)
    np.testing.assert_allclose(combination_weights(np.zeros(4), h, 2), np.eye(4)[2], atol=1e-6)
    # identical statistics: every head is as good, the variance is shared out evenly
    same = np.repeat(h[:1], 4, axis=0)
    np.testing.assert_allclose(combination_weights(np.ones(4), same, 0), np.full(4, 0.25))
    # weights below the threshold are dropped and the rest renormalized
    a = combination_weights(np.array([1.0, 1.0, 1e6, 1e6]), same, 0)
    assert a[2] == a[3] == 0 and a.sum() == pytest.approx(1)


# -- pFedFDA: LDA head, statistics, interpolation coefficients --------------------------------


def test_lda_logits_are_the_gaussian_log_posterior():
    g = torch.Generator().manual_seed(2)
    K, d = 3, 4
    mu, m = torch.randn(K, d, generator=g), torch.randn(d, d, generator=g)
    cov, priors = m @ m.T + torch.eye(d), torch.tensor([0.2, 0.3, 0.5])
    z = torch.randn(10, d, generator=g)
    w, c = lda_parameters(mu, cov, priors)
    eps = 1e-4
    shrunk = (1 - eps) * cov + eps * torch.trace(cov) / d * torch.eye(d)
    diff = z[:, None, :] - mu[None]  # (n, K, d)
    maha = torch.einsum("nkd,de,nke->nk", diff, torch.linalg.inv(shrunk), diff)
    log_post = torch.log_softmax(-0.5 * maha + torch.log(priors), 1)
    torch.testing.assert_close(torch.log_softmax(z @ w.T + c, 1), log_post, atol=1e-4, rtol=0)


def test_pfedfda_statistics_are_class_means_and_pooled_covariance():
    g = torch.Generator().manual_seed(3)
    z, y = torch.randn(30, 3, generator=g), torch.tensor([0] * 14 + [1] * 14 + [2] * 2)
    fallback = torch.full((4, 3), 7.0)
    means, cov = gaussian_statistics(z, y, fallback, min_count=2)
    for k in (0, 1):
        torch.testing.assert_close(means[k], z[y == k].mean(0))
    assert torch.equal(means[2], fallback[2]) and torch.equal(means[3], fallback[3])
    centered = torch.cat([z[y == k] - z[y == k].mean(0) for k in range(3)])
    torch.testing.assert_close(cov, centered.T @ centered / 29 + torch.eye(3))


def test_stratified_folds_split_every_class_evenly():
    y = torch.tensor([0] * 7 + [1] * 4 + [2] * 2)
    fold = stratified_folds(y, 2, torch.Generator().manual_seed(0))
    for k in range(3):
        counts = torch.bincount(fold[y == k], minlength=2)
        assert (counts.max() - counts.min()) <= 1


def _gaussian_client(shift: float, n=200, K=3, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    centers = 3 * torch.randn(K, d, generator=g)
    y = torch.arange(n) % K
    z = centers[y] + torch.randn(n, d, generator=g)
    wrong = centers + shift * torch.randn(K, d, generator=g)  # "global" means
    return z, y, centers, wrong


@pytest.mark.parametrize("shift", [0.0, 3.0])
def test_pfedfda_betas_lie_in_unit_interval(shift):
    z, y, _, global_mu = _gaussian_client(shift)
    priors = torch.full((3,), 1 / 3)
    b_mu, b_cov = choose_betas(z, y, global_mu, torch.eye(8), priors, 2, torch.Generator())
    assert 0 <= b_mu <= 1 and 0 <= b_cov <= 1


def test_pfedfda_trusts_local_means_when_global_ones_are_wrong():
    z, y, _, global_mu = _gaussian_client(shift=4.0)
    b_mu, _ = choose_betas(z, y, global_mu, torch.eye(8), torch.full((3,), 1 / 3), 2,
                           torch.Generator().manual_seed(0))  # fmt: skip
    assert b_mu > 0.5

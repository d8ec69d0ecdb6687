"""Phase 2 against the closed forms of the paper's Method section (`learning.adaptation`):
products of Gaussians and re-sampling, the personalized head, the objective's scale, and the
fine-tuning and L-BFGS bias refinement."""

from __future__ import annotations

import functools
import math

import pytest
import torch
import torch.nn.functional as F

from pfedgm_app.learning.adaptation import PersonalizedHead, fine_tune_, refine_biases_
from pfedgm_app.learning.gaussian import (
    OBJECTIVE_SCALES,
    POSITIVE_FLOOR,
    class_means,
    gaussian_logits,
    personalized_objective,
)
from pfedgm_app.learning.training import run_epochs
from pfedgm_app.runconfig.readings import LBFGS_LINE_SEARCHES
from tests.gaussian_tensors import F64, _assert_close, _gen, _randn

pytestmark = pytest.mark.usefixtures("_one_thread")  # tiny tensors: one intra-op thread


# 5 -------------------------------------------------------------------------------------------


def _log_normal_diag(z, mean, var):
    return torch.distributions.Normal(mean, var.sqrt()).log_prob(z).sum(-1)


def _log_norm(var: torch.Tensor) -> torch.Tensor:
    """-1/2 log |2 pi diag(var)|, as a (1,) bias."""
    return -0.5 * torch.log(2 * math.pi * var).sum().reshape(1)


def test_product_of_gaussians_is_gaussian():
    """Sec. Re-sampling: N(mu,S) N(nu,Omega) is prop. to N(mu*,S*), S*=(S^-1+Omega^-1)^-1."""
    g = _gen(6)
    d = 3
    mu, nu = _randn(d, g=g), _randn(d, g=g)
    s = torch.rand(d, generator=g, dtype=F64) + 0.3
    omega = torch.rand(d, generator=g, dtype=F64) + 0.3
    s_star = 1 / (1 / s + 1 / omega)
    mu_star = s_star * (mu / s + nu / omega)
    z = 2 * _randn(20, d, g=g)
    diff = _log_normal_diag(z, mu, s) + _log_normal_diag(z, nu, omega)
    diff = diff - _log_normal_diag(z, mu_star, s_star)
    assert (diff.max() - diff.min()).item() < 1e-9
    # The same through gaussian_logits, log N(z; m, V) = log rho(z; m, A = V^-1, b = _log_norm(V)).
    via_logits = (
        gaussian_logits(z, mu[None], _log_norm(s), 1 / s)
        + gaussian_logits(z, nu[None], _log_norm(omega), 1 / omega)
        - gaussian_logits(z, mu_star[None], _log_norm(s_star), 1 / s_star)
    )[:, 0]
    _assert_close(via_logits, diff, 1e-10)


def test_weighted_resampling_monte_carlo():
    """Sec. Re-sampling: N(mu,S) samples weighted by N(z;nu,Omega) have mean mu*, cov S*."""
    g = _gen(7)
    mu = torch.tensor([0.0, 1.0], dtype=F64)
    s = torch.tensor([1.0, 2.0], dtype=F64)
    nu = torch.tensor([0.8, -0.5], dtype=F64)
    omega = torch.tensor([2.0, 1.5], dtype=F64)
    s_star = 1 / (1 / s + 1 / omega)
    mu_star = s_star * (mu / s + nu / omega)
    z = mu + s.sqrt() * _randn(200_000, 2, g=g)
    w = torch.softmax(_log_normal_diag(z, nu, omega), 0)
    mean = w @ z
    var = w @ (z - mean) ** 2
    assert (mean - mu_star).abs().max() < 0.02
    assert (var - s_star).abs().max() < 0.02
    # Guard: the re-sampled distribution really differs from the original one.
    assert (mu_star - mu).abs().max() > 0.2 and (s_star - s).abs().max() > 0.2


# 6 -------------------------------------------------------------------------------------------


def _phase2_head(lambda_: float, seed: int) -> PersonalizedHead:
    g = _gen(seed)
    k, d = 4, 6
    head = PersonalizedHead(
        _randn(k, d, g=g),
        _randn(k, g=g),
        torch.rand(k, d, generator=g, dtype=F64) + 0.2,
        _randn(k, d, g=g),
        lambda_,
    ).double()
    with torch.no_grad():
        head.a_g.copy_(torch.rand(d, generator=g, dtype=F64) + 0.2)
        head.a_c.copy_(torch.rand(d, generator=g, dtype=F64) + 0.2)
        head.mu.copy_(0.5 * _randn(k, d, g=g))
        head.b.copy_(_randn(k, g=g))
    return head


@pytest.mark.parametrize("lambda_", [1.0, 2.0])
def test_personalized_head_forward_matches_eq_lossc(lambda_):
    """Eq. (LossC): logits_i = xi_i + zeta_i + beta_i written out term by term."""
    head = _phase2_head(lambda_, seed=8)
    d = head.mu.shape[1]
    z = _randn(9, d, g=_gen(80))
    with torch.no_grad():
        m = head.mu_star + head.mu
        xi = -0.5 * ((z[:, None] - m[None]) ** 2 * (head.a_g * head.A_star)[None]).sum(-1)
        zeta = -(lambda_ / d) * ((z[:, None] - head.upsilon[None]) ** 2 * head.a_c).sum(-1)
        beta = head.b_star + head.b
        got = head(z)
    _assert_close(got, xi + zeta + beta, 1e-10)


@pytest.mark.parametrize("lambda_", [1.0, 2.0])
def test_personalized_head_gaussian_form(lambda_):
    """Eq. (ctest) updated covariance/mean/bias: S_hat, mu_hat, b_hat reproduce the logits."""
    head = _phase2_head(lambda_, seed=9)
    d = head.mu.shape[1]
    s_hat, mu_hat, b_hat = head.gaussian_form()
    with torch.no_grad():
        p_g = head.a_g * head.A_star
        p_c = 2 * lambda_ / d * head.a_c
        exp_s = 1 / (p_g + p_c)
        exp_mu = exp_s * (p_g * (head.mu_star + head.mu) + p_c * head.upsilon)
        z = 3 * _randn(11, d, g=_gen(90))
        logits = head(z)
    assert s_hat.shape == mu_hat.shape == head.mu.shape and b_hat.shape == head.b.shape
    _assert_close(s_hat, exp_s, 1e-12)
    _assert_close(mu_hat, exp_mu, 1e-12)
    _assert_close(gaussian_logits(z, mu_hat, b_hat, 1 / s_hat), logits, 1e-9)


def test_objective_scale_sum_drops_the_1_over_d_of_r_c_and_zeta():
    """Eq. (LossR) is 1/d E||z - upsilon||^2 ("mean"); "sum" is E||z - upsilon||^2, and zeta's
    lambda/d becomes lambda, with the Gaussian form still reproducing the logits."""
    assert OBJECTIVE_SCALES[0] == "mean"  # the printed 1/d is the default
    g = _gen(12)
    z, protos = _randn(7, 5, g=g), _randn(3, 5, g=g)
    y = torch.tensor([0, 1, 2, 0, 1, 2, 0])
    closed = ((z - protos[y]) ** 2).sum(1).mean()
    _assert_close(personalized_objective(z, y, protos, "sum"), closed, 1e-12)
    _assert_close(personalized_objective(z, y, protos), closed / 5, 1e-12)
    head = _phase2_head(2.0, seed=13)
    head.objective_scale = "sum"
    d = head.mu.shape[1]
    z = _randn(9, d, g=_gen(14))
    with torch.no_grad():
        m = head.mu_star + head.mu
        xi = -0.5 * ((z[:, None] - m[None]) ** 2 * (head.a_g * head.A_star)[None]).sum(-1)
        zeta = -2.0 * ((z[:, None] - head.upsilon[None]) ** 2 * head.a_c).sum(-1)
        _assert_close(head(z), xi + zeta + head.b_star + head.b, 1e-10)
        s_hat, mu_hat, b_hat = head.gaussian_form()
        _assert_close(gaussian_logits(z, mu_hat, b_hat, 1 / s_hat), head(z), 1e-9)
    with pytest.raises(ValueError, match="mean"):
        personalized_objective(z, y[:1].expand(9), protos[:, :1].expand(3, d), "total")


# 10 ------------------------------------------------------------------------------------------


def test_phase2_fine_tune_and_refine_biases_decrease_loss():
    """Eq. (LossC): SGD fine-tuning then L-BFGS on b alone lower the personalized loss."""
    g = _gen(13)
    k, d, per = 3, 4, 50
    centers = 3 * torch.randn(k, d, generator=g)
    y = torch.arange(k).repeat_interleave(per)
    z = centers[y] + torch.randn(k * per, d, generator=g)
    ups, _ = class_means(z, y, k, torch.zeros(k, d))
    mu_star = centers + 1.5 * torch.randn(k, d, generator=g)
    head = PersonalizedHead(mu_star, torch.zeros(k), torch.ones(k, d), ups, lambda_=1.0)

    def loss() -> float:
        with torch.no_grad():
            return float(F.cross_entropy(head(z), y))

    projections = []
    project = head.project_
    head.project_ = lambda: projections.append(project())  # spy: projection after every step

    initial = loss()
    runner = functools.partial(run_epochs, batch_size=50, rng=torch.Generator().manual_seed(0))
    fine_tune_(head, z, y, runner, epochs=5, lr=0.05, momentum=0.5, weight_decay=5e-4)
    tuned = loss()
    assert tuned < initial
    assert len(projections) == 5 * 3
    assert (head.a_g >= POSITIVE_FLOOR).all() and (head.a_c >= POSITIVE_FLOOR).all()

    frozen = {n: p.detach().clone() for n, p in head.named_parameters() if n != "b"}
    b_before = head.b.detach().clone()
    refined = refine_biases_(head, z, y, lr=0.05, max_iter=10, cycles=5)
    assert refined <= tuned
    assert refined == pytest.approx(loss())
    for name, before in frozen.items():
        assert torch.equal(getattr(head, name), before), name
    assert not torch.equal(head.b, b_before)
    assert (head.a_g >= POSITIVE_FLOOR).all() and (head.a_c >= POSITIVE_FLOOR).all()


def test_refine_biases_equals_lbfgs_on_the_whole_heads_loss():
    """The L-BFGS step computes the logits but b once: its b equals L-BFGS on Eq. (LossC)
    evaluated through the whole head at every iteration."""
    g = _gen(17)
    k, d = 4, 6
    y = torch.arange(k).repeat_interleave(30)
    z = 2 * torch.randn(k, d, generator=g)[y] + torch.randn(len(y), d, generator=g)
    ups, _ = class_means(z, y, k, torch.zeros(k, d))
    args = (torch.randn(k, d, generator=g), torch.randn(k, generator=g), torch.rand(k, d) + 0.5)
    fast, whole = PersonalizedHead(*args, ups, 1.0), PersonalizedHead(*args, ups, 1.0)
    with torch.no_grad():
        for head in (fast, whole):
            head.a_g.mul_(0.7), head.mu.add_(0.1)  # away from the initial point
    refine_biases_(fast, z, y, lr=0.05, max_iter=10, cycles=5)
    opt = torch.optim.LBFGS([whole.b], lr=0.05, max_iter=10)

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = F.cross_entropy(whole(z), y)
        loss.backward()
        return loss

    for _ in range(5):
        opt.step(closure)
    assert not torch.equal(fast.b, torch.zeros(k))
    torch.testing.assert_close(fast.b, whole.b, rtol=1e-5, atol=1e-6)


def test_strong_wolfe_line_search_solves_the_convex_bias_problem_the_fixed_step_does_not():
    """Eq. (LossC) in b alone is convex (a softmax of fixed logits plus b): with the strong
    Wolfe line search the same 5 x 10 budget reaches its minimum (|grad| < 1e-3), where
    steps at the rate 0.05 stop short; the loss never rises from where the head started."""
    g = _gen(19)
    k, d = 5, 6
    y = torch.arange(k).repeat_interleave(torch.tensor([60, 30, 15, 8, 4]))  # a skewed client
    z = 2 * torch.randn(k, d, generator=g)[y] + torch.randn(len(y), d, generator=g)
    ups, _ = class_means(z, y, k, torch.zeros(k, d))
    args = (torch.randn(k, d, generator=g), torch.randn(k, generator=g), torch.rand(k, d) + 0.5)
    grads, losses = {}, {}
    for search in LBFGS_LINE_SEARCHES:
        head = PersonalizedHead(*args, ups, 1.0)
        with torch.no_grad():
            start = float(F.cross_entropy(head(z), y))
        losses[search] = refine_biases_(head, z, y, 0.05, 10, 5, line_search=search)
        b = head.b.detach().clone().requires_grad_()
        F.cross_entropy(head.logits_but_b(z).detach() + b, y).backward()
        grads[search] = float(b.grad.norm())
        assert losses[search] <= start
    assert grads["strong-wolfe"] < 1e-3 < grads["none"]
    assert losses["strong-wolfe"] < losses["none"]
    with pytest.raises(ValueError, match="line_search must be one of"):
        refine_biases_(PersonalizedHead(*args, ups, 1.0), z, y, 0.05, 10, 5, line_search="armijo")

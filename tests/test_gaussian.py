"""Unit tests of pfedgm_app.learning.gaussian against the closed forms of the paper's Method
section."""

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
    GaussianHead,
    class_means,
    covariance_objective,
    gaussian_logits,
    personalized_objective,
    shared_objective,
    update_prototypes_,
)
from pfedgm_app.learning.training import run_epochs
from pfedgm_app.runconfig.readings import LBFGS_LINE_SEARCHES

F64 = torch.float64


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """The tensors here are tiny: one intra-op thread avoids oversubscription on busy hosts."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def _assert_close(got: torch.Tensor, expected: torch.Tensor, atol: float) -> None:
    """Same shape and max |got - expected| <= atol (torch.testing imports torch.distributed)."""
    assert got.shape == expected.shape
    err = (got - expected).abs().max().item()
    assert err <= atol, f"max abs error {err:.3g} > {atol:.0e}"


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(*shape: int, g: torch.Generator) -> torch.Tensor:
    return torch.randn(*shape, generator=g, dtype=F64)


def _naive_logits(z, mu, b, A):
    """-1/2 sum_j A_kj (z_j - mu_kj)^2 + b_k by broadcasting over (n, K, d)."""
    diff = z[:, None, :] - mu[None, :, :]
    return -0.5 * (A * diff**2).sum(-1) + b


def _double_head(mu: torch.Tensor, b: torch.Tensor) -> GaussianHead:
    head = GaussianHead(*mu.shape).double()
    with torch.no_grad():
        head.mu.copy_(mu)
        head.b.copy_(b)
    return head


def _one_hot_means(z: torch.Tensor, y: torch.Tensor, k: int) -> torch.Tensor:
    """Per-class means of z, differentiable w.r.t. z (every class must be present)."""
    onehot = F.one_hot(y, k).to(z.dtype)
    return (onehot.T @ z) / onehot.sum(0)[:, None]


# 1 -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("a_shape", [None, "Kd", "d"])
def test_gaussian_logits_matches_naive_formula(a_shape):
    """Eq. (LossH) rho_k: log rho_k = -1/2 (z - mu_k)^T diag(A_k) (z - mu_k) + b_k."""
    g = _gen(1)
    n, k, d = 7, 5, 4
    z, mu, b = _randn(n, d, g=g), _randn(k, d, g=g), _randn(k, g=g)
    if a_shape is None:
        A, A_full = None, torch.ones(k, d, dtype=F64)
    elif a_shape == "Kd":
        A = torch.rand(k, d, generator=g, dtype=F64) + 0.1
        A_full = A
    else:
        A = torch.rand(d, generator=g, dtype=F64) + 0.1
        A_full = A.expand(k, d)
    got = gaussian_logits(z, mu, b, A)
    assert got.shape == (n, k)
    _assert_close(got, _naive_logits(z, mu, b, A_full), 1e-12)


# 2, 3 ----------------------------------------------------------------------------------------


def test_shared_objective_grad_wrt_z():
    """Eq. (LossH) gradient: dH/dz = -mu_y + sum_i P_i mu_i with A = I."""
    g = _gen(2)
    k, d, y = 5, 4, 2
    head = _double_head(_randn(k, d, g=g), _randn(k, g=g))
    z = _randn(1, d, g=g).requires_grad_(True)
    labels = torch.tensor([y])
    shared_objective(z, labels, head).backward()
    with torch.no_grad():
        p = torch.softmax(_naive_logits(z, head.mu, head.b, 1.0), 1)[0]
        expected = -head.mu[y] + p @ head.mu
    _assert_close(z.grad[0], expected, 1e-12)


def test_shared_objective_grad_wrt_mu():
    """Eq. (LossH) navigator gradient: dH/dmu_y = (1-P_y)(mu_y-z), dH/dmu_i = -P_i(mu_i-z)."""
    g = _gen(3)
    k, d, y = 5, 4, 3
    head = _double_head(_randn(k, d, g=g), _randn(k, g=g))
    z = _randn(1, d, g=g)
    shared_objective(z, torch.tensor([y]), head).backward()
    with torch.no_grad():
        p = torch.softmax(_naive_logits(z, head.mu, head.b, 1.0), 1)[0]
        expected = -p[:, None] * (head.mu - z)
        expected[y] = (1 - p[y]) * (head.mu[y] - z[0])
    _assert_close(head.mu.grad, expected, 1e-12)


# 4 -------------------------------------------------------------------------------------------


def _grads(gen: torch.nn.Linear) -> list[torch.Tensor]:
    out = [gen.weight.grad.clone(), gen.bias.grad.clone()]
    gen.zero_grad(set_to_none=True)
    return out


def test_shared_objective_is_the_cross_entropy_of_the_full_logits():
    """Eq. (LossH) with the per-sample constant -1/2 z^T z left out: the same H and gradients
    as the cross-entropy of the naive logits (which carry it)."""
    g = _gen(12)
    k, d, n = 5, 4, 9
    head = _double_head(_randn(k, d, g=g), _randn(k, g=g))
    z = (3 * _randn(n, d, g=g)).requires_grad_(True)
    y = torch.arange(n) % k
    fast = shared_objective(z, y, head)
    fast.backward()
    fast_grads = [t.grad.clone() for t in (z, head.mu, head.b)]
    for t in (z, head.mu, head.b):
        t.grad = None
    full = F.cross_entropy(_naive_logits(z, head.mu, head.b, 1.0), y)
    full.backward()
    _assert_close(fast, full, 1e-12)
    for a, t in zip(fast_grads, (z, head.mu, head.b), strict=True):
        _assert_close(a, t.grad, 1e-12)
    assert not torch.allclose(  # the left-out term is real, just constant across classes
        gaussian_logits(z, head.mu, head.b, per_sample=False), gaussian_logits(z, head.mu, head.b)
    )


def test_theorem1_batch_prototypes_can_be_held_constant():
    """Theorem 1 (Eq. LossR): grad with batch class means held constant == grad through them."""
    g = _gen(4)
    torch.manual_seed(4)
    k, n = 3, 12
    gen = torch.nn.Linear(5, 4, dtype=F64)
    x = _randn(n, 5, g=g)
    y = torch.arange(n) % k

    z = gen(x)
    means, _ = class_means(z, y, k, torch.zeros(k, 4, dtype=F64))
    personalized_objective(z, y, means).backward()
    held = _grads(gen)

    z = gen(x)
    means = _one_hot_means(z, y, k)
    assert means.requires_grad
    ((z - means[y]).pow(2).sum(1).mean() / z.shape[1]).backward()
    through = _grads(gen)

    assert held[0].abs().max() > 1e-3  # non-trivial gradient
    for a, b in zip(held, through, strict=True):
        _assert_close(a, b, 1e-10)


def test_theorem1_expected_batch_gradient_equals_full_gradient():
    """Theorem 1 (Eq. LossR): epoch-average batch gradient with upsilon = E[z|y,c] is dR_c/dphi."""
    g = _gen(5)
    torch.manual_seed(5)
    k, n, bs, d = 3, 60, 10, 4
    gen = torch.nn.Linear(5, d, dtype=F64)
    x = _randn(n, 5, g=g) + torch.arange(n, dtype=F64)[:, None].remainder(k)
    y = torch.arange(n) % k
    order = torch.randperm(n, generator=g)

    with torch.no_grad():
        ups, counts = class_means(gen(x), y, k, torch.zeros(k, d, dtype=F64))
    assert counts.tolist() == [20.0, 20.0, 20.0]
    total = [torch.zeros_like(p) for p in gen.parameters()]
    for start in range(0, n, bs):
        idx = order[start : start + bs]
        personalized_objective(gen(x[idx]), y[idx], ups).backward()
        for t, gr in zip(total, _grads(gen), strict=True):
            t += gr / (n // bs)

    z = gen(x)
    r_c = (z - _one_hot_means(z, y, k)[y]).pow(2).sum(1).mean() / d
    r_c.backward()
    full = _grads(gen)

    assert full[0].abs().max() > 1e-3
    for a, b in zip(total, full, strict=True):
        _assert_close(a, b, 1e-10)


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


# 7, 8 ----------------------------------------------------------------------------------------


def test_update_prototypes_step_size():
    """Algorithm 1 upsilon update: eta_k = n_k / N_k toward the batch class mean."""
    g = _gen(10)
    k, d = 3, 2
    protos = _randn(k, d, g=g)
    old = protos.clone()
    class_counts = torch.tensor([10.0, 4.0, 6.0], dtype=F64)
    y = torch.tensor([0, 2, 0, 2, 2, 0, 2, 2, 2])  # 3 of class 0, none of 1, all 6 of class 2
    z = 1 + 2 * _randn(len(y), d, g=g)
    update_prototypes_(protos, z, y, class_counts)
    mean0, mean2 = z[y == 0].mean(0), z[y == 2].mean(0)
    _assert_close(protos[0], 0.7 * old[0] + 0.3 * mean0, 1e-12)
    assert torch.equal(protos[1], old[1])
    _assert_close(protos[2], mean2, 1e-12)


def test_update_prototypes_readings_of_the_step_size():
    """`batch` (eta_k = 1) takes the batch's class means, `none` (eta_k = 0) keeps the round's
    start; a class absent from the batch keeps its prototype under every reading."""
    g = _gen(11)
    protos = _randn(3, 2, g=g)
    y = torch.tensor([0, 2, 0, 2])
    z = _randn(len(y), 2, g=g)
    counts = torch.tensor([10.0, 4.0, 6.0], dtype=F64)
    batch, none = protos.clone(), protos.clone()
    update_prototypes_(batch, z, y, counts, step="batch")
    update_prototypes_(none, z, y, counts, step="none")
    _assert_close(batch[0], z[y == 0].mean(0), 1e-12)
    _assert_close(batch[2], z[y == 2].mean(0), 1e-12)
    assert torch.equal(batch[1], protos[1]) and torch.equal(none, protos)
    with pytest.raises(ValueError, match="epoch"):
        update_prototypes_(protos, z, y, counts, step="fast")


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


def test_class_means_fallback_and_counts():
    """Eq. (LossR) E[z | y, c] estimate: per-class means, absent classes take the fallback."""
    g = _gen(11)
    k, d = 4, 3
    y = torch.tensor([3, 0, 3, 3, 0])
    z = _randn(len(y), d, g=g)
    fallback = _randn(k, d, g=g)
    means, counts = class_means(z, y, k, fallback)
    assert counts.tolist() == [2.0, 0.0, 0.0, 3.0]
    _assert_close(means[0], z[y == 0].mean(0), 1e-12)
    _assert_close(means[3], z[y == 3].mean(0), 1e-12)
    assert torch.equal(means[1], fallback[1]) and torch.equal(means[2], fallback[2])


# 9 -------------------------------------------------------------------------------------------


def test_gaussian_head_project_keeps_precision_positive():
    """Eq. (cov_approx) projection: diagonal precision A stays >= POSITIVE_FLOOR."""
    head = GaussianHead(3, 4)
    with torch.no_grad():
        head.A[0, 1] = -2.0
        head.A[2, 3] = 0.0
        head.A[1, 0] = 0.5
    head.project_()
    assert (head.A >= POSITIVE_FLOOR).all()
    assert head.A[0, 1].item() == pytest.approx(POSITIVE_FLOOR)
    assert head.A[1, 0].item() == 0.5


def test_covariance_objective_updates_only_nu():
    """Eq. (cov_approx): H(phi, psi, nu) is minimized w.r.t. nu alone (phi, psi held fixed)."""
    torch.manual_seed(12)
    k, d = 3, 4
    head = GaussianHead(k, d)
    gen = torch.nn.Linear(5, d)
    x = torch.randn(8, 5)
    y = torch.arange(8) % k
    covariance_objective(gen(x), y, head).backward()
    assert gen.weight.grad is None and gen.bias.grad is None
    assert head.mu.grad is None or not head.mu.grad.any()
    assert head.b.grad is None or not head.b.grad.any()
    assert head.A.grad is not None and head.A.grad.abs().max() > 0


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


@pytest.mark.parametrize("std", [1.0, 0.3, 1 / math.sqrt(256)])
def test_navigator_std_draws_mu0_from_that_gaussian(std):
    """psi^0 (Algorithm 1): mu^0 ~ N(0, std^2) per coordinate, b^0 = 0, nu^0 = identity."""
    torch.manual_seed(0)
    head = GaussianHead(100, 256, navigator_std=std)
    mu = head.mu.detach()
    assert abs(mu.mean().item()) < 0.01 * std
    assert abs(mu.std().item() / std - 1) < 0.01  # 25,600 draws: the sample std is within 1%
    assert torch.equal(head.b.detach(), torch.zeros(100))
    assert torch.equal(head.A.detach(), torch.ones(100, 256))
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="navigator_std must be > 0"):
            GaussianHead(3, 4, navigator_std=bad)


def test_the_default_navigator_std_is_a_layers_scale():
    """No std given: 1/sqrt(d), the scale the 200-round study chose (||mu_k|| near 1 for any d;
    docs/notes/navigator-std.md); the run-config's 0 means the same."""
    torch.manual_seed(0)
    for dim in (128, 512):
        mu = GaussianHead(100, dim).mu.detach()
        assert abs(mu.std().item() * dim**0.5 - 1) < 0.02, dim

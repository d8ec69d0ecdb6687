"""Unit tests of pfedgm_app.learning.gaussian against the closed forms of the paper's Method
section: the logits, the shared and personalized objectives (Theorem 1), the prototypes, the
precision's projection and the navigator's start."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from pfedgm_app.learning.gaussian import (
    POSITIVE_FLOOR,
    GaussianHead,
    class_means,
    covariance_objective,
    gaussian_logits,
    personalized_objective,
    shared_objective,
    update_prototypes_,
)
from tests.gaussian_tensors import F64, _assert_close, _gen, _randn

pytestmark = pytest.mark.usefixtures("_one_thread")  # tiny tensors: one intra-op thread


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

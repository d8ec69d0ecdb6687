"""The round's diagnostics (`learning.diagnostics`): closed forms, and no effect on training."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from pfedgm_app.learning import diagnostics
from pfedgm_app.learning.gaussian import GaussianHead, shared_objective
from pfedgm_app.learning.phases import train_round
from pfedgm_app.runconfig.readings import Phase1Options
from tests.phase_problem import K, _parts, _problem, _state


def test_the_round_diagnostics_are_their_closed_forms_on_the_global_model():
    """At the round's start, on the model received: the gradient norms of H and lambda R_c on
    the generator (autograd, first batch), ||z||, ||mu_k||, the within-class variance (R_c at
    the exact prototypes), the saturated share and ||A||; over the round, H and R_c apart."""
    x, y = _problem()
    gen, head = _parts()
    g0, h0 = copy.deepcopy((gen, head))
    options = Phase1Options(lambda_=2.0, batch_size=20, gradients=True)
    metrics = train_round(gen, head, (x, y), options, epochs=1)
    z = g0(x).detach()
    protos = torch.stack([z[y == k].mean(0) for k in range(K)])
    zb = g0(x[:20])
    gh = torch.autograd.grad(shared_objective(zb, y[:20], h0), list(g0.parameters()),
                             retain_graph=True)  # fmt: skip
    gr = torch.autograd.grad(2.0 * F.mse_loss(zb, protos[y[:20]]), list(g0.parameters()))
    norm_h = torch.sqrt(sum((g**2).sum() for g in gh))
    norm_r = torch.sqrt(sum((g**2).sum() for g in gr))
    p_y = torch.softmax(h0(z), 1)[torch.arange(len(y)), y]
    expected = {
        "grad-norm-shared": norm_h,
        "grad-norm-personalized": norm_r,
        "grad-share-personalized": norm_r / (norm_h + norm_r),
        "z-norm": z.norm(dim=1).mean(),
        "mu-norm": h0.mu.norm(dim=1).mean(),
        "within-class-variance": ((z - protos[y]) ** 2).mean(),
        "saturated-fraction-start": (p_y > 0.99).float().mean(),
        "covariance-norm": h0.A.norm(),
    }
    for key, value in expected.items():
        assert metrics[key] == pytest.approx(float(value.detach()), rel=1e-4, abs=1e-7), key
    # the round's loss is H + lambda R_c + the covariance term (the last reaches A only)
    assert metrics["loss"] > metrics["loss-shared"] + 2.0 * metrics["loss-personalized"] > 0
    assert 0 <= metrics["saturated-fraction"] <= 1


def test_the_regime_diagnostics_are_their_closed_forms_over_the_classes_held():
    """mu_k against the client's class centroid (distance, cosine, the centroid's norm) over the
    classes it holds only, the navigator's mean margin of the true logit over the best other,
    and mean |A - 1|, each computed here class by class and sample by sample."""
    torch.manual_seed(4)
    k, d = 5, 6
    head = GaussianHead(k, d)
    with torch.no_grad():
        head.b.copy_(torch.randn(k))
        head.A.copy_(torch.rand(k, d) + 0.5)
    y = torch.tensor([0, 0, 1, 3, 3, 3, 1, 0])  # classes 2 and 4 absent
    z = torch.randn(len(y), d) + 2
    protos = head.mu.detach().clone()  # an absent class's prototype is mu_k (class_means)
    for c in (0, 1, 3):
        protos[c] = z[y == c].mean(0)
    metrics = diagnostics.round_start(head, z, y, protos)
    held = (0, 1, 3)
    mu = head.mu.detach()
    distance = sum(float((mu[c] - protos[c]).norm()) for c in held) / 3
    cosine = sum(float(mu[c] @ protos[c] / (mu[c].norm() * protos[c].norm())) for c in held) / 3
    logits = -0.5 * ((z[:, None, :] - mu[None]) ** 2).sum(-1) + head.b.detach()  # A = E
    margins = []
    for logit, label in zip(logits, y, strict=True):
        others = [float(logit[j]) for j in range(k) if j != label]
        margins.append(float(logit[label]) - max(others))
    expected = {
        "mu-centroid-distance": distance,
        "mu-centroid-cosine": cosine,
        "centroid-norm": sum(float(protos[c].norm()) for c in held) / 3,
        "logit-margin": sum(margins) / len(margins),
        "covariance-deviation": float((head.A.detach() - 1).abs().mean()),
    }
    for key, value in expected.items():
        assert metrics[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
    assert set(expected) <= set(diagnostics.KEYS)


def test_saturation_counts_the_samples_whose_posterior_passes_099():
    """From H per sample, as the step has it: the count of P_y > 0.99 by softmax, on logits
    spread across the threshold."""
    torch.manual_seed(3)
    logits, y = (
        torch.randn(400, 10) * torch.linspace(0.1, 12, 400)[:, None],
        torch.randint(0, 10, (400,)),
    )
    p_y = torch.softmax(logits, 1).gather(1, y[:, None])
    expected = int((p_y > 0.99).sum())
    assert 0 < expected < 400
    assert int(diagnostics.saturated(F.cross_entropy(logits, y, reduction="none"))) == expected


def test_the_diagnostics_change_no_step_of_training():
    """The gradient diagnostics draw nothing from the RNG and touch no gradient: rounds from the
    same start and seed end with the same weights with and without them, also with a dropout
    before the head; without them no gradient norm is reported."""
    x, y = _problem()
    runs, reported = [], []
    for gradients in (False, True):
        gen, head = _parts()
        torch.manual_seed(5)
        options, rng = Phase1Options(gradients=gradients), torch.Generator().manual_seed(1)
        metrics = train_round(
            gen, head, (x, y), options, epochs=2, rng=rng, dropout=nn.Dropout(0.3)
        )
        runs.append(_state(gen, head) + [torch.rand(1)])  # the global RNG's next draw too
        reported.append({k for k in metrics if k.startswith("grad-")})
    for a, b in zip(*runs, strict=True):
        assert torch.equal(a, b)
    assert reported == [set(), {"grad-norm-shared", "grad-norm-personalized",
                                "grad-share-personalized"}]  # fmt: skip

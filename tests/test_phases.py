"""The public client API (`pfedgm_app.learning.phases`): the same math on tensors and on
DataLoaders, what it changes and what it leaves, and that Phase 2 learns on a separable
problem."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from pfedgm_app.learning import diagnostics
from pfedgm_app.learning.gaussian import GaussianHead, shared_objective
from pfedgm_app.learning.phase_data import features
from pfedgm_app.learning.phases import personalize, personalized_head, train_round
from pfedgm_app.runconfig.readings import Phase1Options, Phase2Options

K, D = 3, 4


def _problem(n: int = 60, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Three well separated Gaussian blobs in 5 dimensions."""
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % K
    centers = 4 * torch.eye(K, 5)
    return centers[y] + 0.5 * torch.randn(n, 5, generator=g), y


def _parts(seed: int = 0) -> tuple[nn.Module, GaussianHead]:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(5, D), nn.Tanh()), GaussianHead(K, D)


def _state(*modules: nn.Module) -> list[torch.Tensor]:
    return [t.detach().clone() for m in modules for t in m.state_dict().values()]


def test_train_round_on_tensors_equals_train_round_on_a_dataloader():
    """One full batch per epoch: the two data paths take the same steps and report the same
    gradient diagnostics (the loader's first batch recorded as it streams)."""
    x, y = _problem()
    a_gen, a_head = _parts()
    b_gen, b_head = _parts()
    a = train_round(
        a_gen, a_head, (x, y), Phase1Options(batch_size=len(x), gradients=True), epochs=3
    )
    loader = DataLoader(TensorDataset(x, y), batch_size=len(x))
    b = train_round(b_gen, b_head, loader, Phase1Options(gradients=True), epochs=3)
    for left, right in zip(_state(a_gen, a_head), _state(b_gen, b_head), strict=True):
        torch.testing.assert_close(left, right)
    assert a["grad-norm-shared"] == pytest.approx(b["grad-norm-shared"], rel=1e-5)


def test_train_round_changes_generator_navigator_and_covariance_and_keeps_a_positive():
    x, y = _problem()
    gen, head = _parts()
    before = copy.deepcopy((gen, head))
    metrics = train_round(gen, head, (x, y), Phase1Options(learning_rate=0.5), epochs=2)
    assert metrics["sample-passes"] == 2 * len(x) and metrics["loss"] > 0
    for name in ("mu", "b", "A"):
        assert not torch.equal(getattr(head, name), getattr(before[1], name)), name
    assert not torch.equal(gen[0].weight, before[0][0].weight)
    assert (head.A > 0).all()


def test_features_on_tensors_and_batches_agree_and_empty_data_is_refused():
    x, y = _problem()
    gen, _ = _parts()
    z_t, y_t = features(gen, (x, y))
    z_b, y_b = features(gen, DataLoader(TensorDataset(x, y), batch_size=7))
    torch.testing.assert_close(z_t, z_b)
    assert torch.equal(y_t, y_b)
    with pytest.raises(ValueError, match="no batches"):
        features(gen, [])


def test_personalize_learns_a_separable_problem_and_leaves_the_global_model_as_it_was():
    x, y = _problem(90)
    gen, head = _parts()
    train_round(gen, head, (x[:60], y[:60]), Phase1Options(learning_rate=0.1), epochs=5)
    before = _state(gen, head)
    result = personalize(
        gen, head, (x[:60], y[:60]), (x[60:], y[60:]), Phase2Options(lbfgs_cycles=1)
    )
    assert set(result) == {"accuracy", "acc-global", "acc-global-cov", "acc-finetune", "num-test"}
    assert result["num-test"] == 30
    assert all(0 <= v <= 1 for k, v in result.items() if k.startswith("acc"))
    assert result["accuracy"] >= 0.9  # blobs 4 apart with sigma 0.5
    for a, b in zip(before, _state(gen, head), strict=True):
        assert torch.equal(a, b)


def test_dict_batches_a_wrong_feature_size_and_labels_beyond_the_head_get_one_line_each():
    """What a user coming from flwr-datasets' loaders meets first, said before any training."""
    x, y = _problem()
    gen, head = _parts()
    with pytest.raises(TypeError, match=r"\(x, y\) pairs of tensors, got a dict with keys"):
        train_round(gen, head, [{"img": x, "label": y}])
    with pytest.raises(ValueError, match=r"build GaussianHead\(num_classes, 4\)"):
        personalize(gen, GaussianHead(K, 7), (x, y), (x, y))
    with pytest.raises(ValueError, match=r"the head has 2 classes: labels must be 0..1"):
        train_round(gen, GaussianHead(2, D), (x, y))


def _one_step(gen: nn.Module, head: GaussianHead, x, y, **switches) -> None:
    """One full-batch plain SGD step (lr 0.1, no momentum, no decay): params move by -0.1 grad."""
    sgd = Phase1Options(
        learning_rate=0.1, momentum=0.0, weight_decay=0.0, batch_size=len(x), **switches
    )
    train_round(gen, head, (x, y), sgd, epochs=1)


def test_without_the_personalized_objective_phase_1_steps_on_h_alone():
    """personalized=False (NPO): the generator's step is -lr dH/dphi, H by autograd."""
    x, y = _problem()
    gen, head = _parts()
    expected = copy.deepcopy(gen)
    grads = torch.autograd.grad(shared_objective(expected(x), y, head), expected.parameters())
    with_r_c = copy.deepcopy((gen, head))
    _one_step(gen, head, x, y, personalized=False)
    for p, p0, g in zip(gen.parameters(), expected.parameters(), grads, strict=True):
        torch.testing.assert_close(p, p0 - 0.1 * g)
    _one_step(*with_r_c, x, y)  # with R_c the step differs
    assert not torch.allclose(with_r_c[0][0].weight, gen[0].weight)


def test_decoupling_gm_c_leaves_a_at_identity_and_gm_trains_one_gaussian_classifier():
    """G.M.-C.: no statistic extractor, A stays E. G.M.: H(phi, psi, nu) on phi, mu, b, A."""
    x, y = _problem()
    gen, head = _parts()
    train_round(gen, head, (x, y), Phase1Options(learning_rate=0.5, decoupling="gm-c"), epochs=2)
    assert torch.equal(head.A, torch.ones_like(head.A))
    gen, head = _parts()
    start = copy.deepcopy((gen, head))
    loss = F.cross_entropy(start[1].covariance_logits(start[0](x)), y)
    params = [*start[0].parameters(), start[1].mu, start[1].b, start[1].A]
    grads = torch.autograd.grad(loss, params)
    _one_step(gen, head, x, y, personalized=False, decoupling="gm")
    after = [*gen.parameters(), head.mu, head.b, head.A]
    for p, p0, g in zip(after, params, grads, strict=True):
        torch.testing.assert_close(p, p0 - 0.1 * g)


def test_adaptation_none_and_finetune_report_their_own_head():
    """NA: the global head with A* (acc-global-cov); FA: fine-tuning without L-BFGS."""
    x, y = _problem(90)
    gen, head = _parts()
    train_round(gen, head, (x[:60], y[:60]), Phase1Options(learning_rate=0.1), epochs=2)
    data = (x[:60], y[:60]), (x[60:], y[60:])
    ph, result = personalized_head(gen, head, *data, Phase2Options(adaptation="none"))
    assert "acc-finetune" not in result and result["accuracy"] == result["acc-global-cov"]
    z = gen(x).detach()
    torch.testing.assert_close(ph(z), head.covariance_logits(z), atol=1e-4, rtol=1e-5)
    runs = [
        personalized_head(
            gen, head, *data, Phase2Options(**kw), rng=torch.Generator().manual_seed(0)
        )
        for kw in ({"adaptation": "finetune"}, {"lbfgs_cycles": 0})
    ]
    assert runs[0][1] == runs[1][1] and runs[0][1]["accuracy"] == runs[0][1]["acc-finetune"]
    assert torch.equal(runs[0][0].b, runs[1][0].b)


def test_unknown_switch_values_are_refused_in_one_line():
    x, y = _problem()
    gen, head = _parts()
    with pytest.raises(ValueError, match=r"decoupling must be one of .*got 'gm-x'"):
        Phase1Options(decoupling="gm-x")
    with pytest.raises(ValueError, match=r"adaptation must be one of .*got 'lbfgs'"):
        Phase2Options(adaptation="lbfgs")
    with pytest.raises(ValueError, match=r"the head has 2 classes"):
        train_round(gen, GaussianHead(2, D), (x, y), Phase1Options(personalized=False))


def test_navigator_lr_scale_and_head_decay_move_only_their_parameters():
    """One full-batch step: mu and b move `navigator_lr_scale` times as far, the generator and
    A as before; `head_decay` adds lr * weight_decay * value to exactly the named parameters."""
    x, y = _problem()
    base, scaled = _parts(), _parts()
    start = copy.deepcopy(base)
    _one_step(*base, x, y)
    _one_step(*scaled, x, y, navigator_lr_scale=10.0)
    for name in ("mu", "b"):
        moved = getattr(base[1], name) - getattr(start[1], name)
        torch.testing.assert_close(getattr(scaled[1], name) - getattr(start[1], name), 10 * moved)
    torch.testing.assert_close(scaled[1].A, base[1].A)
    torch.testing.assert_close(scaled[0][0].weight, base[0][0].weight)

    def step(head_decay):
        gen, head = copy.deepcopy(start)
        sgd = {"learning_rate": 0.1, "momentum": 0.0, "weight_decay": 0.5, "batch_size": len(x)}
        train_round(gen, head, (x, y), Phase1Options(**sgd, head_decay=head_decay), epochs=1)
        return head

    none, every = step(()), step(("mu", "b", "A"))
    for name in ("mu", "b", "A"):
        decay = 0.1 * 0.5 * getattr(start[1], name)
        torch.testing.assert_close(getattr(none, name) - getattr(every, name), decay)
    with pytest.raises(ValueError, match=r"head_decay names \['W'\]"):
        Phase1Options(head_decay=("W",))


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

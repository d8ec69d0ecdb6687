"""The client API (`learning.phases`): tensors and DataLoaders alike, its switches, Phase 2."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from pfedgm_app.learning.gaussian import GaussianHead, shared_objective
from pfedgm_app.learning.phase_data import features
from pfedgm_app.learning.phases import personalize, personalized_head, train_round
from pfedgm_app.runconfig.readings import Phase1Options, Phase2Options
from tests.phase_problem import D, K, _parts, _problem, _state


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

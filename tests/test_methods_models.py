"""The methods' models: the FedPAC/pFedFDA CNNs as generators, TinyImageNet's dropout and its
inference passes, and every method through a round on 64 px images."""

from __future__ import annotations

import pytest
import torch

from pfedgm_app.data import ClientData
from pfedgm_app.methods.base import ClientState, ClientTask
from pfedgm_app.runconfig.common import RunConfig
from tests.method_tasks import K, _model, plugin


def test_generators_match_the_fedpac_pfedfda_cnns():
    """CIFAR: 3 conv + fc 576->128; EMNIST: 2 conv + fc 800->128; LeakyReLU; z is 128-d."""
    from pfedgm_app.learning.models import CifarCNN, EmnistCNN

    cifar, emnist = CifarCNN(), EmnistCNN()
    assert cifar(torch.zeros(2, 3, 32, 32)).shape == emnist(torch.zeros(2, 1, 28, 28)).shape
    convs = [m for m in cifar.modules() if isinstance(m, torch.nn.Conv2d)]
    assert [(c.in_channels, c.out_channels, c.kernel_size[0]) for c in convs] == [
        (3, 16, 5), (16, 32, 5), (32, 64, 3)
    ]  # fmt: skip
    fc = [m for m in emnist.modules() if isinstance(m, torch.nn.Linear)]
    assert [(f.in_features, f.out_features) for f in fc] == [(800, 128)]
    # the navigator (mu, b) has exactly the parameters of a linear classifier
    gm, avg = _model("pfedgm"), _model("fedavg")
    assert gm.head.mu.numel() + gm.head.b.numel() == sum(p.numel() for p in avg.head.parameters())


def test_tinyimagenet_cnn_has_dropout_before_each_of_the_last_two_fc_layers():
    """The paper's 64 px model: dropout before the fc giving z and before the head; z 512-d."""
    from pfedgm_app.learning.models import build_model

    model = build_model((3, 64, 64), lambda dim: torch.nn.Linear(dim, 200))
    layers = list(model.generator.features)
    fc = [i for i, m in enumerate(layers) if isinstance(m, torch.nn.Linear)]
    assert len(fc) == 1 and isinstance(layers[fc[0] - 1], torch.nn.Dropout)
    assert (layers[fc[0]].in_features, layers[fc[0]].out_features) == (3136, 512)
    assert isinstance(model.dropout, torch.nn.Dropout) and model.dropout.p == 0.5
    assert model(torch.zeros(2, 3, 64, 64)).shape == (2, 200)
    # the 32 px and 28 px models have none (the same computation as before they existed)
    for shape in ((3, 32, 32), (1, 28, 28)):
        small = build_model(shape, lambda dim: torch.nn.Linear(dim, 10))
        assert not any(isinstance(m, torch.nn.Dropout) for m in small.modules())


def test_inference_passes_run_without_dropout_and_restore_the_mode():
    from pfedgm_app.learning.models import build_model
    from pfedgm_app.learning.training import accuracy, apply_batched

    torch.manual_seed(0)
    model = build_model((3, 64, 64), lambda dim: torch.nn.Linear(dim, 5))
    x = torch.randn(8, 3, 64, 64)
    first, second = apply_batched(model, x), apply_batched(model, x)
    assert torch.equal(first, second) and model.training  # deterministic, mode given back
    with torch.no_grad():
        assert torch.allclose(first, model.eval()(x), atol=1e-6)
    model.train()
    assert not torch.equal(model(x), model(x))  # training passes do drop
    assert 0 <= accuracy(model, x, torch.zeros(8, dtype=torch.long)) <= 1 and model.training
    model.head.eval()  # a submodule's own mode survives too
    apply_batched(model, x)
    assert model.training and model.generator.training and not model.head.training


@pytest.mark.slow  # every method, 64 px
def test_every_method_runs_a_round_and_personalizes_on_64px_images():
    """TinyImageNet's shape through every plug-in (z 512-d, dropout in training passes)."""
    from pfedgm_app.methods import METHODS

    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(40, 3, 64, 64, generator=g), torch.arange(40) % K
    data = ClientData(x, y, x[:10], y[:10], K)
    for name in METHODS:
        task = ClientTask(RunConfig(local_epochs=1), data, ClientState(), g, torch.device("cpu"))
        method = plugin(name, **{"personal-epochs": 1, "lbfgs-cycles": 1})
        torch.manual_seed(0)
        model = method.build_model((3, 64, 64), K)
        reply = method.train(model, task)
        assert all(torch.isfinite(v).all() for v in reply.arrays.values()), name
        result = method.personalize(method.build_model((3, 64, 64), K), task).metrics
        assert 0 <= result["accuracy"] <= 1, name

"""Client-side invariants per method: what leaves the client, what stays, what trains."""

from __future__ import annotations

import pytest
import torch

from pfedgm_app.data import ClientData
from pfedgm_app.methods import get_method
from pfedgm_app.methods.base import KEPT, ClientPlugin, ClientState, ClientTask
from pfedgm_app.runconfig.common import RunConfig

SHAPE, K = (3, 32, 32), 4
FAST = {"local-epochs": 1, "personal-epochs": 1, "finetune-epochs": 1}


def _task(n=60, **cfg) -> ClientTask:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, *SHAPE, generator=g)
    y = torch.arange(n) % K
    x += y[:, None, None, None].float()  # class-dependent shift: learnable
    data = ClientData(x, y, x[:20], y[:20], K)
    config = RunConfig(**{"local_epochs": 1, **cfg})
    return ClientTask(config, data, ClientState(), g, torch.device("cpu"))


def plugin(name, **settings) -> ClientPlugin:
    """`name`'s client plug-in with FAST settings plus `settings` (run-config keys)."""
    method = get_method(name)
    return method.plugin(method.settings.from_run_config({**FAST, **settings}))


def _model(name):
    torch.manual_seed(0)
    return plugin(name).build_model(SHAPE, K)


def test_fedavg_and_fedavgft_send_every_parameter():
    for name in ("fedavg", "fedavgft"):
        model = _model(name)
        reply = plugin(name).train(model, _task())
        assert set(reply.arrays) == set(model.state_dict()) and not reply.extras


def test_pfedgm_sends_generator_navigator_and_covariance():
    model = _model("pfedgm")
    sent = set(plugin("pfedgm").train(model, _task()).arrays)
    assert {"head.mu", "head.b", "head.A"} <= sent
    assert sent == set(model.state_dict())
    assert model.head.mu.shape == (K, 128) and model.head.A.shape == (K, 128)


def test_local_sends_nothing_and_keeps_its_model_in_state():
    method, task = plugin("local"), _task()
    model = _model("local")
    assert method.train(model, task).arrays == {}
    fresh = _model("local")  # what a new round's message would rebuild
    method.restore(fresh, task)
    for key, value in model.state_dict().items():
        assert torch.equal(fresh.state_dict()[key], value)


def test_pfedgm_round_trains_every_part_and_keeps_covariance_positive():
    method, task = plugin("pfedgm"), _task()
    model = _model("pfedgm")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    metrics = method.train(model, task).metrics
    after = model.state_dict()
    assert metrics["sample-passes"] == 60
    for key in ("head.mu", "head.b", "head.A", "generator.features.0.weight"):
        assert not torch.equal(before[key], after[key]), key
    assert (after["head.A"] > 0).all()


def test_lambda_zero_removes_the_personalized_objective():
    """R_c enters with weight lambda: lambda = 0 and lambda = 1 give different generators."""
    results = []
    for lambda_ in (0.0, 1.0):
        model = _model("pfedgm")
        plugin("pfedgm", **{"lambda": lambda_}).train(model, _task())
        results.append(model.state_dict()["generator.features.0.weight"])
    assert not torch.allclose(results[0], results[1])


def test_pfedgm_personalize_reports_accuracy_and_ablation_points():
    method, task = plugin("pfedgm"), _task()
    model = _model("pfedgm")
    method.train(model, task)
    frozen = {k: v.clone() for k, v in model.state_dict().items()}
    result = method.personalize(model, task).metrics
    assert {"accuracy", "acc-global", "acc-global-cov", "acc-finetune"} <= set(result)
    assert all(0 <= v <= 1 for v in result.values())
    # Phase 2 freezes the generator and the global head
    assert all(torch.equal(frozen[k], v) for k, v in model.state_dict().items())


@pytest.mark.parametrize(("keys", "batch", "search"), [
    ({}, 50, "none"),  # 0: the run's batch-size; L-BFGS at its fixed rate
    ({"personal-batch-size": 10, "lbfgs-line-search": "strong-wolfe"}, 10, "strong-wolfe"),
])  # fmt: skip
def test_pfedgm_phase2_takes_its_batch_size_and_line_search_from_the_run(
    monkeypatch, keys, batch, search
):
    import pfedgm_app.methods.pfedgm as client

    seen, real = [], client.personalized_head

    def spy(*args, **kwargs):
        seen.append(args[4])  # the options
        return real(*args, **kwargs)

    monkeypatch.setattr(client, "personalized_head", spy)
    method, task = plugin("pfedgm", **keys), _task(**{"batch_size": 50})
    method.personalize(_model("pfedgm"), task)
    assert (seen[0].batch_size, seen[0].lbfgs_line_search) == (batch, search)


def test_pfedgm_with_no_key_set_runs_the_phases_as_their_defaults_do():
    """The run-config's defaults and the phases' are the paper's both: a pFedGM run with no key
    set gives `train_round` and `personalized_head` their default options and epochs."""
    import inspect

    from pfedgm_app.learning.phases import personalized_head, train_round
    from pfedgm_app.runconfig.readings import Phase1Options, Phase2Options

    method = get_method("pfedgm")
    client = method.plugin(method.settings.from_run_config({}))
    task = ClientTask(RunConfig(), _task().data, ClientState(), None, torch.device("cpu"))
    assert client.phase1_options(task) == Phase1Options()
    assert client.phase2_options(task) == Phase2Options()
    epochs = [inspect.signature(f).parameters["epochs"].default
              for f in (train_round, personalized_head)]  # fmt: skip
    assert epochs == [task.cfg.local_epochs, client.settings.personal_epochs]


@pytest.mark.parametrize("name", ["pfedgm", "fedavg"])
def test_a_round_whose_loss_goes_non_finite_is_refused_naming_the_learning_rate(name):
    """No update of a diverged round leaves the client: one line names the rate (and, for
    pFedGM, the navigator's scale that makes its steps steep)."""
    from pfedgm_app.methods.base import Diverged

    method, task = plugin(name), _task(learning_rate=0.05)
    task.data.x_train[0] = float("inf")  # a diverged step's activations: inf, then NaN
    with pytest.raises(Diverged, match=r"learning-rate=0\.05; lower learning-rate") as info:
        method.train(_model(name), task)
    assert ("navigator-std (0: 1/sqrt(d) now)" in str(info.value)) == (name == "pfedgm")


def test_pfedgm_adaptation_none_reports_and_keeps_the_global_head_with_covariance():
    method, task = plugin("pfedgm", adaptation="none"), _task()
    model = _model("pfedgm")
    method.train(model, task)
    out = method.personalize(model, task)
    assert out.metrics["accuracy"] == out.metrics["acc-global-cov"]
    assert out.model.generator is model.generator and out.model.head.lambda_ == 0.0
    z = model.generator(task.data.x_test).detach()
    torch.testing.assert_close(out.model.head(z), model.head.covariance_logits(z))


def test_fedavgft_fine_tunes_before_evaluating():
    method, task = plugin("fedavgft"), _task()
    model = _model("fedavgft")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    result = method.personalize(model, task).metrics
    assert {"accuracy", "acc-global"} <= set(result)
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_fedavgft_trains_as_fedavg_and_its_acc_global_is_fedavgs_accuracy():
    """The privacy tables read FedAvg's rows from FedAvgFT's runs (`pfedgm_paper.rows.RUNS_AS`):
    the same replies from the same model and data, and FedAvg's accuracy before the fine-tuning."""
    replies, results = {}, {}
    for name in ("fedavg", "fedavgft"):
        model, task = _model(name), _task()
        arrays = plugin(name).train(model, task).arrays
        replies[name] = {k: v.clone() for k, v in arrays.items()}  # before any fine-tuning
        results[name] = plugin(name).personalize(model, task).metrics
    for key, value in replies["fedavg"].items():
        assert torch.equal(value, replies["fedavgft"][key]), key
    assert results["fedavgft"]["acc-global"] == results["fedavg"]["accuracy"]


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


def _train_round(name, task=None, model=None, **settings):
    method, task = plugin(name, **settings), task or _task()
    model = model or _model(name)
    method.restore(model, task)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    reply = method.train(model, task)
    return method, task, model, before, reply


def test_fedper_keeps_its_head_and_sends_the_body():
    method, task, model, _, reply = _train_round("fedper")
    sent, heads = set(reply.arrays), {"head.weight", "head.bias"}
    assert sent == set(model.state_dict()) - heads
    fresh = _model("fedper")  # next round: a new global generator arrives, the head is the client's
    fresh.generator.features[0].weight.data.zero_()
    method.restore(fresh, task)
    assert torch.equal(fresh.head.weight, model.head.weight)
    assert not fresh.generator.features[0].weight.any()


def test_lgfedavg_shares_the_convolutions_and_keeps_the_fully_connected_layers():
    """After the warm-up: the convolutions are sent, fc layers and head stay (the authors'
    split); a fresh model gets the client's own fc layers back."""
    method, task, model, _, reply = _train_round("lgfedavg")
    convs = {f"generator.features.{i}.{p}" for i in (0, 3, 6) for p in ("weight", "bias")}
    assert set(reply.arrays) == convs
    fresh = _model("lgfedavg")
    method.restore(fresh, task)
    assert torch.equal(fresh.generator.features[10].weight, model.generator.features[10].weight)
    assert torch.equal(fresh.head.weight, model.head.weight)


def test_lgfedavg_warms_up_as_fedavg_for_its_fraction_of_the_rounds():
    """With 10 rounds and fraction 0.3: rounds 1..3 send every array and keep nothing, round 4
    splits, starting from the FedAvg-trained local layers it received."""
    sent = {}
    for server_round in (3, 4):
        task = _task(num_server_rounds=10)
        task.server_round = server_round
        method = plugin("lgfedavg", **{"lgfedavg-warmup-fraction": 0.3})
        model = _model("lgfedavg")
        sent[server_round] = set(method.train(model, task).arrays)
        assert (KEPT in task.state) == (server_round == 4)
    assert sent[3] == set(model.state_dict()) and sent[4] == set(model.part_keys("convolutions"))


def test_fedbabu_never_changes_the_head_during_training_and_fine_tunes_the_whole_model():
    _, task, model, before, _ = _train_round("fedbabu")
    assert torch.equal(model.head.weight, before["head.weight"])
    conv = model.generator.features[0].weight.clone()
    assert not torch.equal(conv, before["generator.features.0.weight"])
    result = plugin("fedbabu").personalize(model, task).metrics  # the authors': generator and head
    assert {"accuracy", "acc-global"} <= set(result)
    assert not torch.equal(model.head.weight, before["head.weight"])
    assert not torch.equal(model.generator.features[0].weight, conv)
    head_only = plugin("fedbabu", **{"finetune-part": "head"})
    conv = model.generator.features[0].weight.clone()
    head_only.personalize(model, task)
    assert torch.equal(model.generator.features[0].weight, conv)


def _personal_distance(mu):
    from pfedgm_app.methods.ditto import PERSONAL

    task = _task()
    model = _model("ditto")
    received = {k: v.clone() for k, v in model.state_dict().items()}
    plugin("ditto", **{"ditto-mu": mu}).train(model, task)
    personal = task.state.load(PERSONAL)
    return sum((personal[k] - received[k]).pow(2).sum() for k in received).sqrt().item()


def test_ditto_personal_model_differs_and_is_pulled_toward_the_global_as_mu_grows():
    distances = [_personal_distance(mu) for mu in (0.0, 1.0, 100.0)]
    assert distances[0] > 0
    assert distances[0] > distances[1] > distances[2]


def test_ditto_keeps_the_personal_model_local_and_sends_the_global():
    from pfedgm_app.methods.ditto import PERSONAL

    method, task, model, _, reply = _train_round("ditto")
    assert set(reply.arrays) == set(model.state_dict())
    personal = task.state.load(PERSONAL)
    assert any(not torch.equal(personal[k], v) for k, v in model.state_dict().items())
    result = method.personalize(model, task).metrics
    assert {"accuracy", "acc-global"} <= set(result)


def _spy_epochs(monkeypatch) -> list:
    """Record (parameter ids, epochs) of every `ClientTask.epochs` call."""
    calls = []
    original = ClientTask.epochs

    def spy(self, step, params, epochs, lr=None, after_step=None):
        params = list(params)
        calls.append(({id(p) for p in params}, epochs))
        return original(self, step, params, epochs, lr, after_step)

    monkeypatch.setattr(ClientTask, "epochs", spy)
    return calls


def test_fedrep_trains_head_then_generator_keeps_the_head_and_refits_it_at_the_end(monkeypatch):
    """Per round `fedrep-head-epochs` head epochs (generator fixed), then `local-epochs`
    generator epochs (head fixed); the head stays local; the personalize round refits the head
    alone."""
    calls = _spy_epochs(monkeypatch)
    task = _task(local_epochs=3)
    method = plugin("fedrep", **{"fedrep-head-epochs": 2, "fedrep-refit-epochs": 4})
    model = _model("fedrep")
    reply = method.train(model, task)
    head = {id(p) for p in model.head.parameters()}
    generator = {id(p) for p in model.generator.parameters()}
    assert calls == [(head, 2), (generator, 3)]
    assert set(reply.arrays) == set(model.state_dict()) - {"head.weight", "head.bias"}
    body_before = model.generator.features[0].weight.clone()
    result = method.personalize(model, task).metrics
    assert calls[2:] == [(head, 4)] and {"accuracy", "acc-global"} <= set(result)
    assert torch.equal(model.generator.features[0].weight, body_before)


def test_fedpac_sends_the_body_and_its_statistics_and_loads_its_combined_head():
    method, task, model, before, reply = _train_round("fedpac")
    heads = {"head.weight", "head.bias"}
    assert set(reply.arrays) == set(model.state_dict()) - heads  # generator only
    assert set(reply.extras) == heads | {"protos", "class-counts", "variance", "h-ref"}
    assert reply.extras["protos"].shape == (K, 128) and reply.extras["class-counts"].sum() == 60
    assert not torch.equal(model.head.weight, before["head.weight"])  # the head epoch ran
    # next message: the server's combination for this client replaces the kept head
    combined = {"head.weight": torch.ones(K, 128), "head.bias": torch.zeros(K)}
    nxt = _task()
    nxt.state, nxt.received = task.state, combined
    fresh = _model("fedpac")
    method.restore(fresh, nxt)
    assert torch.equal(fresh.head.weight, model.head.weight)
    method.personalize(fresh, nxt)
    assert torch.equal(fresh.head.weight, combined["head.weight"])


def test_fedpac_aligns_features_to_the_global_prototypes_with_weight_lambda():
    """With global prototypes received, lambda changes the generator; lambda = 0 is plain
    FedRep-like."""
    protos = {"protos": torch.full((K, 128), 5.0), "protos-count": torch.ones(K)}
    convs = []
    for lambda_ in (0.0, 1.0):
        task = _task()
        task.received = dict(protos)
        model = _model("fedpac")
        plugin("fedpac", **{"fedpac-lambda": lambda_}).train(model, task)
        convs.append(model.generator.features[0].weight.detach().clone())
    assert not torch.allclose(convs[0], convs[1])


def test_pfedme_sends_w_keeps_theta_and_theta_is_pulled_toward_w_as_lambda_grows():
    from pfedgm_app.methods.pfedme import PERSONAL

    distances = []
    for lambda_ in (0.5, 5.0, 50.0):
        method, task = plugin("pfedme", **{"pfedme-lambda": lambda_}), _task(learning_rate=0.001)
        model = _model("pfedme")
        reply = method.train(model, task)
        metrics = reply.metrics
        assert set(reply.arrays) == set(model.state_dict())  # w leaves the client
        theta = task.state.load(PERSONAL)  # theta stays
        w = model.state_dict()
        distances.append(sum((theta[k] - w[k]).pow(2).sum() for k in w).sqrt().item())
        assert metrics["pfedme-inner-grad-norm"] > 0
    assert distances[0] > distances[1] > distances[2] > 0
    result = method.personalize(model, task).metrics
    assert {"accuracy", "acc-local-model", "acc-global", "pfedme-inner-grad-norm"} <= set(result)


def test_pfedme_local_work_as_r_mini_batches(monkeypatch):
    """pfedme-local-batches=R: R inner problems per round (the authors' local work), whatever
    the data size; 0: every batch of `local-epochs` epochs."""
    import pfedgm_app.methods.pfedme as pfedme

    calls = []
    original = pfedme.moreau_step_
    monkeypatch.setattr(
        pfedme, "moreau_step_", lambda *a, **k: calls.append(1) or original(*a, **k)
    )
    for batches, inner, passes in ((3, 3, 150), (0, 2, 60)):  # 60 samples, batches of 50
        calls.clear()
        method = plugin("pfedme", **{"pfedme-local-batches": batches})
        metrics = method.train(_model("pfedme"), _task()).metrics
        assert (len(calls), metrics["sample-passes"]) == (inner, passes)


def test_pfedme_outer_step_moves_w_toward_theta_by_eta_lambda():
    """One batch, one epoch: w1 = w0 - eta * lambda * (w0 - theta1) (pFedMe's local update)."""
    from pfedgm_app.methods.pfedme import PERSONAL

    eta, lambda_ = 0.01, 5.0
    method, task = (
        plugin("pfedme", **{"pfedme-lambda": lambda_}),
        _task(batch_size=60, learning_rate=eta),
    )
    model = _model("pfedme")
    w0 = {k: p.detach().clone() for k, p in model.named_parameters()}
    method.train(model, task)
    theta = task.state.load(PERSONAL)
    for k, w1 in model.named_parameters():
        assert not torch.equal(theta[k], w0[k])  # the inner solve moved theta
        torch.testing.assert_close(w1.detach(), w0[k] - eta * lambda_ * (w0[k] - theta[k]))


def test_pfedfda_trains_the_body_only_and_sends_interpolated_statistics():
    method, task, model, before, reply = _train_round("pfedfda")
    sent = set(reply.arrays)
    assert {"head.mu", "head.cov"} <= sent and "head.weight" not in sent  # W is derived
    assert not torch.equal(
        model.generator.features[0].weight, before["generator.features.0.weight"]
    )
    cov = model.head.cov
    assert torch.allclose(cov, cov.T) and torch.linalg.eigvalsh(cov).min() > 0
    assert not torch.equal(model.head.mu, before["head.mu"])  # interpolated toward local
    result = method.personalize(model, task).metrics
    assert 0 <= result["pfedfda-beta-mean"] <= 1 and 0 <= result["pfedfda-beta-cov"] <= 1
    assert {"accuracy", "acc-global"} <= set(result)


def test_every_method_sends_what_it_declares_and_keeps_the_rest():
    """After a real round: the reply's arrays are exactly the model parts the registry declares
    (`Method.sends`), and the rest is exactly what the client state holds (what the model of
    the client's next message gets back). E.g. Ditto sends its global model (the personal one
    stays in its own state), FedPAC its generator (its head travels in the extras), Local
    nothing."""
    from pfedgm_app.methods import METHODS
    from pfedgm_app.methods.base import KEPT

    for name, method in METHODS.items():
        _, task, model, _, reply = _train_round(name)
        expect = {k for part in method.sends for k in model.part_keys(part)}
        assert set(reply.arrays) == expect, name
        kept = set(task.state.load(KEPT)) if KEPT in task.state else set()
        assert kept == set(model.state_dict()) - expect, name  # kept = exactly what is not sent
        # what a resumed run warns about: arrays its new clients will not have
        assert bool(len(task.state.records)) == method.keeps_state, name


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


@pytest.mark.parametrize("rc_input", ["before-dropout", "after-dropout"])
def test_pfedgm_takes_r_c_on_z_before_dropout_and_h_after(monkeypatch, rc_input):
    """Eq. (LossR) sees z; the navigator (H, cov_approx) sees dropout(z) (paper, Model Setup);
    `rc-input='after-dropout'`, the other reading, gives R_c the navigator's input."""
    import pfedgm_app.learning.phases as gm  # the client phases the plug-in calls

    seen = {}
    real_r, real_h = gm.personalized_objective, gm.gaussian_logits

    def spy_r(z, *args):
        seen["r"] = z.detach().clone()
        return real_r(z, *args)

    def spy_h(z, *args, **kwargs):
        seen["h"] = z.detach().clone()
        return real_h(z, *args, **kwargs)

    monkeypatch.setattr(gm, "personalized_objective", spy_r)
    monkeypatch.setattr(gm, "gaussian_logits", spy_h)
    model = _model("pfedgm")
    model.dropout = torch.nn.Dropout(0.9)  # stands in for TinyImageNet's
    plugin("pfedgm", **{"rc-input": rc_input}).train(model, _task())
    dropped = {k: float((v == 0).float().mean()) for k, v in seen.items()}
    assert dropped["h"] > 0.5
    assert (dropped["r"] > 0.5) == (rc_input == "after-dropout")


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


def test_the_servers_psi0_follows_navigator_std():
    """The global model's mu^0 is drawn at the std `navigator-std` names (d = 128 here):
    ||mu_k|| near std * sqrt(d)."""
    from pfedgm_app.server.experiment import starting_model

    for std in (1.0, 128**-0.5):
        arrays = starting_model(
            RunConfig(), plugin("pfedgm", **{"navigator-std": std}), SHAPE, K
        ).state_dict()
        norm = torch.from_numpy(arrays["head.mu"].numpy()).norm(dim=1).mean().item()
        assert abs(norm / (std * 128**0.5) - 1) < 0.1, std

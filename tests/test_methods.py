"""Client-side invariants of pFedGM, FedAvg, FedAvgFT and Local, and of every method's reply:
what leaves the client, what stays, what trains."""

from __future__ import annotations

import pytest
import torch

from pfedgm_app.methods import get_method
from pfedgm_app.methods.base import ClientState, ClientTask
from pfedgm_app.runconfig.common import RunConfig
from tests.method_tasks import SHAPE, K, _model, _task, _train_round, plugin


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

"""Client-side invariants of the personalized baselines (FedPer, LG-FedAvg, FedBABU, Ditto,
FedRep, FedPAC, pFedMe, pFedFDA): what leaves the client, what stays, what trains."""

from __future__ import annotations

import torch

from pfedgm_app.methods.base import KEPT, ClientTask
from tests.method_tasks import K, _model, _task, _train_round, plugin


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

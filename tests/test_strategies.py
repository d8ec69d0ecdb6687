"""Server-side behaviour: weighted averaging, local keys, dropped updates, the paper's metric."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict

from pfedgm_app.strategies import PersonalizedFedAvg, PFedGM, merge_arrays, summarize

pytestmark = pytest.mark.usefixtures("task_identity")  # Messages need a run identity


def _arrays(**values) -> ArrayRecord:
    return ArrayRecord({k: Array(np.asarray(v, dtype=np.float32)) for k, v in values.items()})


def _reply(node: int, arrays: ArrayRecord, n: int) -> Message:
    ins = Message(RecordDict(), dst_node_id=node, message_type="train")
    content = RecordDict({"arrays": arrays, "metrics": MetricRecord({"num-examples": n})})
    return Message(content, reply_to=ins)


def _aggregate(strategy, current, replies):
    strategy.sent_arrays[1] = current  # what configure_train records for round 1
    return strategy.aggregate_train(1, replies)


def test_pfedgm_averages_generator_navigator_and_covariance_by_num_examples():
    current = _arrays(**{"w": [0, 0], "head.mu": [0, 0], "head.b": [0], "head.A": [1, 1]})
    a = _arrays(**{"w": [1, 2], "head.mu": [1, 1], "head.b": [3], "head.A": [1, 2]})
    b = _arrays(**{"w": [4, 8], "head.mu": [4, 4], "head.b": [0], "head.A": [4, 5]})
    arrays, _ = _aggregate(PFedGM(), current, [_reply(1, a, 100), _reply(2, b, 300)])
    expect = {"w": [3.25, 6.5], "head.mu": [3.25, 3.25], "head.b": [0.75], "head.A": [3.25, 4.25]}
    for key, value in expect.items():
        np.testing.assert_allclose(arrays[key].numpy(), value, rtol=1e-6)


def test_non_finite_update_is_dropped_and_the_round_goes_on():
    current = _arrays(w=[0.0, 0.0])
    good, bad = _arrays(w=[2.0, 2.0]), _arrays(w=[np.nan, 1.0])
    inf = _arrays(w=[np.inf, 1.0])
    strategy = PersonalizedFedAvg()
    arrays, _ = _aggregate(strategy, current, [_reply(1, good, 10), _reply(2, bad, 1000)])
    np.testing.assert_allclose(arrays["w"].numpy(), [2.0, 2.0])
    # nothing usable left: None, so FedAvg.start keeps the current arrays
    arrays, _ = _aggregate(strategy, current, [_reply(2, bad, 10), _reply(3, inf, 10)])
    assert arrays is None


@pytest.mark.parametrize(
    "reply, reason",
    [
        (_arrays(w=[1.0, 1.0], extra=[1.0]), "keys the model does not have: ['extra']"),
        (_arrays(w=[1.0, 1.0, 1.0]), "'w' is float32 (3,), the model's is float32 (2,)"),
        (ArrayRecord({"w": Array(np.ones(2, dtype=np.float64))}), "'w' is float64 (2,)"),
    ],
)
def test_malformed_updates_are_dropped_naming_the_node(caplog, reply, reason):
    """Each kind of bad reply from the network leaves the global model as the good reply alone
    makes it, with a warning naming the node and what is wrong."""
    current, good = _arrays(w=[0.0, 0.0]), _arrays(w=[2.0, 2.0])
    for strategy in (PersonalizedFedAvg(), PFedGM(navigator_keys=(), covariance_keys=())):
        arrays, _ = _aggregate(strategy, current, [_reply(1, good, 10), _reply(7, reply, 1000)])
        np.testing.assert_allclose(arrays["w"].numpy(), [2.0, 2.0])
        assert "Dropping update of node 7: " + reason in caplog.text


def test_replies_without_model_arrays_or_a_positive_weight_are_dropped(caplog):
    current, good = _arrays(w=[0.0]), _arrays(w=[2.0])
    no_arrays = Message(RecordDict({"metrics": MetricRecord({"num-examples": 5})}),
                        reply_to=Message(RecordDict(), 4, "train"))  # fmt: skip
    for bad in (_reply(5, good, 0), _reply(6, good, -3), no_arrays):
        arrays, _ = _aggregate(PersonalizedFedAvg(), current, [_reply(1, good, 10), bad])
        np.testing.assert_allclose(arrays["w"].numpy(), [2.0])
    assert "node 5: 'num-examples' must be a positive number, got 0" in caplog.text
    assert "node 4: no 'arrays' record" in caplog.text


def test_failed_replies_are_skipped_and_a_round_without_updates_aggregates_nothing():
    from flwr.app import Error

    strategy = PersonalizedFedAvg()
    current = _arrays(w=[0.0])
    failed = Message(Error(code=1, reason="boom"), reply_to=Message(RecordDict(), 3, "train"))
    arrays, metrics = _aggregate(strategy, current, [_reply(1, _arrays(w=[4.0]), 10), failed])
    np.testing.assert_allclose(arrays["w"].numpy(), [4.0])
    assert metrics["num-clients"] == 1 and metrics["num-examples-total"] == 10
    assert _aggregate(strategy, current, [failed]) == (None, None)  # the loop keeps `current`


def test_pfedgm_drops_non_positive_covariance():
    current = _arrays(**{"head.A": [1.0]})
    ok, negative = _arrays(**{"head.A": [2.0]}), _arrays(**{"head.A": [-1.0]})
    arrays, _ = _aggregate(PFedGM(), current, [_reply(1, ok, 1), _reply(2, negative, 1)])
    np.testing.assert_allclose(arrays["head.A"].numpy(), [2.0])


def test_keys_kept_local_keep_their_global_value():
    current = _arrays(body=[1.0], head=[5.0])
    arrays, _ = _aggregate(PersonalizedFedAvg(), current, [_reply(1, _arrays(body=[3.0]), 1)])
    assert set(arrays) == {"body", "head"}
    np.testing.assert_allclose(arrays["head"].numpy(), [5.0])
    np.testing.assert_allclose(arrays["body"].numpy(), [3.0])
    # Local: clients send nothing, the global arrays stay as they were
    merged = merge_arrays(current, ArrayRecord())
    assert {k: v.numpy().tolist() for k, v in merged.items()} == {"body": [1.0], "head": [5.0]}


def test_pfedgm_start_requires_the_gaussian_head_keys():
    with pytest.raises(ValueError, match="head keys"):
        PFedGM().start(grid=None, initial_arrays=_arrays(w=[1.0]), num_rounds=1)
    with pytest.raises(ValueError, match="positive"):
        init = _arrays(**{"head.mu": [0.0], "head.b": [0.0], "head.A": [0.0]})
        PFedGM().start(grid=None, initial_arrays=init, num_rounds=1)
    # another project's names are accepted
    PFedGM(navigator_keys=["nav.m", "nav.b"], covariance_keys=["cov"])


def test_summary_is_test_size_weighted_mean_and_std_across_clients():
    rows = [
        {"accuracy": 0.5, "num-test": 100, "acc-x": 0.1},
        {"accuracy": 1.0, "num-test": 300, "acc-x": 0.3},
    ]
    result = summarize(rows, [])
    assert result.mean_accuracy == pytest.approx(87.5)
    assert result.unweighted_mean_accuracy == pytest.approx(75.0)
    assert result.std_accuracy == pytest.approx(25.0)
    assert result.means == {"acc-x": pytest.approx(25.0)}
    with pytest.raises(RuntimeError, match="no client answered"):
        summarize([], ["node 1: boom"])


def _reply_with_extras(node, arrays, n, extras):
    msg = _reply(node, arrays, n)
    msg.content["extras"] = extras
    return msg


def test_fedpac_averages_body_aggregates_prototypes_and_combines_heads_per_client():
    from pfedgm_app.strategies import FedPAC

    K, d = 3, 2
    current = _arrays(w=[0.0, 0.0], **{"head.weight": np.zeros((K, d)), "head.bias": np.zeros(K)})
    rng = np.random.default_rng(0)
    extras, replies = {}, []
    for node, n, counts in ((1, 100, [50, 50, 0]), (2, 300, [0, 100, 200])):
        extras[node] = {
            "head.weight": rng.normal(size=(K, d)), "head.bias": rng.normal(size=K),
            "protos": rng.normal(size=(K, d)), "class-counts": np.array(counts, float),
            "variance": np.array([1.0]), "h-ref": rng.normal(size=(K, d)),
        }  # fmt: skip
        replies.append(
            _reply_with_extras(node, _arrays(w=[node, node]), n, _arrays(**extras[node]))
        )
    strategy = FedPAC()
    arrays, _ = _aggregate(strategy, current, replies)
    np.testing.assert_allclose(arrays["w"].numpy(), [1.75, 1.75])  # body: FedAvg
    assert np.array_equal(arrays["head.weight"].numpy(), np.zeros((K, d)))  # heads not averaged
    # prototypes: per-class average weighted by class counts; class 0 only from node 1
    protos = strategy.global_protos
    np.testing.assert_allclose(protos[0], extras[1]["protos"][0], rtol=1e-6)
    np.testing.assert_allclose(
        protos[1], (extras[1]["protos"][1] + 2 * extras[2]["protos"][1]) / 3, rtol=1e-5
    )
    # each client's next head is a convex combination of the participants' heads
    for node in (1, 2):
        alpha = strategy.last_weights[node]
        assert sum(alpha.values()) == pytest.approx(1)
        expect = sum(a * extras[j]["head.bias"] for j, a in alpha.items())
        np.testing.assert_allclose(strategy.heads[node]["head.bias"], expect, rtol=1e-5)
        sent = strategy.extras_for(node)
        assert {"protos", "protos-count", "head.weight", "head.bias"} == set(sent)
    assert set(strategy.extras_for(99)) == {"protos", "protos-count"}  # never trained: no head


def test_pfedfda_drops_a_covariance_that_is_not_positive_definite():
    from pfedgm_app.strategies import PFedFDA

    current = _arrays(**{"head.cov": np.eye(2)})
    good = _arrays(**{"head.cov": 2 * np.eye(2)})
    bad = _arrays(**{"head.cov": [[1.0, 2.0], [2.0, 1.0]]})  # eigenvalues 3, -1
    arrays, _ = _aggregate(PFedFDA(), current, [_reply(1, good, 10), _reply(2, bad, 10)])
    np.testing.assert_allclose(arrays["head.cov"].numpy(), 2 * np.eye(2))

"""Server-side behaviour: weighted averaging, local keys, dropped updates, the paper's metric."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict

from pfedgm_app.strategies import PersonalizedFedAvg, PFedGM, merge_arrays, summarize
from tests.reply_fakes import _aggregate, _arrays, _reply

pytestmark = pytest.mark.usefixtures("task_identity")  # Messages need a run identity


def test_pfedgm_averages_generator_navigator_and_covariance_by_num_examples():
    current = _arrays(**{"w": [0, 0], "head.mu": [0, 0], "head.b": [0], "head.A": [1, 1]})
    a = _arrays(**{"w": [1, 2], "head.mu": [1, 1], "head.b": [3], "head.A": [1, 2]})
    b = _arrays(**{"w": [4, 8], "head.mu": [4, 4], "head.b": [0], "head.A": [4, 5]})
    arrays, _ = _aggregate(PFedGM(clip_ratio=0.0), current, [_reply(1, a, 100), _reply(2, b, 300)])
    expect = {"w": [3.25, 6.5], "head.mu": [3.25, 3.25], "head.b": [0.75], "head.A": [3.25, 4.25]}
    for key, value in expect.items():
        np.testing.assert_allclose(arrays[key].numpy(), value, rtol=1e-6)


def test_pfedgm_averages_a_as_covariances_and_b_as_mixture_weights_when_asked():
    """covariance-average='covariance': the weighted mean of A^-1, inverted (a harmonic mean);
    bias-average='mixture': log of the weighted mean of exp(b). Other keys as by default."""
    current = _arrays(**{"w": [0, 0], "head.mu": [0, 0], "head.b": [0], "head.A": [1, 1]})
    a = _arrays(**{"w": [1, 2], "head.mu": [1, 1], "head.b": [3], "head.A": [1, 2]})
    b = _arrays(**{"w": [4, 8], "head.mu": [4, 4], "head.b": [0], "head.A": [4, 5]})
    strategy = PFedGM(covariance_average="covariance", bias_average="mixture", clip_ratio=0.0)
    arrays, _ = _aggregate(strategy, current, [_reply(1, a, 100), _reply(2, b, 300)])
    expect = {"w": [3.25, 6.5], "head.mu": [3.25, 3.25],
              "head.b": [np.log(0.25 * np.exp(3) + 0.75)],
              "head.A": [1 / (0.25 / 1 + 0.75 / 4), 1 / (0.25 / 2 + 0.75 / 5)]}  # fmt: skip
    for key, value in expect.items():
        assert arrays[key].numpy().dtype == np.float32, key
        np.testing.assert_allclose(arrays[key].numpy(), value, rtol=1e-6)
    with pytest.raises(ValueError, match="covariance_average must be one of"):
        PFedGM(covariance_average="variance")


def _content(arrays=None, metrics=None, **records) -> RecordDict:
    content = RecordDict({"arrays": arrays if arrays is not None else _arrays(w=[4.0, 4.0]),
                          "metrics": MetricRecord(metrics or {"num-examples": 10})})  # fmt: skip
    for name, record in records.items():
        content[name] = record
    return content


def _raw(node: int, content: RecordDict) -> Message:
    return Message(content, reply_to=Message(RecordDict(), dst_node_id=node, message_type="train"))


HOSTILE = {  # what a buggy, outdated or hostile client may send (the contract's checklist)
    "no arrays record": RecordDict({"metrics": MetricRecord({"num-examples": 5})}),
    "a zero weight": _content(metrics={"num-examples": 0}),
    "a negative weight": _content(metrics={"num-examples": -3}),
    "a NaN weight": _content(metrics={"num-examples": float("nan")}),
    "a weight above its data": _content(metrics={"num-examples": 1e12}),
    "a weight of 1.7e308": _content(metrics={"num-examples": 1.7e308}),
    "loss as a list": _content(metrics={"num-examples": 10, "loss": [1.0, 2.0]}),
    "a second metric record": _content(m2=MetricRecord({"x": 1.0})),
    "a config record": _content(c=ConfigRecord({"x": "y"})),
    "an unknown array record": _content(more=_arrays(w=[1.0, 1.0])),
    "arrays of 1e30": _content(_arrays(w=[1e30, 1.0])),
    "NaN arrays": _content(_arrays(w=[np.nan, 1.0])),
    "Inf arrays": _content(_arrays(w=[np.inf, 1.0])),
    "another shape": _content(_arrays(w=[1.0, 1.0, 1.0])),
    "another dtype": _content(ArrayRecord({"w": Array(np.ones(2, dtype=np.float64))})),
    "an unknown key": _content(_arrays(w=[1.0, 1.0], extra=[1.0])),
}


@pytest.mark.parametrize("case", HOSTILE)
def test_a_reply_that_breaks_the_contract_is_dropped_naming_the_node(caplog, case):
    """The global model is what the honest replies alone make it, the run goes on, and the
    warning names the hostile node; with the hostile reply alone the round changes nothing."""
    current, good = _arrays(w=[0.0, 0.0]), _reply(1, _arrays(w=[2.0, 2.0]), 10)
    reported = {1: {"num-examples": 10}, 7: {"num-examples": 50}}  # what each told at query
    for strategy in (PersonalizedFedAvg(reported=reported), PFedGM(reported=reported,
                     navigator_keys=(), covariance_keys=()), PersonalizedFedAvg()):  # fmt: skip
        arrays, metrics = _aggregate(strategy, current, [good, _raw(7, HOSTILE[case])])
        np.testing.assert_array_equal(arrays["w"].numpy(), [2.0, 2.0])
        assert metrics["num-clients"] == 1
        assert _aggregate(strategy, current, [_raw(7, HOSTILE[case])])[0] is None
    assert any("node 7" in r.getMessage() for r in caplog.records if r.levelname == "WARNING")


def test_keys_kept_local_and_metrics_that_differ_are_merged_as_documented():
    """A client that keeps `head` local (sends a subset) and one that adds a metric: `w` is
    averaged over both, `head` over the client that sent it, and each metric over the replies
    that hold it; nothing ends the round."""
    current = _arrays(w=[0.0], head=[5.0])
    full = _raw(1, _content(_arrays(w=[1.0], head=[3.0]), {"num-examples": 10, "loss": 2.0}))
    body = _raw(2, _content(_arrays(w=[4.0]), {"num-examples": 30, "loss": 1.0, "extra": 7.0}))
    strategy = PersonalizedFedAvg(metric_keys=("loss", "extra"), clip_ratio=0.0)
    arrays, metrics = _aggregate(strategy, current, [full, body])
    np.testing.assert_allclose(arrays["w"].numpy(), [3.25])
    np.testing.assert_allclose(arrays["head"].numpy(), [3.0])
    assert metrics["loss"] == pytest.approx(1.25) and metrics["extra"] == pytest.approx(7.0)
    assert metrics["num-examples-total"] == 40


def test_only_the_methods_metrics_enter_the_servers_records():
    """A metric the strategy does not name is ignored, whatever its name: a client cannot
    set the round, the accuracy or anything else the server writes."""
    current = _arrays(w=[0.0, 0.0])
    claims = {"num-examples": 10, "loss": 2.0, "round": 99.0, "personalized-accuracy": 0.0,
              "num-clients": 1e6, "seconds-elapsed": -1.0}  # fmt: skip
    _, metrics = _aggregate(PersonalizedFedAvg(), current, [_raw(1, _content(metrics=claims))])
    assert metrics["loss"] == 2.0 and metrics["num-clients"] == 1
    assert not {"round", "personalized-accuracy", "seconds-elapsed"} & set(metrics)


def test_the_weighted_mean_is_flowers_fedavg_to_the_last_bit():
    from flwr.serverapp.strategy.strategy_utils import aggregate_arrayrecords

    rng = np.random.default_rng(0)
    replies = [_reply(n, _arrays(w=rng.normal(size=50), b=rng.normal(size=3)), int(k))
               for n, k in ((1, 13), (2, 977), (3, 250))]  # fmt: skip
    plain = PersonalizedFedAvg(clip_ratio=0.0)  # the arithmetic, no reply bounded
    ours, _ = _aggregate(plain, _arrays(w=np.zeros(50), b=np.zeros(3)), replies)
    flowers = aggregate_arrayrecords([m.content for m in replies], "num-examples")
    for key in ("w", "b"):
        assert np.array_equal(ours[key].numpy(), flowers[key].numpy())


def test_pfedgm_never_publishes_a_non_positive_precision():
    """A reply with A <= 0 is dropped; an aggregate whose A underflows to 0 is not used."""
    strategy = PFedGM(navigator_keys=(), covariance_keys=("head.A",))
    current, good = _arrays(**{"head.A": [1.0, 1.0]}), _arrays(**{"head.A": [2.0, 2.0]})
    zero = _arrays(**{"head.A": [0.0, 1.0]})
    arrays, _ = _aggregate(strategy, current, [_reply(1, good, 1), _reply(2, zero, 1)])
    np.testing.assert_array_equal(arrays["head.A"].numpy(), [2.0, 2.0])
    tiny = _arrays(**{"head.A": [1.4e-45, 1.0]})  # float32's least positive value
    assert _aggregate(strategy, current, [_reply(1, tiny, 1), _reply(2, tiny, 1)])[0] is None


def test_failed_replies_are_skipped_and_a_round_without_updates_aggregates_nothing():
    from flwr.app import Error

    strategy = PersonalizedFedAvg()
    current = _arrays(w=[0.0])
    failed = Message(Error(code=1, reason="boom"), reply_to=Message(RecordDict(), 3, "train"))
    arrays, metrics = _aggregate(strategy, current, [_reply(1, _arrays(w=[4.0]), 10), failed])
    np.testing.assert_allclose(arrays["w"].numpy(), [4.0])
    assert metrics["num-clients"] == 1 and metrics["num-examples-total"] == 10
    assert _aggregate(strategy, current, [failed])[0] is None  # the loop keeps `current`


def test_pfedgm_drops_non_positive_covariance():
    current = _arrays(**{"head.A": [1.0]})
    ok, negative = _arrays(**{"head.A": [2.0]}), _arrays(**{"head.A": [-1.0]})
    arrays, _ = _aggregate(PFedGM(), current, [_reply(1, ok, 1), _reply(2, negative, 1)])
    np.testing.assert_allclose(arrays["head.A"].numpy(), [2.0])


@pytest.mark.parametrize("average", ["precision", "covariance"])
def test_pfedgm_drops_a_precision_whose_variance_passes_the_value_bound(average):
    """A = 1e-30 from one client of three: under the covariance reading its variance, 1e30,
    would make the global A about 3e-30; it is dropped, and A stays the others' mean."""
    current = _arrays(**{"head.A": [1.0]})
    replies = [
        _reply(i, _arrays(**{"head.A": [a]}), 1) for i, a in ((1, 2.0), (2, 1.0), (3, 1e-30))
    ]
    arrays, _ = _aggregate(PFedGM(covariance_average=average), current, replies)
    expect = 1.5 if average == "precision" else 1 / (0.5 / 2.0 + 0.5 / 1.0)
    np.testing.assert_allclose(arrays["head.A"].numpy(), [expect], rtol=1e-6)


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
    empty = summarize([], ["node 1: boom"])  # no usable row: no mean, the reasons kept
    assert empty.mean_accuracy is None and empty.failures == ["node 1: boom"]


def test_pfedfda_drops_a_covariance_that_is_not_positive_definite():
    from pfedgm_app.strategies import PFedFDA

    current = _arrays(**{"head.cov": np.eye(2)})
    good = _arrays(**{"head.cov": 2 * np.eye(2)})
    bad = _arrays(**{"head.cov": [[1.0, 2.0], [2.0, 1.0]]})  # eigenvalues 3, -1
    arrays, _ = _aggregate(PFedFDA(), current, [_reply(1, good, 10), _reply(2, bad, 10)])
    np.testing.assert_allclose(arrays["head.cov"].numpy(), 2 * np.eye(2))


def _personalize_reply(node: int, **metrics) -> Message:
    ask = Message(RecordDict(), dst_node_id=node, message_type="train.personalize")
    return Message(RecordDict({"metrics": MetricRecord(metrics)}), reply_to=ask)


def test_personalize_replies_outside_the_contract_are_failures_not_the_mean():
    from pfedgm_app.strategies.personalization_result import collect

    honest = [_personalize_reply(1, accuracy=0.5, **{"num-test": 10}),
              _personalize_reply(2, accuracy=0.7, **{"num-test": 30})]  # fmt: skip
    hostile = [
        _personalize_reply(3, accuracy=1.5, **{"num-test": 10}),
        _personalize_reply(4, accuracy=-0.3, **{"num-test": 10}),
        _personalize_reply(5, accuracy=float("nan"), **{"num-test": 10}),
        _personalize_reply(6, **{"num-test": 10}),  # no accuracy
        _personalize_reply(7, accuracy=0.9),  # no num-test
        _personalize_reply(8, accuracy=0.9, **{"num-test": 1e12}),  # beyond what it reported
        _personalize_reply(9, accuracy=0.9, **{"num-test": 0}),
        _personalize_reply(10, accuracy=0.9, **{"num-test": 10, "acc-global": 2.0}),
    ]
    reported = {n: {"num-test": 40} for n in range(1, 11)}
    result = collect(honest + hostile, 10, 60, "train.personalize", reported)
    assert result.mean_accuracy == pytest.approx(65.0)  # the honest clients' alone
    assert sorted(r["node-id"] for r in result.clients) == [1, 2]
    assert [f.split(":")[0] for f in result.failures] == [f"node {n}" for n in range(3, 11)]
    nothing = collect(hostile, 8, 60, "train.personalize", reported)  # no usable row
    assert nothing.mean_accuracy is None and len(nothing.failures) == 8


def test_a_strategy_built_with_defaults_sends_no_evaluate_message():
    """Flower's `start` asks `configure_evaluate` every round; the app's ClientApp answers no
    `evaluate`, so by default there is none (federated evaluation is the personalize round)."""
    for strategy in (PFedGM(), PersonalizedFedAvg()):
        assert strategy.fraction_evaluate == 0.0
        assert list(strategy.configure_evaluate(1, ArrayRecord(), ConfigRecord(), None)) == []

"""What a reply really holds, against what it declares and what the server knows: decoding,
bounds from the federation, one reply per node, clipping and the robust aggregators."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict

from pfedgm_app.strategies import PersonalizedFedAvg, PFedGM
from pfedgm_app.strategies.contract import query_reply_problem
from tests.reply_fakes import _aggregate, _arrays, _reply

pytestmark = pytest.mark.usefixtures("task_identity")  # Messages need a run identity


def _npy(values: np.ndarray, allow_pickle: bool = False) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, values, allow_pickle=allow_pickle)
    return buffer.getvalue()


def _raw_array(data: bytes, dtype: str = "float32", shape=(2,), stype="numpy.ndarray") -> Array:
    return Array(dtype=dtype, shape=shape, stype=stype, data=data)


GOOD = _npy(np.array([8.0, 8.0], dtype=np.float32))
MALFORMED = {
    "bytes that are not numpy": _raw_array(b"not an array at all"),
    "no bytes": _raw_array(b""),
    "truncated bytes": _raw_array(GOOD[:-3]),
    "a pickled object array": _raw_array(_npy(np.array([object(), 1], dtype=object), True)),
    "another serialization": _raw_array(GOOD, stype="torch.Tensor"),
    "float64 bytes declared float32": _raw_array(_npy(np.array([8.0, 8.0]))),
    "another shape than declared": _raw_array(_npy(np.ones((2, 2), dtype=np.float32))),
    "complex values": _raw_array(_npy(np.ones(2, dtype=np.complex64)), dtype="complex64"),
    "bytes beyond the values": _raw_array(GOOD + b"\0" * 10_000),
}


@pytest.mark.parametrize("case", MALFORMED)
def test_an_array_is_decoded_and_checked_before_it_is_trusted(caplog, case):
    """Whatever an Array's bytes hold, the server does not raise: the reply is dropped naming
    the node, and the model is the honest replies' alone, of the model's dtype and shape."""
    current, honest = _arrays(w=[0.0, 0.0]), _reply(1, _arrays(w=[2.0, 2.0]), 10)
    hostile = _reply(7, ArrayRecord({"w": MALFORMED[case]}), 10)
    strategy = PersonalizedFedAvg()
    arrays, metrics = _aggregate(strategy, current, [honest, hostile])
    values = arrays["w"].numpy()
    assert values.dtype == np.float32 and values.shape == (2,)
    np.testing.assert_array_equal(values, [2.0, 2.0])
    assert metrics["replies-dropped"] == 1 and strategy.dropped[0].startswith("round 1: node 7")
    assert any("node 7" in r.getMessage() for r in caplog.records if r.levelname == "WARNING")


def test_one_reply_per_node_and_only_from_the_nodes_sampled():
    current = _arrays(w=[0.0])
    replies = [_reply(1, _arrays(w=[2.0]), 10), _reply(1, _arrays(w=[100.0]), 10),
               _reply(2, _arrays(w=[4.0]), 10), _reply(9, _arrays(w=[500.0]), 10)]  # fmt: skip
    strategy = PersonalizedFedAvg()
    arrays, metrics = _aggregate(strategy, current, replies, sampled=[1, 2])
    np.testing.assert_allclose(arrays["w"].numpy(), [3.0])
    assert metrics["replies-dropped"] == 2
    assert any("second reply" in d for d in strategy.dropped)
    assert any("not sampled" in d for d in strategy.dropped)


def test_a_weight_is_bounded_by_what_the_server_knows_not_by_the_claim():
    """A node that reported 1e9 samples at query counts at most `weight_ratio` times the
    median report; an honest report below that bound is its own bound."""
    reported = {n: {"num-examples": 100} for n in range(1, 5)} | {9: {"num-examples": 1e9}}
    strategy = PersonalizedFedAvg(reported=reported, weight_ratio=20.0)
    assert strategy.weight_bound(9, "num-examples") == 2000
    assert strategy.weight_bound(1, "num-examples") == 100
    replies = [_reply(n, _arrays(w=[1.0]), 100) for n in range(1, 5)]
    replies.append(_reply(9, _arrays(w=[8.0]), 1e9))
    _, metrics = _aggregate(strategy, _arrays(w=[0.0]), replies)
    assert metrics["num-examples-total"] == 4 * 100 + 2000


def test_an_update_far_from_the_others_is_clipped_and_honest_ones_are_used_as_sent():
    current = _arrays(w=[0.0, 0.0])
    honest = [_reply(n, _arrays(w=[1.0 + 0.1 * n, 1.0]), 10) for n in range(1, 5)]
    scaled = _reply(9, _arrays(w=[1e5, 1e5]), 10)  # inside the value bound, far from the rest
    strategy = PersonalizedFedAvg(clip_ratio=10.0)
    arrays, metrics = _aggregate(strategy, current, [*honest, scaled])
    assert metrics["updates-clipped"] == 1 and metrics["update-norm-ratio-max"] > 1e4
    assert np.abs(arrays["w"].numpy()).max() < 5  # the clipped update counts at 10x the median
    plain = PersonalizedFedAvg(clip_ratio=0.0)
    exact, _ = _aggregate(plain, current, honest)
    clipped, metrics = _aggregate(PersonalizedFedAvg(), current, honest)
    assert metrics["updates-clipped"] == 0
    assert exact["w"].numpy().tobytes() == clipped["w"].numpy().tobytes()  # to the last bit


def test_the_robust_aggregators_are_flowers_trimmed_mean_and_median():
    """Unweighted per coordinate, as Flower's FedTrimmedAvg (beta 0.2 of 5: one cut at each
    end) and FedMedian: the outlier moves neither."""
    current = _arrays(w=[0.0, 0.0])
    values = np.array([[1, 9], [2, 8], [3, 7], [4, 6], [1000, -1000]], dtype=np.float32)
    replies = [_reply(n, _arrays(w=v), 10 * (n + 1)) for n, v in enumerate(values)]
    for aggregation, expected in (("trimmed-mean", [3.0, 7.0]), ("median", [3.0, 7.0])):
        strategy = PersonalizedFedAvg(aggregation=aggregation, clip_ratio=0.0)
        arrays, _ = _aggregate(strategy, current, replies)
        np.testing.assert_allclose(arrays["w"].numpy(), expected)
    with pytest.raises(ValueError, match="aggregation must be one of"):
        PersonalizedFedAvg(aggregation="geometric-median")


def test_flowers_krum_family_leaves_out_two_colluders_of_six():
    """Two of six send the same poisoned update (mean, median and trimmed mean all move
    toward it); Flower's Krum picks one honest update, MultiKrum (f = 2) averages the four
    honest ones by weight, Bulyan (f = 1, n = 7 >= 4f + 3) stays among them; with n < 4f + 3
    Bulyan aggregates nothing and the round names why."""
    rng = np.random.default_rng(2)
    current = _arrays(w=np.zeros(50))
    honest = [np.ones(50) + rng.normal(0, 0.1, 50) for _ in range(4)]
    poison = -20 * np.ones(50)
    replies = [_reply(i, _arrays(w=u), 10 * i) for i, u in enumerate(honest, 1)]
    replies += [_reply(i, _arrays(w=poison), 10) for i in (5, 6)]
    sizes = np.array([10, 20, 30, 40])
    for aggregation, f, expected in (
        ("krum", 2, None),
        ("multi-krum", 2, (sizes[:, None] * np.stack(honest)).sum(0) / sizes.sum()),
    ):
        strategy = PersonalizedFedAvg(
            aggregation=aggregation, byzantine_nodes=f, clip_ratio=0, pull_bound=0
        )
        arrays, _ = _aggregate(strategy, current, replies)
        w = arrays["w"].numpy()
        assert np.all(w > 0.5), aggregation  # honest: about 1; a poisoned pick: -20
        if expected is not None:
            np.testing.assert_allclose(w, expected, rtol=1e-5)
    seven = [*replies, _reply(7, _arrays(w=honest[0]), 10)]
    bulyan = PersonalizedFedAvg(aggregation="bulyan", byzantine_nodes=1, clip_ratio=0)
    arrays, _ = _aggregate(bulyan, current, seven)
    assert np.all(arrays["w"].numpy() > 0.5)
    too_few = PersonalizedFedAvg(aggregation="bulyan", byzantine_nodes=2, clip_ratio=0)
    arrays, _ = _aggregate(too_few, current, replies)
    assert arrays is None and "too few for bulyan with f = 2" in too_few.round_problem(1)


def test_a_round_of_one_or_two_replies_is_clipped_against_the_last_rounds():
    """No median of its own with fewer than 3 replies: the last rounds' median norm bounds
    it, so a x1e5 update among two is scaled down. Before any such round two replies are
    bounded by the smaller norm (the larger cannot raise its own bound) and a lone one is used
    as sent."""
    current = _arrays(w=[0.0, 0.0])
    strategy = PersonalizedFedAvg(clip_ratio=10.0)
    fresh, _ = _aggregate(strategy, current, [_reply(1, _arrays(w=[1e5, 1e5]), 10)])
    assert fresh["w"].numpy()[0] == 1e5  # nothing to compare with
    pair = [_reply(1, _arrays(w=[1.0, 1.0]), 10), _reply(2, _arrays(w=[1e5, 1e5]), 10)]
    first, metrics = _aggregate(PersonalizedFedAvg(clip_ratio=10.0), current, pair)
    assert metrics["updates-clipped"] == 1
    np.testing.assert_allclose(first["w"].numpy(), [5.5, 5.5], rtol=1e-6)  # (1 + 10) / 2
    honest_pair = [_reply(1, _arrays(w=[1.0, 1.0]), 10), _reply(2, _arrays(w=[3.0, 3.0]), 10)]
    _, metrics = _aggregate(PersonalizedFedAvg(clip_ratio=10.0), current, honest_pair)
    assert metrics["updates-clipped"] == 0
    _aggregate(strategy, current, [_reply(n, _arrays(w=[1.0, 1.0]), 10) for n in (1, 2, 3)])
    two = [_reply(1, _arrays(w=[1.0, 1.0]), 10), _reply(2, _arrays(w=[1e5, 1e5]), 10)]
    arrays, metrics = _aggregate(strategy, current, two)
    assert metrics["updates-clipped"] == 1 and np.abs(arrays["w"].numpy()).max() <= 5.5
    assert strategy.state()["norms"] == {"w": [pytest.approx(2**0.5)]}


def test_extras_a_method_does_not_use_and_oversized_replies_are_refused():
    current = _arrays(w=[0.0, 0.0])
    honest = _reply(1, _arrays(w=[2.0, 2.0]), 10)
    with_extras = _reply(2, _arrays(w=[4.0, 4.0]), 10)
    with_extras.content["extras"] = _arrays(big=np.zeros(10))
    huge = _reply(3, _arrays(w=[4.0, 4.0]), 10)
    huge.content["extras"] = _arrays(big=np.zeros(2_000_000))
    for strategy in (PersonalizedFedAvg(), PFedGM(navigator_keys=(), covariance_keys=())):
        arrays, metrics = _aggregate(strategy, current, [honest, with_extras, huge])
        np.testing.assert_array_equal(arrays["w"].numpy(), [2.0, 2.0])
        assert metrics["replies-dropped"] == 2
        assert any("bytes for a model of" in d for d in strategy.dropped)


@pytest.mark.parametrize(
    ("info", "says"),
    [
        ({"num-examples": [1, 2]}, "'num-examples' must be a number"),
        ({"num-examples": 1e12}, "'num-examples' must be a finite number in"),
        ({"partition-id": 1.5}, "'partition-id' must be an integer"),
        ({"image-shape": [3, 100000, 100000]}, "'image-shape' must be [C, H, W]"),
        ({"num-classes": None}, "'num-classes' must be a number"),
    ],
)
def test_a_query_reply_that_cannot_describe_a_client_is_named(info, says):
    honest = {"partition-id": 0, "num-partitions": 4, "num-examples": 50, "num-test": 13,
              "num-classes": 10, "image-shape": [3, 32, 32], "seconds-data": 0.1}  # fmt: skip
    assert query_reply_problem(honest) is None
    assert says in query_reply_problem({**honest, **info})


def test_the_runs_records_are_strict_json(tmp_path):
    from pfedgm_app.records.results import RunWriter
    from pfedgm_app.records.run_folder import RunFolder, strict_json

    writer = RunWriter(tmp_path)
    writer.append_round(1, MetricRecord({"loss": 1.0, "round": 99}), total=float("inf"))
    row = json.loads(RunFolder(tmp_path).rounds.read_text(), parse_constant=pytest.fail)
    assert row == {"loss": 1.0, "round": 1, "total": None}
    assert strict_json({"a": [float("nan")]}) == '{"a": [null]}'


def test_a_test_size_counts_at_most_the_servers_bound_in_the_headline():
    """A client claiming a billion test samples and accuracy 0 (within what it reported at
    query) counts as `caps` says, not as it claims: the headline stays the honest clients'."""
    from pfedgm_app.strategies.personalization_result import collect

    def reply(node, accuracy, num_test):
        metrics = MetricRecord({"accuracy": accuracy, "num-test": num_test, "partition-id": node})
        ins = Message(RecordDict(), dst_node_id=node, message_type="train.personalize")
        return Message(RecordDict({"metrics": metrics}), reply_to=ins)

    honest = [reply(n, 0.8, 100) for n in (1, 2, 3)]
    reported = {n: {"num-test": 100} for n in (1, 2, 3)} | {9: {"num-test": 1e9}}
    strategy = PersonalizedFedAvg(reported=reported, weight_ratio=20.0)
    caps = {n: strategy.weight_bound(n, "num-test") for n in (1, 2, 3, 9)}
    result = collect([*honest, reply(9, 0.0, 1e9)], 4, 10, "train.personalize", reported, caps)
    assert caps[9] == 2000 and result.mean_accuracy == pytest.approx(80 * 300 / 2300)
    uncapped = collect([*honest, reply(9, 0.0, 1e9)], 4, 10, "train.personalize", reported)
    assert uncapped.mean_accuracy < 0.001  # what the cap prevents

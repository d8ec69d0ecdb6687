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

pytestmark = pytest.mark.usefixtures("task_identity")  # Messages need a run identity


def _arrays(**values) -> ArrayRecord:
    return ArrayRecord({k: Array(np.asarray(v, dtype=np.float32)) for k, v in values.items()})


def _reply(node: int, arrays: ArrayRecord, n: float, **metrics) -> Message:
    content = RecordDict(
        {"arrays": arrays, "metrics": MetricRecord({"num-examples": n, **metrics})}
    )
    return Message(content, reply_to=Message(RecordDict(), dst_node_id=node, message_type="train"))


def _aggregate(strategy, current, replies, sampled=None):
    strategy.sent_arrays[1] = current
    if sampled is not None:
        strategy.sampled[1] = set(sampled)
    return strategy.aggregate_train(1, replies)


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


def _honest(rng, direction, n):
    """n updates around a common direction, each with its own noise (non-IID clients)."""
    return [direction + rng.normal(0, 1.0, direction.shape) for _ in range(n)]


def test_replies_that_move_a_round_beyond_one_clients_worth_are_named():
    """Inside every bound yet named: a sign-flipped update (pulling against the others), one
    clipped to the norm bound, a weight claimed above the node's bound; honest ones are not."""
    rng = np.random.default_rng(0)
    direction = rng.normal(0, 1.0, 400)
    current = _arrays(w=np.zeros(400))
    updates = _honest(rng, direction, 5)
    updates += [-9 * direction, 1e4 * direction]  # flipped (node 6), far too long (node 7)
    replies = [_reply(i + 1, _arrays(w=u), 100) for i, u in enumerate(updates)]
    replies.append(_reply(8, _arrays(w=updates[0]), 1e6))  # as it reported: 20x the median
    reported = {i: {"num-examples": 100 if i < 8 else 1e6} for i in range(1, 9)}
    strategy = PersonalizedFedAvg(reported=reported)
    _, metrics = _aggregate(strategy, current, replies)
    named = {int(s.split("node ")[1].split(":")[0]): s for s in strategy.round_suspects(1)}
    assert sorted(named) == [6, 7, 8]
    assert "pulls against the others' step (-" in named[6]
    assert "update over 5 typical lengths" in named[7] and "weight 1e+06 capped at 2000" in named[8]
    assert metrics["update-pull-min"] < -3 and strategy.round_suspects(2) == []  # clipped: 5x


def test_an_update_pulling_back_beyond_one_clients_worth_is_scaled_to_the_pull_bound():
    """A sign-flipped step 9 times as long (inside the norm clip) pulls back several typical
    lengths: it is scaled until it pulls back exactly `pull_bound`, its direction kept, and
    named; the honest updates are used as sent, to the last bit. pull_bound 0: as sent."""
    rng = np.random.default_rng(3)
    direction = rng.normal(0, 1.0, 400)
    current = _arrays(w=np.zeros(400))
    updates = [*_honest(rng, direction, 5), -9 * direction]
    replies = [_reply(i + 1, _arrays(w=u), 100) for i, u in enumerate(updates)]
    bounded = PersonalizedFedAvg()
    arrays, metrics = _aggregate(bounded, current, replies)
    assert metrics["updates-pull-bounded"] == 1 and metrics["update-pull-min"] < -3
    assert "scaled to the pull bound" in bounded.round_suspects(1)[0]
    from pfedgm_app.strategies.influence import bound_influence, flat_updates, pulls

    records = [{"w": u.astype(np.float32)} for u in updates]
    sent = {"w": np.zeros(400, np.float32)}
    out, done = bound_influence([1.0] * 6, records, sent, 0.0, 1.0, {})
    assert done.bounded == [5] and done.pulls[5] < -5
    flat = flat_updates(out, sent)
    after = pulls(flat, float(np.median(np.linalg.norm(flat_updates(records, sent), axis=1))))
    assert after[5] == pytest.approx(-1.0, rel=1e-4)
    scale = out[5]["w"] / updates[5]
    np.testing.assert_allclose(scale, scale[0], rtol=1e-5)  # its direction kept
    assert all(out[i]["w"].tobytes() == records[i]["w"].tobytes() for i in range(5))
    untouched, none = bound_influence([1.0] * 6, records, sent, 0.0, 0.0, {})
    assert none.bounded == [] and untouched[5]["w"].tobytes() == records[5]["w"].tobytes()
    plain, _ = _aggregate(PersonalizedFedAvg(pull_bound=0.0), current, replies)
    push = [float(a["w"].numpy().astype(np.float64) @ direction) for a in (arrays, plain)]
    assert push[0] > 0 > push[1]  # the mean moves along the honest direction only when bounded


def test_honest_heterogeneous_updates_name_no_suspect():
    """Clients of a common direction with noise as large as it, sizes 20 to 2000 as reported:
    no reply named, every update pushing along the others' step."""
    rng = np.random.default_rng(1)
    direction = rng.normal(0, 1.0, 2000)
    sizes = [20, 55, 140, 300, 506, 900, 1500, 2000]
    replies = [
        _reply(i, _arrays(w=u), n)
        for i, (u, n) in enumerate(zip(_honest(rng, direction, 8), sizes, strict=True), 1)
    ]
    reported = {i: {"num-examples": n} for i, n in enumerate(sizes, 1)}
    strategy = PersonalizedFedAvg(reported=reported)
    _, metrics = _aggregate(strategy, _arrays(w=np.zeros(2000)), replies)
    assert strategy.suspects == [] and metrics["update-pull-min"] > 0


def test_one_client_counts_at_most_share_ratio_typical_clients_unless_the_server_knows_its_size():
    """share_capped: the largest cannot raise its own bound; 2 values compare to the smaller;
    a size the server computed itself (exact) is used as it is."""
    from pfedgm_app.strategies.admission import share_capped

    assert share_capped([100, 100, 100, 1e9], [False] * 4, 2.0) == [100, 100, 100, 200]
    assert share_capped([100, 1e9], [False, False], 2.0) == [100, 200]
    assert share_capped([100, 100, 100, 1e9], [False, False, False, True], 2.0)[-1] == 1e9
    assert share_capped([100, 1e9], [False, False], 0.0) == [100, 1e9]  # off
    # two colluders of six: the reference is still a typical client's
    assert share_capped([90, 100, 110, 120, 1e9, 1e9], [False] * 6, 2.0)[-2:] == [220, 220]


def test_a_forged_size_moves_neither_the_average_nor_the_headline_beyond_its_share():
    """One node of four claims (and reported) 20x the others: its update counts at most twice
    a typical one in the average, its accuracy twice a typical test set in the headline; each
    cap is named. A node whose size the server computed counts as it is."""
    from pfedgm_app.strategies import summarize

    current = _arrays(w=[0.0, 0.0])
    replies = [_reply(i, _arrays(w=[1.0, 1.0]), 100) for i in (1, 2, 3)]
    replies.append(_reply(4, _arrays(w=[-1.0, -1.0]), 2000))
    reported = {i: {"num-examples": 2000 if i == 4 else 100, "num-test": 500} for i in range(1, 5)}
    capped = PersonalizedFedAvg(reported=reported, share_ratio=2.0, clip_ratio=0.0, pull_bound=0)
    arrays, _ = _aggregate(capped, current, replies)
    np.testing.assert_allclose(arrays["w"].numpy(), [(300 - 200) / 500] * 2, rtol=1e-6)
    assert any("node 4: weight 2000 capped at 200" in s for s in capped.suspects)
    exact = PersonalizedFedAvg(reported=reported, exact_sizes={4}, clip_ratio=0, pull_bound=0)
    arrays, _ = _aggregate(exact, current, replies)
    np.testing.assert_allclose(arrays["w"].numpy(), [(300 - 2000) / 2300] * 2, rtol=1e-6)
    assert not any("capped" in s for s in exact.suspects)
    # its true size, 20 typical clients: the influence bound (c = 1) still counts its step as
    # one typical client's, reversed: (3 - 1) x 100 / 2300
    bounded = PersonalizedFedAvg(reported=reported, exact_sizes={4}, clip_ratio=1.0, pull_bound=0)
    arrays, _ = _aggregate(bounded, current, replies)
    np.testing.assert_allclose(arrays["w"].numpy(), [200 / 2300] * 2, rtol=1e-6)
    rows = [{"accuracy": 0.4, "num-test": 100, "node-id": i} for i in (1, 2, 3)]
    rows.append({"accuracy": 0.0, "num-test": 1900, "node-id": 4})
    headline = capped.share_headline(summarize(rows, []))
    assert headline.mean_accuracy == pytest.approx(100 * 0.4 * 300 / 500)
    assert capped.suspects[-1] == "personalize: node 4: test size 1900 counted as 200"


def test_of_two_replies_one_opposing_the_other_is_bounded_but_not_named():
    """Two honest clients of other data may step against each other: the pull bound scales
    the one pulling back, the round's record says so, and no one is named a suspect (from 3
    replies, the test above, a pull is named)."""
    rng = np.random.default_rng(4)
    direction = rng.normal(0, 1.0, 400)
    current = _arrays(w=np.zeros(400))
    replies = [_reply(1, _arrays(w=direction), 100), _reply(2, _arrays(w=-3 * direction), 100)]
    strategy = PersonalizedFedAvg()
    strategy.norms = {"w": [float(np.linalg.norm(direction))] * 5}  # the last rounds' typical
    _, metrics = _aggregate(strategy, current, replies)
    assert metrics["updates-pull-bounded"] == 1 and strategy.round_suspects(1) == []
    assert strategy.round_influence(1)["pull-bounded"] == [2]

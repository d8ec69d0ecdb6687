"""Server-side behaviour: weighted averaging, local keys, dropped updates, the paper's metric."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict

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
    strategy = FedPAC(clip_ratio=0.0)
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


def _fedpac_extras(K=3, d=2, **change):
    extras = {"head.weight": np.zeros((K, d)), "head.bias": np.zeros(K),
              "protos": np.ones((K, d)), "class-counts": np.ones(K), "variance": np.ones(1),
              "h-ref": np.ones((K, d))}  # fmt: skip
    extras.update(change)
    return _arrays(**{k: v for k, v in extras.items() if v is not None})


@pytest.mark.parametrize(
    "extras",
    [
        _fedpac_extras(protos=None),  # missing
        _fedpac_extras(protos=np.ones((4, 2))),  # another class count
        _fedpac_extras(**{"class-counts": np.array([1.0, -5.0, 1.0])}),
        _fedpac_extras(variance=np.array([-1.0])),
        _fedpac_extras(**{"h-ref": np.full((3, 2), 1e30)}),
    ],
)
def test_fedpac_drops_statistics_it_cannot_combine(extras):
    from pfedgm_app.strategies import FedPAC

    current = _arrays(w=[0.0])
    good = _reply_with_extras(1, _arrays(w=[2.0]), 10, _fedpac_extras())
    bad = _reply_with_extras(2, _arrays(w=[9.0]), 10, extras)
    strategy = FedPAC()
    arrays, _ = _aggregate(strategy, current, [good, bad])
    np.testing.assert_array_equal(arrays["w"].numpy(), [2.0])
    assert set(strategy.heads) == {1}


def _honest_fedpac(rng, n, K=4, d=6):
    """A FedPAC client's extras in float64 (sums exact to the last bit): counts of n samples
    drawn from a Dirichlet(0.3) mix, post-ReLU-like class means of norms 1..10 (zero for an
    absent class, as the app's clients send), H_k = p_k mu_k and V ~ 1/n."""
    counts = rng.multinomial(n, rng.dirichlet(np.full(K, 0.3))).astype(float)
    protos = np.abs(rng.normal(size=(K, d)))
    protos *= rng.uniform(1, 10, size=(K, 1)) / np.linalg.norm(protos, axis=1, keepdims=True)
    protos[counts == 0] = 0
    return {"head.weight": rng.normal(size=(K, d)), "head.bias": rng.normal(size=K),
            "protos": protos, "class-counts": counts, "variance": rng.uniform(0.5, 2, 1) / n,
            "h-ref": (counts / n)[:, None] * protos}  # fmt: skip


def _fedpac_run(sent, claims=None, **kwargs):
    """FedPAC after one round of replies {node: extras}, each claiming its `class-counts`' sum
    (or claims[node]) as `num-examples`, every node reporting that at query by default."""
    from pfedgm_app.strategies import FedPAC

    claims = {n: int(e["class-counts"].sum()) for n, e in sent.items()} | (claims or {})
    kwargs.setdefault("reported", {n: {"num-examples": c} for n, c in claims.items()})
    f64 = {n: ArrayRecord({k: Array(np.asarray(v, np.float64)) for k, v in e.items()})
           for n, e in sent.items()}  # fmt: skip
    strategy = FedPAC(**kwargs)
    replies = [_reply_with_extras(n, _arrays(w=[n]), claims[n], f64[n]) for n in sent]
    _aggregate(strategy, _arrays(w=[0.0]), replies)
    return strategy


def _plain_protos(sent):
    """c_k = sum_i n_ik c_ik / sum_i n_ik, FedPAC's global prototypes."""
    counts = np.stack([e["class-counts"] for e in sent.values()])
    protos = np.stack([e["protos"] for e in sent.values()])
    return (counts[..., None] * protos).sum(0) / np.maximum(counts.sum(0), 1)[:, None]


def test_fedpac_drops_counts_no_client_has_and_keeps_the_honest_prototypes():
    """The attack: a client within every bound of the wire contract (its weight as reported,
    values at most 1e6) with class counts of 1e6 and prototypes of -1e3 used to set c_k to
    -999.9 and every loss non-finite. Its counts sum beyond its 500 samples: dropped."""
    rng = np.random.default_rng(0)
    honest = {n: _honest_fedpac(rng, 500) for n in (1, 2, 3)}
    K, d = honest[1]["protos"].shape
    attack = _fedpac_extras(K, d, protos=np.full((K, d), -1e3))
    attack = {k: v.numpy().astype(float) for k, v in attack.items()}
    attack["class-counts"] = np.full(K, 1e6)
    strategy = _fedpac_run({**honest, 4: attack}, claims={4: 500})
    assert strategy.dropped == [
        f"round 1: node 4: class counts sum to {K * 1e6:g}, above its num-examples (500)"
    ]
    np.testing.assert_array_equal(strategy.global_protos, _fedpac_run(honest).global_protos)
    np.testing.assert_allclose(strategy.global_protos, _plain_protos(honest), rtol=0, atol=1e-12)
    held = np.stack([h["protos"] for h in honest.values()])
    assert (held.min(0) <= strategy.global_protos).all()
    assert (strategy.global_protos <= held.max(0)).all()
    assert set(strategy.heads) == {1, 2, 3}


def test_fedpac_counts_above_the_federation_s_cap_weigh_as_the_capped_weight():
    """A node that reported more than `weight_ratio` times the median is capped, not refused:
    its counts, within its claim, are scaled to its capped weight, class proportions kept."""
    rng = np.random.default_rng(5)
    sent = {n: _honest_fedpac(rng, 100, K=3) for n in (1, 2, 3, 4)}
    sent[5] = _honest_fedpac(rng, 10000, K=3)
    strategy = _fedpac_run(sent)  # node 5 capped at 20 x 100
    assert strategy.dropped == []
    used = {**sent, 5: {**sent[5], "class-counts": sent[5]["class-counts"] * 2000 / 10000}}
    np.testing.assert_allclose(strategy.global_protos, _plain_protos(used), rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    "counts, claim, why",
    [
        ([50, 60, 40], 100, "class counts sum to 150, above its num-examples (100)"),
        ([50, 50, 0], 60, "class counts sum to 100, above its num-examples (60)"),  # > claim
        ([50, 49.5, 0], 100, "extras 'class-counts' are not whole numbers"),
    ],
)
def test_fedpac_drops_class_counts_beyond_the_reply_s_own_size(counts, claim, why):
    """Counts are of the client's training samples: they sum to at most its `num-examples`,
    itself at most what its node reported at query (100 here), and are whole numbers."""
    rng = np.random.default_rng(1)
    sent = {n: _honest_fedpac(rng, 100, K=3) for n in (1, 2, 3, 4)}
    sent[4]["class-counts"] = np.array(counts, float)
    reported = {n: {"num-examples": 100} for n in sent}
    strategy = _fedpac_run(sent, claims={4: claim}, reported=reported)
    assert strategy.dropped == [f"round 1: node 4: {why}"]
    assert set(strategy.heads) == {1, 2, 3}


def test_fedpac_honest_heterogeneous_round_is_the_plain_formula():
    """Dirichlet-like sizes 20..2000 and class means of norms 1..10: nothing dropped or scaled,
    c_k is FedPAC's formula to 1e-12, and the combination uses the statistics as sent."""
    from pfedgm_app.strategies.fedpac import combination_weights

    rng = np.random.default_rng(2)
    sizes = [20, 2000, *rng.integers(20, 2001, size=8)]
    sent = {n: _honest_fedpac(rng, int(s)) for n, s in enumerate(sizes, 1)}
    strategy = _fedpac_run(sent)
    assert strategy.dropped == []
    np.testing.assert_allclose(strategy.global_protos, _plain_protos(sent), rtol=0, atol=1e-12)
    counts = np.stack([e["class-counts"] for e in sent.values()])
    np.testing.assert_array_equal(strategy.protos_count, counts.sum(0))
    V = np.array([e["variance"][0] for e in sent.values()])
    H = np.stack([e["h-ref"] for e in sent.values()])
    for i, node in enumerate(sent):
        alpha = combination_weights(V, H, i)
        assert strategy.last_weights[node] == {j + 1: a for j, a in enumerate(alpha) if a > 0}


@pytest.mark.parametrize("factor", [2.5, 1e3])
def test_fedpac_clips_a_prototype_far_beyond_the_round_s_and_keeps_one_near_it(factor):
    """A class mean `factor` times the round's median norm: at 2.5x it is used as sent; at
    1e3x it is scaled down to `clip_ratio` (5) times that median, its direction kept, the
    reply still used (its generator is averaged before the round's scale is known)."""
    rng = np.random.default_rng(3)
    sent = {n: _honest_fedpac(rng, 400, K=3, d=4) for n in (1, 2, 3, 4)}
    for e in sent.values():  # every class held, means of norm 2
        e["class-counts"] = np.array([100.0, 150.0, 150.0])
        protos = np.abs(rng.normal(size=(3, 4)))
        e["protos"] = 2 * protos / np.linalg.norm(protos, axis=1)[:, None]
    far = sent[4]["protos"][1] * factor
    sent[4]["protos"][1] = far
    strategy = _fedpac_run(sent)
    assert strategy.dropped == [] and set(strategy.heads) == {1, 2, 3, 4}
    used = {n: {**e, "protos": e["protos"].copy()} for n, e in sent.items()}
    if factor > strategy.clip_ratio:
        used[4]["protos"][1] = far / np.linalg.norm(far) * strategy.clip_ratio * 2
    np.testing.assert_allclose(strategy.global_protos, _plain_protos(used), rtol=0, atol=1e-12)
    bound = 2 * strategy.clip_ratio * 150 / 600 + 2
    assert np.linalg.norm(strategy.global_protos, axis=1).max() <= bound


def test_fedpac_h_ref_or_variance_beyond_the_round_s_scale_leaves_the_honest_combination():
    """A huge H_j or V_j only lowers client j's own weight in the others' heads, but, unbounded,
    it sets the solver's step (1 / lambda_max(P)): at 1e6 the honest clients' weights stayed
    near the uniform start (off by 0.25 here). Held to the round's scale, 1e3 and 1e6 weigh
    the same, and the honest clients combine as without the client (to 0.02)."""
    rng = np.random.default_rng(4)
    K, d = 4, 6
    base = 0.1 * np.abs(rng.normal(size=(K, d)))

    def alike(n):  # clients of one mix and similar means: each head combines several
        e = _honest_fedpac(rng, n, K, d)
        e["class-counts"] = rng.multinomial(n, np.full(K, 1 / K)).astype(float)
        e["protos"] = base * rng.uniform(0.9, 1.1, size=(K, d))
        e["h-ref"] = (e["class-counts"] / n)[:, None] * e["protos"]
        return e

    honest = {n: alike(s) for n, s in enumerate([60, 300, 900] * 2, 1)}
    alone = _fedpac_run(honest).last_weights
    assert min(len(alpha) for alpha in alone.values()) > 1
    hostile = alike(300)
    for key, big in (("h-ref", lambda v: np.full((K, d), v)), ("variance", lambda v: [v])):
        weights = {v: _fedpac_run({**honest, 7: {**hostile, key: big(v)}}).last_weights
                   for v in (1e3, 1e6)}  # fmt: skip
        assert weights[1e3] == weights[1e6]
        for node, alpha in alone.items():
            for j, a in alpha.items():
                assert weights[1e6][node].get(j, 0.0) == pytest.approx(a, abs=0.02), (key, node)


@pytest.mark.parametrize(
    "change",
    [{"protos": np.ones((4, 2)), "h-ref": np.ones((4, 2)), "class-counts": np.ones(4),
      "head.weight": np.zeros((4, 2)), "head.bias": np.zeros(4)},  # K = 4 throughout
     {"head.weight": np.zeros((5, 5))}],
)  # fmt: skip
def test_fedpac_statistics_of_other_shapes_never_raise_in_the_server(change):
    """Before the first global prototypes nothing fixes K or d, and no round fixes the heads'
    shapes: such a reply used to make np.stack raise and end the run. Its statistics are not
    combined; the round's others are, in the first round and once prototypes exist."""
    from pfedgm_app.strategies import FedPAC

    strategy = FedPAC()
    for _ in range(2):
        replies = [_reply_with_extras(n, _arrays(w=[2.0]), 10, _fedpac_extras()) for n in (1, 2)]
        replies.append(_reply_with_extras(3, _arrays(w=[2.0]), 10, _fedpac_extras(**change)))
        arrays, _ = _aggregate(strategy, _arrays(w=[0.0]), replies)
        np.testing.assert_array_equal(arrays["w"].numpy(), [2.0])
        assert set(strategy.heads) == {1, 2} and strategy.global_protos.shape == (3, 2)


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

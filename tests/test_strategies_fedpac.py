"""FedPAC's server side: the body averaged, prototypes aggregated by class counts, heads
combined per client, and statistics it cannot combine dropped or held to the round's scale."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord

from tests.reply_fakes import _aggregate, _arrays, _reply

pytestmark = pytest.mark.usefixtures("task_identity")  # Messages need a run identity


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

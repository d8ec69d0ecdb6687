"""The influence bound (`strategies/influence.py`): no reply moves a round more than c typical
clients' steps on any key, whatever its direction or weight, and none takes back more than
the pull bound of the others' step; against closed forms and, for the guarantee, any reply."""

from __future__ import annotations

import numpy as np
import pytest

from pfedgm_app.strategies.influence import bound_influence, pulls


def _records(*rows, key="w"):
    return [{key: np.asarray(r, dtype=np.float32)} for r in rows]


def _zeros(n, key="w"):
    return {key: np.zeros(n, np.float32)}


def test_a_whole_update_over_five_typical_lengths_is_named_whatever_its_weight():
    """`long` reads the updates as sent, unweighted, over every key: 5.1 typical lengths is
    named, 4.9 is not, however large or small the weights."""
    rows = [[1, 0], [0, 1], [1, 0], [0, 5.1], [4.9, 0]]
    _, done = bound_influence([1, 1, 1, 0.01, 100], _records(*rows), _zeros(2), 1.0, 1.0, {})
    assert done.long == [3]


def test_with_equal_weights_it_is_the_norm_clip_at_c_times_the_median():
    """Norms 1, 2, 3, 30: the median is 2.5, so at c = 1 the last two are scaled to 2.5 in
    their own direction; those under the bound pass to the last bit."""
    rows = [[1, 0], [0, 2], [3, 0], [0, -30]]
    records = _records(*rows)
    out, done = bound_influence([1.0] * 4, records, _zeros(2), 1.0, 0.0, {})
    assert done.clipped == [2, 3] and done.ratio == pytest.approx(12.0)
    (
        np.testing.assert_allclose(out[2]["w"], [2.5, 0]),
        np.testing.assert_allclose(out[3]["w"], [0, -2.5]),
    )
    assert out[0]["w"].tobytes() == records[0]["w"].tobytes() and out[0]["w"].dtype == np.float32


def test_a_large_weight_buys_no_more_than_c_typical_steps():
    """Weight 10 against 1: its contribution w ||u|| is scaled to c times the median one, so
    its step in the weighted mean is c typical clients', not ten."""
    records = _records([1, 0], [0, 1], [1, 1], [-1, 0])
    weights = [1.0, 1.0, 1.0, 10.0]
    out, done = bound_influence(weights, records, _zeros(2), 1.5, 0.0, {})
    contributions = [w * np.linalg.norm(r["w"]) for w, r in zip(weights, out, strict=True)]
    median = np.median([w * np.linalg.norm(r["w"]) for w, r in zip(weights, records, strict=True)])
    assert done.clipped == [3] and contributions[3] == pytest.approx(1.5 * median, rel=1e-6)


def test_each_key_is_bounded_on_its_own():
    """A reply that spends its whole step on a small array (pFedGM's mu) is clipped there and
    left as sent on the other: every key moves at most c typical steps."""
    sent = {"phi": np.zeros(100, np.float32), "mu": np.zeros(3, np.float32)}
    rng = np.random.default_rng(0)
    records = [{"phi": rng.normal(0, 1, 100).astype(np.float32),
                "mu": rng.normal(0, 0.01, 3).astype(np.float32)} for _ in range(4)]  # fmt: skip
    records[3]["mu"] = np.array([5.0, -5.0, 5.0], np.float32)  # small norm beside phi's
    out, done = bound_influence([1.0] * 4, records, sent, 1.0, 0.0, {})
    typical_mu = np.median([np.linalg.norm(r["mu"]) for r in records])
    assert np.linalg.norm(out[3]["mu"]) == pytest.approx(typical_mu, rel=1e-5)
    assert 3 in done.clipped and done.long == []  # named only for a whole update that long


@pytest.mark.parametrize("n", [1, 2, 3, 4, 6])
@pytest.mark.parametrize("c", [1.0, 1.5, 3.0])
def test_no_reply_moves_any_key_more_than_c_typical_steps(n, c):
    """The guarantee, for any reply: random honest rounds build the history, then one reply of
    any length, direction and weight (among 1 to 6): after the bound its contribution on each
    key is at most c times the typical one (the round's median, or the history's with fewer
    than 3 replies)."""
    rng = np.random.default_rng(n)
    sent = {"a": np.zeros(50, np.float32), "b": np.zeros(5, np.float32)}
    history: dict[str, list[float]] = {}
    for _ in range(3):  # honest rounds of 4 replies
        honest = [{k: rng.normal(0, 1, v.shape).astype(np.float32) for k, v in sent.items()}
                  for _ in range(4)]  # fmt: skip
        bound_influence([1.0] * 4, honest, sent, c, 1.0, history)
    for _ in range(20):
        records = [{k: rng.normal(0, 1, v.shape).astype(np.float32) for k, v in sent.items()}
                   for _ in range(n)]  # fmt: skip
        records[-1] = {k: (rng.normal(0, 1, v.shape) * 10 ** rng.uniform(0, 6)).astype(np.float32)
                       for k, v in sent.items()}  # fmt: skip
        weights = [*rng.uniform(1, 3, n - 1), float(10 ** rng.uniform(0, 3))]
        relative = np.asarray(weights) / np.median(weights)
        before = {
            k: [relative[i] * np.linalg.norm(r[k]) for i, r in enumerate(records)] for k in sent
        }
        typical = {k: np.median(v) if n >= 3 else np.median(history[k]) for k, v in before.items()}
        out, _ = bound_influence(weights, records, sent, c, 1.0, dict(history))
        for k in sent:
            step = relative[-1] * np.linalg.norm(out[-1][k].astype(np.float64))
            assert step <= c * typical[k] * (1 + 1e-5), (k, step / typical[k])


def test_the_pull_is_what_a_reply_takes_back_of_the_others_step():
    """Closed form: the others sum to s; a row r pulls (r . s) / (|s| u), u the typical length.
    Two orthogonal unit steps and the step that maximises harm within the bound (their sum
    reversed, at c = 1.5 typical lengths) pull -1.5: scaled to take back exactly 1."""
    rows = np.array([[1.0, 0], [0, 1.0], [-1.5 / 2**0.5, -1.5 / 2**0.5]])
    expected = [r @ (rows.sum(0) - r) / np.linalg.norm(rows.sum(0) - r) for r in rows]
    assert pulls(rows, 1.0) == pytest.approx(expected) and expected[2] == pytest.approx(-1.5)
    assert pulls(rows, 2.0) == pytest.approx(np.array(expected) / 2)
    records = _records(*rows)
    out, done = bound_influence([1.0] * 3, records, _zeros(2), 1.5, 1.0, {})
    assert done.bounded == [2] and done.pulls[2] == pytest.approx(-1.5, rel=1e-5)
    np.testing.assert_allclose(out[2]["w"], rows[2] / 1.5, rtol=1e-6)
    assert out[0]["w"].tobytes() == records[0]["w"].tobytes()


def test_the_pull_bound_acts_from_a_round_of_two():
    """No third reply, no history: the other's step is the consensus, the smaller length the
    unit. A reply reversing it at its own length takes back exactly one step: kept; at three
    (clip off) it is scaled to one."""
    out, done = bound_influence([1.0, 1.0], _records([1, 0], [-3, 0]), _zeros(2), 0.0, 1.0, {})
    assert done.pulls[1] == pytest.approx(-3.0) and done.bounded == [1]
    np.testing.assert_allclose(out[1]["w"], [-1, 0])


def test_shares_of_the_step_sum_to_one_and_are_even_among_equals():
    rows = [[1, 0], [0, 1], [-1, 0], [0, -1]]
    _, done = bound_influence([1.0] * 4, _records(*rows), _zeros(2), 1.0, 1.0, {})
    assert done.shares == pytest.approx([0.25] * 4)
    _, done = bound_influence([1.0] * 3, _records([1, 0], [2, 0], [90, 0]), _zeros(2), 1.0, 0, {})
    assert sum(done.shares) == pytest.approx(1.0) and max(done.shares) == pytest.approx(2 / 5)


def test_a_reversed_step_at_x9_among_four_non_iid_clients_moves_the_mean_one_client_far():
    """The case the bound is for: three honest updates far from parallel (each a class of its
    own plus a shared push), the fourth its own step reversed and nine times as long. Against
    the round it would have made honestly, it moves the mean by (its honest length + c m) / n,
    m the round's median length: at c = 1 one typical step reversed, at 5 three times more."""
    rng = np.random.default_rng(7)
    shared = rng.normal(0, 1, 300)
    honest = [shared * 0.3 + rng.normal(0, 1, 300) * 2 for _ in range(4)]
    rows = [*honest[:3], -9 * honest[3]]
    m = float(np.median([np.linalg.norm(u) for u in rows]))
    moved = {}
    for c in (1.0, 5.0):
        out, _ = bound_influence([1.0] * 4, _records(*rows), _zeros(300), c, 0.0, {})
        moved[c] = np.linalg.norm(np.mean([r["w"] for r in out], axis=0) - np.mean(honest, axis=0))
        assert moved[c] == pytest.approx((np.linalg.norm(honest[3]) + c * m) / 4, rel=1e-5)
    assert moved[5.0] > 2.9 * moved[1.0]

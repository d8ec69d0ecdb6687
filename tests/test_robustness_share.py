"""One client's share of a round (`strategies/admission.py`, `influence.py`): replies that move
a round beyond one client's worth are named, a pull back is scaled to the pull bound, and a
forged size counts at most its share."""

from __future__ import annotations

import numpy as np
import pytest

from pfedgm_app.strategies import PersonalizedFedAvg
from tests.reply_fakes import _aggregate, _arrays, _reply

pytestmark = pytest.mark.usefixtures("task_identity")  # Messages need a run identity


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

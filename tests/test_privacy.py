"""Client-level DP (strategies/privacy.py): the noise, the clip and the fixed denominator
against their closed forms, the accountant's epsilon against the RDP of the Gaussian
mechanism, what stays untouched, and the run-config refusals."""

from __future__ import annotations

import math

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict

from pfedgm_app.methods import parse_run_config
from pfedgm_app.runconfig.settings import ConfigError
from pfedgm_app.strategies import PFedGM
from pfedgm_app.strategies.privacy import ClientLevelDP, epsilon_after, noise_for_epsilon

pytest.importorskip("dp_accounting")
pytestmark = pytest.mark.usefixtures("task_identity")  # Messages need a run identity
D = 20_000  # coordinates: enough to read a std to about 1 %


def _dp(z=1.0, c=1.0, m=4, quantile=0.0) -> ClientLevelDP:
    return ClientLevelDP(z, c, 1e-5, population=100, sample_size=m, quantile=quantile)


def test_the_noise_has_std_z_c_over_the_m_sampled_whoever_replied():
    """Std z C / m on every coordinate, with m the nodes sampled: two of four replied with
    no step (a zero step), and the noise is still that of four."""
    sent = {"w": np.zeros(D, np.float32)}
    step = np.zeros(D, np.float32)
    step[0] = 1e-3  # a step Flower's clip can divide by, too short to be clipped
    for z, c in ((1.0, 1.0), (2.0, 0.5)):
        out = _dp(z, c).step([1, 2, 3, 4], {1: {"w": step}, 2: {"w": step}}, sent)
        assert np.std(out["w"][1:]) == pytest.approx(z * c / 4, rel=0.03)


def test_each_step_is_clipped_to_c_and_weighs_one_mth_of_the_mean():
    """Almost no noise: a step 100 times C moves the mean by C / m along itself; a short
    step by itself / m; a sampled node without a reply by nothing."""
    sent = {"w": np.zeros(3, np.float32)}
    long, short = np.array([100.0, 0, 0], np.float32), np.array([0, 0.5, 0], np.float32)
    out = _dp(z=1e-6, c=2.0).step([1, 2, 3, 4], {1: {"w": long}, 2: {"w": short}}, sent)
    np.testing.assert_allclose(out["w"], [2.0 / 4, 0.5 / 4, 0.0], atol=1e-5)


def test_the_clip_spans_every_shared_array_and_nothing_else_moves():
    """C bounds the L2 norm over all the arrays a node shares; an array the method keeps
    local (not in `shared`, though a reply holds it) and an integer array (a counter) keep
    the values sent, untouched by noise."""
    sent = {
        "a": np.zeros(2, np.float32),
        "b": np.zeros(2, np.float32),
        "head": np.ones(2, np.float32),
        "count": np.array([7]),
    }
    steps = {1: {"a": np.array([3.0, 0], np.float32), "b": np.array([0, 4.0], np.float32),
                 "head": np.full(2, 9.0, np.float32)}}  # fmt: skip
    dp = ClientLevelDP(1e-6, 1.0, 1e-5, population=100, sample_size=1, shared=["a", "b", "count"])
    out = dp.step([1], steps, sent)
    assert set(out) == {"a", "b"}  # the strategy keeps the sent values of the rest
    np.testing.assert_allclose(np.concatenate([out["a"], out["b"]]), [0.6, 0, 0, 0.8], atol=1e-5)


def test_the_accountants_epsilon_is_the_gaussian_mechanisms_rdp_converted():
    """T releases at z: RDP T alpha / (2 z^2) at each order alpha, converted to (epsilon,
    delta) as Balle et al. (2020) do; the minimum over the accountant's orders."""
    dp = _dp(z=1.5)
    sent, step = {"w": np.zeros(4, np.float32)}, {"w": np.ones(4, np.float32)}
    for _ in range(10):
        dp.step([1, 2], {1: step, 2: step}, sent)
    orders = dp.accountant.state_dict()["orders"]
    delta = 1e-5

    def converted(a: float) -> float:
        rdp = 10 * a / (2 * 1.5**2)
        return rdp + math.log((a - 1) / a) - (math.log(delta) + math.log(a)) / (a - 1)

    expected = min(converted(a) for a in orders)
    assert dp.spent().releases == 10
    assert dp.spent().epsilon == pytest.approx(expected, rel=1e-6)
    assert epsilon_after(1.5, 10, delta) == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("epsilon, rounds", [(8.0, 50), (1.0, 200), (4.0, 3)])
def test_a_target_epsilon_gets_the_smallest_noise_that_stays_under_it(epsilon, rounds):
    z = noise_for_epsilon(epsilon, rounds, 1e-5)
    assert epsilon_after(z, rounds, 1e-5) <= epsilon < epsilon_after(z / 1.002, rounds, 1e-5)


def test_a_stopped_run_resumes_its_count_and_its_adaptive_clip():
    np.random.seed(0)  # Flower's wrappers draw from numpy's global generator
    dp = _dp(quantile=0.5, c=1.0, m=40)
    sent, step = {"w": np.zeros(4, np.float32)}, {"w": np.full(4, 10.0, np.float32)}
    for _ in range(3):
        dp.step(list(range(40)), dict.fromkeys(range(40), step), sent)
    assert dp.clipping_norm > 1.2  # every step clipped: C grows toward their median
    again = _dp(quantile=0.5, c=1.0, m=40)
    again.load_state(dp.state())
    assert again.spent() == dp.spent() and again.clipping_norm == dp.clipping_norm


def _reply(node: int, arrays: dict[str, np.ndarray]) -> Message:
    record = ArrayRecord({k: Array(v) for k, v in arrays.items()})
    content = RecordDict({"arrays": record, "metrics": MetricRecord({"num-examples": 1e6})})
    return Message(content, reply_to=Message(RecordDict(), dst_node_id=node, message_type="train"))


def test_pfedgm_under_dp_keeps_nu_positive_and_records_the_epsilon_each_round():
    """Noise far larger than the precisions A: the floor (half the A sent) keeps nu
    positive, so the round is used; its record holds the epsilon spent so far. A claimed
    weight of 10^6 examples counts as one client: every sampled node weighs 1/m."""
    strategy = PFedGM(privacy=_dp(z=50.0, c=1.0, m=2))
    sent = {
        "phi": np.zeros(3, np.float32),
        "head.mu": np.zeros((2, 3), np.float32),
        "head.b": np.zeros(2, np.float32),
        "head.A": np.ones((2, 3), np.float32),
    }
    strategy.sent_arrays[1], strategy.sampled[1] = (
        ArrayRecord({k: Array(v) for k, v in sent.items()}),
        {1, 2},
    )
    replies = [_reply(n, {k: v + 0.1 for k, v in sent.items()}) for n in (1, 2)]
    arrays, metrics = strategy.aggregate_train(1, replies)
    assert arrays is not None and (arrays["head.A"].numpy() >= 0.5).all()
    assert metrics["dp-epsilon"] == pytest.approx(epsilon_after(50.0, 1, 1e-5))
    assert metrics["update-share-max"] == 0.5  # 10^6 examples claimed weigh as one client


def test_a_round_in_which_every_reply_failed_releases_the_noise_alone_and_counts_it():
    """Were the model left as sent when no client trained, that event (which depends on the
    clients' data) would show through no noise: the round releases std z C / m on the
    shared arrays and the accountant counts it; the round's record has no `num-clients`."""
    np.random.seed(0)
    strategy = PFedGM(privacy=ClientLevelDP(8.0, 0.1, 1e-5, 100, 2, shared=["phi", "head.mu"]))
    sent = {"phi": np.zeros(D, np.float32), "head.mu": np.zeros((2, 3), np.float32),
            "head.A": np.ones((2, 3), np.float32)}  # fmt: skip
    strategy.sent_arrays[1], strategy.sampled[1] = (
        ArrayRecord({k: Array(v) for k, v in sent.items()}),
        {1, 2},
    )
    failed = [_reply(n, {"phi": np.full(D, np.nan, np.float32)}) for n in (1, 2)]
    arrays, metrics = strategy.aggregate_train(1, failed)
    assert arrays is not None and "num-clients" not in metrics and metrics["replies-dropped"] == 2
    assert np.std(arrays["phi"].numpy()) == pytest.approx(8.0 * 0.1 / 2, rel=0.03)
    assert (arrays["head.A"].numpy() == 1).all()  # not shared: as sent
    assert metrics["dp-epsilon"] == pytest.approx(epsilon_after(8.0, 1, 1e-5))


def _parse(**keys) -> None:
    parse_run_config({k.replace("_", "-"): v for k, v in keys.items()})


@pytest.mark.parametrize(
    "keys, says",
    [
        ({"dp_noise": 1.0, "dp_epsilon": 8.0}, "not both"),
        ({"dp_noise": 1.0, "aggregation": "median"}, "aggregation='mean'"),
        ({"dp_noise": 1.0, "min_nodes": 3}, "min-nodes=0"),
        ({"dp_epsilon": 1e-6, "num_server_rounds": 200}, "raise dp-epsilon"),
        ({"dp_noise": 1.0, "covariance_average": "covariance"}, "covariance-average"),
        ({"dp_noise": 1.0, "dp_clip": 0.0}, "dp-clip"),
        ({"dp_noise": 1.0, "dp_delta": 1.0}, "dp-delta"),
        ({"dp_epsilon": 4.0, "method": "local"}, "sends nothing"),
    ],
)
def test_dp_settings_that_cannot_hold_are_refused_in_one_line(keys, says):
    with pytest.raises(ConfigError, match=says.replace("(", r"\(")):
        _parse(**keys)


def test_dp_is_off_by_default_and_a_target_epsilon_sets_the_noise():
    from pfedgm_app.methods import noise_multiplier

    cfg, _, _ = parse_run_config({})
    assert not cfg.private and noise_multiplier(cfg) == 0
    cfg, _, _ = parse_run_config({"dp-epsilon": 8.0, "num-server-rounds": 50})
    assert noise_multiplier(cfg) == pytest.approx(noise_for_epsilon(8.0, 50, 1e-5))


def test_the_adaptive_clip_settles_at_the_quantile_of_the_steps_norms():
    """Forty steps of norms 1..40 each round, gamma = 0.5 and 0.9: C settles where that share
    of them fits under it (Flower 1.42's own adaptive wrapper runs away from it instead)."""
    np.random.seed(0)
    sent = {"w": np.zeros(2, np.float32)}
    steps = {n: {"w": np.array([n + 1.0, 0], np.float32)} for n in range(40)}
    for gamma, settles in ((0.5, 20.0), (0.9, 36.0)):
        dp = _dp(z=0.5, c=1.0, m=40, quantile=gamma)
        for _ in range(60):  # from C = 1, about 30 rounds to get there
            dp.step(list(range(40)), steps, sent)
        assert dp.clipping_norm == pytest.approx(settles, rel=0.2)


@pytest.mark.e2e
@pytest.mark.slow
def test_a_dp_run_under_a_hostile_client_counts_its_epsilon_and_bounds_the_attacker(
    mnist, tmp_path
):
    """FedAvg on MNIST, 4 SuperNodes every round, one sending its step reversed and 100
    times as long with 1e9 examples claimed, through the real engine. Under DP its step is
    clipped to C, so its share of the step is about that of an honest step (their steps
    reach C too);
    each round's record holds the epsilon spent so far, the accountant's for that many
    releases."""
    from devtools.attacks import ATTACKS, run
    from pfedgm_app.records.run_folder import RunFolder

    attack, dp = ATTACKS["reversed-100"], {"dp-noise": 0.05, "dp-clip": 1.0}
    summary = run(attack, mnist, tmp_path / "dp", nodes=4, **dp)
    nodes = {
        int(r["partition-id"]): str(r["node-id"]) for r in RunFolder(tmp_path / "dp").read_clients()
    }
    rows = [r for r in RunFolder(tmp_path / "dp").read_rounds() if "dp-epsilon" in r]
    assert [r["round"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert r["dp-epsilon"] == pytest.approx(epsilon_after(0.05, r["round"], 1e-5))
        assert int(nodes[0]) in r["influence"]["clipped"]  # the attacker's step, every round
        # C of the step, about what each honest step of length C or more holds: without a
        # bound the attacker's share is over 0.9 (test_attacks)
        assert r["influence"]["shares"][nodes[0]] < 1 / 3
    privacy = summary["privacy"]
    assert privacy["epsilon"] == pytest.approx(rows[-1]["dp-epsilon"]) and privacy["releases"] == 3
    assert privacy["delta"] == 1e-5 and "train metrics" in privacy["outside"]

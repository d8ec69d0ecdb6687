"""Each attack that stays inside the server's bounds (`devtools.attacks`), run in process on
MNIST beside its honest twin: under the defence named here the run ends within `POINTS` of the
honest accuracy, and its records name what the attacker did. `python -m
benchmarks.bench_attacks` prints the same attacks under every aggregator.
"""

from __future__ import annotations

import pytest

from devtools.attacks import ATTACKS, run
from pfedgm_app.records.run_folder import RunFolder

pytestmark = pytest.mark.slow

POINTS = 10.0  # honest runs of this protocol differ by up to about 8 points between aggregators

# attack: (the run-config keys of the defence that holds it, the summary key(s) naming it)
DEFENCES = {
    "flip": ({}, "suspects"),  # the default: its pull scaled to one client's worth
    "forged-weight": ({}, ("dropped-replies", "suspects")),  # more than its partition holds
    "zero-model": ({"aggregation": "median"}, "suspects"),
    "forged-headline": ({}, "failures"),  # its personalize row refused
    "collusion": ({"aggregation": "multi-krum", "byzantine-nodes": 2}, "suspects"),
    "few-replies": ({}, "suspects"),  # clipped against the other reply
    "bias-budget": ({}, "suspects"),
    "tiny-precision": ({}, "dropped-replies"),
    "fedpac-counts": ({}, "dropped-replies"),
    "malformed-query": ({}, "failures"),  # left out before round 1; the others run
}


@pytest.fixture(scope="module")
def honest(mnist, tmp_path_factory):
    """The honest twin's summary of an (attack, defence), each configuration run once."""
    runs: dict[tuple, dict] = {}

    def twin(name: str, keys: dict) -> dict:
        attack = ATTACKS[name]
        config = (tuple(sorted({**attack.run, **keys}.items())), attack.nodes)
        if config not in runs:
            out = tmp_path_factory.mktemp("honest")
            runs[config] = run(attack, mnist, out, honest=True, **keys)
        return runs[config]

    return twin


@pytest.mark.parametrize("name", DEFENCES)
def test_an_attack_inside_the_bounds_costs_at_most_points_and_is_named(
    name, honest, mnist, tmp_path, caplog
):
    caplog.set_level("INFO", logger="flwr")
    keys, where = DEFENCES[name]
    attack, where = ATTACKS[name], (where,) if isinstance(where, str) else where
    baseline = honest(name, keys)
    caplog.clear()
    attacked = run(attack, mnist, tmp_path / name, **keys)
    assert attacked["mean-accuracy"] >= baseline["mean-accuracy"] - POINTS, (attacked, baseline)
    nodes = {int(r["node-id"]): int(r["partition-id"])
             for r in RunFolder(tmp_path / name).read_clients()}  # fmt: skip
    for key in {*where, "suspects"}:
        assert not baseline.get(key), baseline[key]  # the honest twin names no one
    for key in where:
        named = {int(s.split("node ")[1].split(":")[0]) for s in attacked.get(key, [])}
        assert named and not {nodes.get(n) for n in named} - {*attack.attackers, None}, named
    if "suspects" in where:  # each round it moved says so, and so does the run's last line
        rounds = {int(s.split(":")[0][6:]) for s in attacked["suspects"] if s.startswith("round")}
        lines = RunFolder(tmp_path / name).read_rounds()
        assert rounds == {r["round"] for r in lines if r.get("suspects")}
        last = [r for r in caplog.records if r.name == "flwr"][-1]
        assert last.levelname == "WARNING" and "the result is suspect" in last.getMessage()


def test_one_client_reporting_accuracy_0_moves_the_headline_by_its_share_only(
    honest, mnist, tmp_path
):
    """Nothing can tell a true 0 from a forged one: at its true test size it counts its share
    of the test examples, so it takes from the headline at most that share of 100 points."""
    attacked = run(ATTACKS["zero-accuracy"], mnist, tmp_path / "zero")
    baseline = honest("zero-accuracy", {})
    rows = {int(r["partition-id"]): r for r in RunFolder(tmp_path / "zero").read_clients()}
    share = rows[0]["num-test"] / sum(r["num-test"] for r in rows.values())
    drop = baseline["mean-accuracy"] - attacked["mean-accuracy"]
    assert 0 < drop <= 100 * share + 1e-6, (drop, share)


def test_the_records_say_each_nodes_share_of_every_step(mnist, tmp_path):
    """4 SuperNodes, one sending its step reversed and 100 times as long: each round's record
    holds every node's share of the step (summing to 1) and names the node clipped; the
    summary keeps the run's largest share. At c = 1 the attacker's share stays that of a
    client among four; with no bound at all it is nearly the whole step (and the model it
    makes is one no client can train from: every later reply is dropped)."""
    attack = ATTACKS["reversed-100"]
    shares = {}
    for c in (1.0, 0.0):
        out = tmp_path / f"c{c:g}"
        summary = run(attack, mnist, out, nodes=4, **{"clip-ratio": c, "pull-bound": 0.0})
        nodes = {int(r["partition-id"]): str(r["node-id"]) for r in RunFolder(out).read_clients()}
        lines = [r for r in RunFolder(out).read_rounds() if "influence" in r]
        assert len(lines) == 3 or not c
        assert all(sum(r["influence"]["shares"].values()) == pytest.approx(1) for r in lines)
        shares[c] = max(r["influence"]["shares"][nodes[0]] for r in lines)
        assert summary["largest-share"]["share"] >= shares[c]
        if c:
            assert all(int(nodes[0]) in r["influence"]["clipped"] for r in lines)
    assert shares[1.0] < 0.4 and shares[0.0] > 0.9, shares

"""The server's round loop against a stand-in Grid: Flower's `Strategy.start`, `rounds.Rounds`
from a resume, and the stop when no round aggregates."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Error, Message, MetricRecord, RecordDict

from pfedgm_app.strategies import PersonalizedFedAvg
from tests.grid_fakes import FakeGrid

pytestmark = pytest.mark.usefixtures("task_identity")  # Messages need a run identity


class TrainingGrid(FakeGrid):
    """Answers `train` like a FedPer client: sends back its body + 1, keeps its head."""

    def __init__(self, partitions):
        super().__init__(partitions)
        self.configs, self.bodies = [], []

    def send_and_receive(self, messages, timeout=None):
        replies = []
        for msg in messages:
            if msg.metadata.message_type != "train":
                replies += super().send_and_receive([msg], timeout)
                continue
            self.sent.append((msg.metadata.dst_node_id, "train"))
            self.configs.append(dict(msg.content["config"]))
            arrays = msg.content["arrays"]
            body = arrays["body"].numpy() + 1
            self.bodies.append(arrays["body"].numpy().copy())
            content = RecordDict({
                "arrays": ArrayRecord({"body": Array(body)}),
                "metrics": MetricRecord({"num-examples": 10}),
            })  # fmt: skip
            replies.append(Message(content, reply_to=msg))
        return replies


def test_flowers_round_loop_keeps_local_keys_and_sends_per_round_values_only():
    """Through Flower's own `Strategy.start` loop (not a copy of it): the arrays a round sends
    are the previous round's merged aggregate, a key no client returns keeps its value, and a
    train message's config holds the round only. Fails if Flower changes that contract."""
    grid = TrainingGrid({1: (0, 2), 2: (1, 2)})
    strategy = PersonalizedFedAvg(fraction_train=1.0, min_available_nodes=2)
    initial = ArrayRecord({"body": Array(np.zeros(2, np.float32)), "head": Array(np.ones(1))})
    result = strategy.start(grid=grid, initial_arrays=initial, num_rounds=3,
                            train_config=ConfigRecord())  # fmt: skip
    np.testing.assert_array_equal(result.arrays["body"].numpy(), [3, 3])
    np.testing.assert_array_equal(result.arrays["head"].numpy(), [1])  # never sent back
    assert [b.tolist() for b in grid.bodies] == [[0, 0]] * 2 + [[1, 1]] * 2 + [[2, 2]] * 2
    assert grid.configs == [{"server-round": r} for r in (1, 1, 2, 2, 3, 3)]
    assert strategy.sent_arrays == {}  # nothing carried past its round
    report = strategy.personalize(grid, result.arrays, ConfigRecord())
    assert len(report.clients) == 2


def test_a_clientapp_without_the_personalize_handler_ends_the_run_before_round_1():
    """A library project whose ClientApp lacks `@app.train("personalize")`: Flower answers the
    probe with its "No train function registered" error, and `start` stops in one line naming
    the decorator, before any client trains."""
    from flwr.app import Error

    class NoHandlerGrid(TrainingGrid):
        def send_and_receive(self, messages, timeout=None):
            replies = []
            for msg in messages:
                if msg.metadata.message_type == "train.personalize":
                    reason = ("<class 'flwr.clientapp.client_app.ClientAppException'>:<'\n"
                              "Exception ValueError occurred. Message: No train function "
                              "registered with name 'personalize'")  # fmt: skip
                    replies.append(Message(Error(code=2, reason=reason), reply_to=msg))
                else:
                    replies += super().send_and_receive([msg], timeout)
            return replies

    grid = NoHandlerGrid({1: (0, 2), 2: (1, 2)})
    strategy = PersonalizedFedAvg(fraction_train=1.0, min_available_nodes=2)
    initial = ArrayRecord({"body": Array(np.zeros(2, np.float32))})
    with pytest.raises(RuntimeError, match=r'add `@app.train\("personalize"\)`'):
        strategy.start(grid=grid, initial_arrays=initial, num_rounds=3)
    assert not grid.bodies  # no round trained


def test_only_train_nodes_are_trained_and_personalize_reaches_the_nodes_given():
    """The generalization protocol's server side: nodes outside `train_nodes` never get a
    train message, and the personalize round goes to the nodes named (the unseen ones)."""
    grid = TrainingGrid({n: (n - 1, 6) for n in range(1, 7)})
    strategy = PersonalizedFedAvg(fraction_train=1.0, min_available_nodes=6, train_nodes=[1, 2])
    initial = ArrayRecord({"body": Array(np.zeros(2, np.float32))})
    result = strategy.start(grid=grid, initial_arrays=initial, num_rounds=3,
                            train_config=ConfigRecord())  # fmt: skip
    assert {node for node, kind in grid.sent if kind == "train"} == {1, 2}
    report = strategy.personalize(grid, result.arrays, ConfigRecord(), nodes=[3, 4, 5, 6])
    assert sorted(int(r["partition-id"]) for r in report.clients) == [2, 3, 4, 5]


def test_the_round_loop_numbers_rounds_from_a_resume_and_reports_each_round():
    """`rounds.Rounds`: rounds done+1..last, the arrays carried from round to round, and
    `after_round` (outputs, checkpoint) called once per round with its aggregate."""
    from pfedgm_app.server.rounds import Rounds

    grid = TrainingGrid({1: (0, 2), 2: (1, 2)})
    strategy = PersonalizedFedAvg(fraction_train=1.0, min_available_nodes=2)
    initial = ArrayRecord({"body": Array(np.zeros(2, np.float32)), "head": Array(np.ones(1))})
    seen = []
    final = Rounds(grid, strategy, last=5, timeout=10).run(
        initial, done=2, after_round=lambda r, arrays, m: seen.append((r, m["num-clients"]))
    )
    assert seen == [(3, 2), (4, 2), (5, 2)]
    assert grid.configs == [{"server-round": r} for r in (3, 3, 4, 4, 5, 5)]
    np.testing.assert_array_equal(final["body"].numpy(), [3, 3])
    np.testing.assert_array_equal(final["head"].numpy(), [1])


class FailingGrid(TrainingGrid):
    """Every train message gets an error reply (a ClientApp that raises)."""

    def send_and_receive(self, messages, timeout=None):
        return [Message(Error(code=0, reason="ValueError:\n  no data"), reply_to=m)
                for m in messages]  # fmt: skip


def test_when_no_round_aggregates_the_run_stops_naming_the_rounds_not_personalizing():
    from pfedgm_app.server.rounds import Rounds

    grid = FailingGrid({1: (0, 2), 2: (1, 2)})
    strategy = PersonalizedFedAvg(fraction_train=1.0, min_available_nodes=2)
    seen = []
    rounds = Rounds(grid, strategy, last=2, timeout=10)
    with pytest.raises(
        RuntimeError, match=r"rounds 1-2\), so no model .* The first: node \d: ValueError: no data"
    ):
        rounds.run(ArrayRecord({"w": Array(np.zeros(1))}), 0, lambda r, a, m: seen.append(m))
    # each round still reached the outputs and checkpoint, with the replies it dropped
    assert [dict(m) for m in seen] == [{"replies-dropped": 2}] * 2
    # a resumed run has a checkpoint to continue from once the clients work: said so
    resumed = PersonalizedFedAvg(fraction_train=1.0, min_available_nodes=2)
    resumed.load_state(strategy.state())
    with pytest.raises(RuntimeError, match=r"rounds 1-2\), so .*resume=true continues"):
        Rounds(grid, resumed, last=2, timeout=10).run(
            ArrayRecord({"w": Array(np.zeros(1))}), 1, lambda r, a, m: None
        )


def test_a_resumed_run_whose_first_rounds_trained_goes_on_to_phase_2_and_keeps_its_record(
    tmp_path,
):
    """The stop rule counts the whole run: after a resume, rounds that all fail do not stop
    a run whose rounds before the stop trained (never stopped, it would personalize), and its
    summary's record of problems keeps those before the stop (the checkpoint holds them)."""
    from pfedgm_app.records import checkpoint
    from pfedgm_app.server.rounds import Rounds

    strategy = PersonalizedFedAvg(fraction_train=1.0, min_available_nodes=2)
    w = ArrayRecord({"body": Array(np.zeros(2, np.float32)), "head": Array(np.ones(1))})
    nodes = {1: (0, 2), 2: (1, 2)}
    w = Rounds(TrainingGrid(nodes), strategy, last=1, timeout=10).run(w, 0, lambda *a: None)
    w = Rounds(FailingGrid(nodes), strategy, last=2, timeout=10).run(w, 1, lambda *a: None)
    strategy.suspects.append("round 2: node 2: moved it too far")  # as `SuspectNaming` would
    checkpoint.save(tmp_path, 2, w, strategy.state())
    done, arrays, state = checkpoint.load(tmp_path)
    resumed = PersonalizedFedAvg(fraction_train=1.0, min_available_nodes=2)
    resumed.load_state(state)
    seen = []
    final = Rounds(FailingGrid(nodes), resumed, last=4, timeout=10).run(
        arrays, done, lambda r, a, m: seen.append(r)
    )
    assert seen == [3, 4] and final["body"].numpy().tolist() == [1, 1]
    assert set(resumed.rounds_without_update) == {2, 3, 4}
    assert "no data" in resumed.rounds_without_update[2]
    before = strategy.dropped  # round 2's replies, dropped before the stop
    assert (
        before and resumed.dropped[: len(before)] == before and len(resumed.dropped) > len(before)
    )
    assert resumed.suspects == ["round 2: node 2: moved it too far"]


def test_under_dp_no_round_aggregating_still_stops_the_run_and_each_round_released_noise(
    task_identity,
):
    """Under DP a round in which every reply failed releases the noise alone (`privacy`):
    the model moves, the epsilon counts, and the run still stops as no client trained."""
    pytest.importorskip("dp_accounting")
    from pfedgm_app.server.rounds import Rounds
    from pfedgm_app.strategies.privacy import ClientLevelDP

    dp = ClientLevelDP(1.0, 1.0, 1e-5, population=2, sample_size=2)
    strategy = PersonalizedFedAvg(fraction_train=1.0, min_available_nodes=2, privacy=dp)
    seen = []
    rounds = Rounds(FailingGrid({1: (0, 2), 2: (1, 2)}), strategy, last=2, timeout=10)
    with pytest.raises(RuntimeError, match=r"rounds 1-2\), so no model"):
        rounds.run(ArrayRecord({"w": Array(np.zeros(1))}), 0,
                   lambda r, a, m: seen.append((a["w"].numpy()[0], m["dp-epsilon"])))  # fmt: skip
    assert all(w != 0 for w, _ in seen) and seen[0][1] < seen[1][1]
    assert dp.spent().releases == 2

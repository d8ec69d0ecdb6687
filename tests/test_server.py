"""Server logic against a stand-in Grid: federation checks, sampling, the personalize round."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Error, Message, MetricRecord, RecordDict

from pfedgm_app.runconfig.common import RunConfig
from pfedgm_app.runconfig.settings import ConfigError
from pfedgm_app.server.federation import discover_clients
from pfedgm_app.strategies import PersonalizedFedAvg

pytestmark = pytest.mark.usefixtures("task_identity")  # Messages need a run identity


class FakeGrid:
    """Answers like SuperNodes would: `query` with the node's partition, `train.personalize`
    with an accuracy; nodes in `failing` reply with an error (a ClientApp that raised), nodes
    in `no_data` answer `query` with the reason their data cannot be loaded, nodes in
    `malformed` with a query reply whose sizes are not numbers."""

    def __init__(
        self, partitions: dict[int, tuple[int, int]], failing=(), no_data=(), malformed=()
    ):
        self.partitions, self.failing, self.no_data = partitions, set(failing), set(no_data)
        self.malformed = set(malformed)
        self.sent = []

    def get_node_ids(self):
        return list(self.partitions)

    def send_and_receive(self, messages, timeout=None):
        replies = []
        for msg in messages:
            node = msg.metadata.dst_node_id
            self.sent.append((node, msg.metadata.message_type))
            if node in self.failing:
                replies.append(Message(Error(code=1, reason="boom"), reply_to=msg))
                continue
            if node in self.no_data and msg.metadata.message_type == "query":
                why = ConfigRecord({"reason": "data-path '/x' does not exist on this device"})
                replies.append(Message(RecordDict({"unavailable": why}), reply_to=msg))
                continue
            pid, num = self.partitions[node]
            metrics = {"partition-id": pid, "num-partitions": num, "num-examples": 50,
                       "num-test": 10 + pid, "accuracy": 0.5 + 0.1 * pid}  # fmt: skip
            if msg.metadata.message_type == "query":  # what the model is built from
                metrics |= {"num-classes": 10, "image-shape": [3, 32, 32]}
                if node in self.malformed:
                    metrics["num-examples"] = -1
            replies.append(Message(RecordDict({"metrics": MetricRecord(metrics)}), reply_to=msg))
        return replies


def test_discovery_maps_every_node_to_its_partition():
    grid = FakeGrid({11: (1, 3), 7: (0, 3), 42: (2, 3)})
    infos = discover_clients(grid, RunConfig(node_wait_timeout=1))
    assert {n: int(i["partition-id"]) for n, i in infos.items()} == {11: 1, 7: 0, 42: 2}


def test_fewer_supernodes_than_partitions_is_a_clear_error():
    grid = FakeGrid({1: (0, 3), 2: (1, 3)})
    with pytest.raises(ConfigError, match="fewer SuperNodes than needed: 2 connected"):
        discover_clients(grid, RunConfig(node_wait_timeout=0.5))


def test_inconsistent_federations_are_rejected():
    with pytest.raises(ConfigError, match="disagree on num-partitions"):
        discover_clients(FakeGrid({1: (0, 2), 2: (1, 3)}), RunConfig(node_wait_timeout=0.5))
    with pytest.raises(ConfigError, match="two SuperNodes hold partition-id 0"):
        discover_clients(FakeGrid({1: (0, 2), 2: (0, 2)}), RunConfig(node_wait_timeout=0.5))


def test_a_node_that_cannot_take_part_is_named_with_its_cause_in_one_line():
    """Its data cannot be loaded (its ClientApp answers why), or its ClientApp failed (an error
    reply: Flower's code and reason, on one line)."""
    grid = FakeGrid({1: (0, 2), 2: (1, 2)}, no_data=[2])
    with pytest.raises(ConfigError) as err:  # quorum 1: every partition's node must
        discover_clients(grid, RunConfig(node_wait_timeout=0.5, quorum=1.0))
    assert str(err.value) == ("SuperNode 2 cannot take part: could not load its data: "
                              "data-path '/x' does not exist on this device")  # fmt: skip
    with pytest.raises(ConfigError) as err:
        discover_clients(FakeGrid({1: (0, 1)}, failing=[1]), RunConfig(node_wait_timeout=0.5))
    assert (
        str(err.value)
        == "SuperNode 1 cannot take part: its ClientApp failed (Flower error code 1): boom"
    )


def test_a_node_that_cannot_take_part_is_left_out_while_a_quorum_can():
    """Default quorum 0.5: of four partitions, one node whose data is missing and one whose
    query reply is malformed are left out and recorded; with three of four gone the run
    cannot start, and the line names the first node and the count."""
    grid = FakeGrid({1: (0, 4), 2: (1, 4), 3: (2, 4), 4: (3, 4)}, no_data=[2], malformed=[4])
    failed = {}
    infos = discover_clients(grid, RunConfig(node_wait_timeout=0.5), failed)
    assert sorted(infos) == [1, 3] and sorted(failed) == [2, 4]
    assert "could not load its data" in failed[2] and "must be" in failed[4]
    grid = FakeGrid({1: (0, 4), 2: (1, 4), 3: (2, 4), 4: (3, 4)}, no_data=[2, 3], malformed=[4])
    with pytest.raises(ConfigError, match=r"SuperNode 2 cannot take part: .* \(3 of 4 cannot"):
        discover_clients(grid, RunConfig(node_wait_timeout=0.5))


def test_sampling_by_partition_is_the_same_whatever_the_node_ids():
    """Two runs (random node ids) with the same seed train the same partitions each round."""

    def sampled_partitions(node_ids):
        partitions = {n: pid for pid, n in enumerate(node_ids)}
        grid = FakeGrid({n: (pid, 10) for n, pid in partitions.items()})
        strategy = PersonalizedFedAvg(fraction_train=0.3, node_partitions=partitions, seed=5)
        rounds = []
        for r in range(1, 4):
            msgs = strategy.configure_train(r, ArrayRecord(), ConfigRecord(), grid)
            rounds.append(sorted(partitions[m.metadata.dst_node_id] for m in msgs))
        return rounds

    first = sampled_partitions([101, 57, 3, 99, 12, 8, 77, 1000, 5, 6])
    second = sampled_partitions([9, 8, 7, 6, 5, 4, 3, 2, 1, 0])
    assert first == second
    assert all(len(r) == 3 for r in first) and len({tuple(r) for r in first}) > 1


def test_personalize_asks_every_node_and_reports_failures():
    grid = FakeGrid({1: (0, 3), 2: (1, 3), 3: (2, 3)}, failing=[3])
    result = PersonalizedFedAvg().personalize(grid, ArrayRecord(), ConfigRecord())
    assert sorted(n for n, _ in grid.sent) == [1, 2, 3]
    assert {t for _, t in grid.sent} == {"train.personalize"}
    assert len(result.clients) == 2 and result.failures == ["node 3: boom"]
    # accuracies 0.5 (10 test samples) and 0.6 (11): test-size weighted mean
    assert result.mean_accuracy == pytest.approx(100 * (0.5 * 10 + 0.6 * 11) / 21)


def test_a_personalize_round_nobody_answers_names_the_handler_to_add():
    grid = FakeGrid({1: (0, 2), 2: (1, 2)}, failing=[1, 2])
    with pytest.raises(RuntimeError, match=r'node 1: boom.*`@app.train\("personalize"\)`'):
        PersonalizedFedAvg().personalize(grid, ArrayRecord(), ConfigRecord())


def test_slow_query_replies_do_not_count_against_the_connection_wait():
    """Replies that take longer than node-wait-timeout in all (data decoding on a busy machine)
    are still waited for, as long as SuperNodes keep answering."""
    import time

    class SlowGrid(FakeGrid):
        def send_and_receive(self, messages, timeout=None):
            replies, waited = [], 0.0
            for msg in messages:  # one reply every 0.3 s, 1.2 s in all; none after `timeout`
                if waited + 0.3 > timeout:
                    time.sleep(timeout - waited)
                    break
                time.sleep(0.3)
                waited += 0.3
                replies += super().send_and_receive([msg], timeout)
            return replies

    grid = SlowGrid({n: (n, 4) for n in range(4)})
    infos = discover_clients(grid, RunConfig(node_wait_timeout=0.5))
    assert sorted(int(i["partition-id"]) for i in infos.values()) == [0, 1, 2, 3]


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


def test_min_nodes_starts_with_the_nodes_connected_and_takes_in_later_ones():
    """A deployment whose devices come and go: 2 of 3 partitions suffice to start; a node
    that joins later is queried before a round and then sampled."""
    from pfedgm_app.server.federation import query_new_nodes

    grid = FakeGrid({1: (0, 3), 2: (2, 3)})
    cfg = RunConfig(node_wait_timeout=0.5, min_nodes=2)
    infos = discover_clients(grid, cfg)
    assert sorted(int(i["partition-id"]) for i in infos.values()) == [0, 2]
    pids = {n: int(i["partition-id"]) for n, i in infos.items()}
    grid.partitions[9] = (1, 3)  # joins

    def take_in(g):
        pids.update({n: int(infos[n]["partition-id"]) for n in query_new_nodes(g, cfg, infos)})

    strategy = PersonalizedFedAvg(fraction_train=1.0, node_partitions=pids, min_available_nodes=2)
    take_in(grid)  # what the ServerApp's round loop does before each round (`Rounds.refresh`)
    messages = strategy.configure_train(1, ArrayRecord(), ConfigRecord(), grid)
    assert sorted(m.metadata.dst_node_id for m in messages) == [1, 2, 9]
    assert pids[9] == 1


def test_fewer_nodes_than_min_nodes_for_the_wait_timeout_ends_the_run():
    grid = FakeGrid({1: (0, 3)})
    strategy = PersonalizedFedAvg(min_available_nodes=2, node_wait_timeout=0.2)
    with pytest.raises(RuntimeError, match=r"only 1 SuperNode\(s\) connected .* fewer than the 2"):
        strategy.configure_train(1, ArrayRecord(), ConfigRecord(), grid)


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


def test_a_refusal_is_logged_once_and_other_errors_keep_their_traceback(caplog):
    """Flower logs a ServerApp's exception with its traceback; for the app's explained
    refusal (a ConfigError, already its one `pFedGM app:` line) the filter drops that record
    and keeps the traceback at DEBUG. Any other error passes as Flower logs it."""
    import logging
    import sys

    from pfedgm_app.runconfig.common import ConfigError
    from pfedgm_app.server_app import ExplainedRefusal

    def record(exc: Exception, level: int = logging.ERROR) -> logging.LogRecord:
        try:
            raise exc
        except Exception:  # the record Flower builds
            info = sys.exc_info()
        return logging.LogRecord("flwr", level, __file__, 1, "%s raised an exception",
                                 ("ServerApp",), info)  # fmt: skip

    keep = ExplainedRefusal()
    with caplog.at_level(logging.DEBUG, logger="flwr"):
        assert keep.filter(record(ConfigError("dataset /x: no such folder"))) is False
    assert [r.levelno for r in caplog.records] == [logging.DEBUG] and caplog.records[0].exc_info
    assert keep.filter(record(ValueError("a bug"))) is True
    assert keep.filter(record(ConfigError("x"), logging.DEBUG)) is True

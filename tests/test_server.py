"""Server logic against a stand-in Grid: federation checks, sampling, the personalize round,
nodes that come and go, and a refusal logged once."""

from __future__ import annotations

import pytest
from flwr.app import ArrayRecord, ConfigRecord

from pfedgm_app.runconfig.common import RunConfig
from pfedgm_app.runconfig.settings import ConfigError
from pfedgm_app.server.federation import discover_clients
from pfedgm_app.strategies import PersonalizedFedAvg
from tests.grid_fakes import FakeGrid

pytestmark = pytest.mark.usefixtures("task_identity")  # Messages need a run identity


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

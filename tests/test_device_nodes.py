"""A node that cannot take part: its query reply says why, discovery leaves it out and records
it, and a failed ClientApp's error is reported on one line."""

from __future__ import annotations

import pytest
from flwr.app import Error, Message, MetricRecord, RecordDict

from pfedgm_app.runconfig.common import RunConfig
from pfedgm_app.runconfig.settings import ConfigError
from pfedgm_app.server.federation import discover_clients, unavailable
from tests.grid_fakes import FakeGrid

# each test with its own disk cache and empty in-memory caches (a new process)
pytestmark = pytest.mark.usefixtures("fresh_caches")


@pytest.mark.usefixtures("task_identity")
@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda p: None, "does not exist on this device"),
        (lambda p: (p.mkdir(), (p / "x.parquet").write_bytes(b"PAR1 not parquet")),
         "x.parquet: not a readable parquet file"),
    ],
)  # fmt: skip
def test_a_node_whose_data_cannot_be_loaded_answers_the_query_with_why(
    tmp_path, caplog, make, reason
):
    """No exception leaves the ClientApp (Flower would wrap and log it with its traceback): the
    query's reply carries the reason, and the node logs it in one line."""
    from flwr.app import Context

    from pfedgm_app import client_app
    from pfedgm_app.methods import run_config_keys
    from pfedgm_app.protocol import wire

    path = tmp_path / "data"
    make(path)
    run_config = {**run_config_keys(), "dataset": "ylecun/mnist"}
    context = Context(1, 17, {"data-path": str(path)}, RecordDict(), run_config)
    request = Message(RecordDict(), dst_node_id=17, message_type="query")
    with caplog.at_level("ERROR", logger="flwr"):
        reply = client_app.query(request, context)
    assert not reply.has_error() and wire.METRICS not in reply.content
    why = reply.content[wire.UNAVAILABLE][wire.REASON]
    assert str(path) in why and reason in why and "\n" not in why
    assert [r.getMessage() for r in caplog.records] == [
        f"pFedGM app: node 17 cannot take part: {why}"
    ]
    assert unavailable(reply) == f"could not load its data: {why}"


class DeviceGrid(FakeGrid):
    """FakeGrid whose replies also carry the model input; `inputs` overrides a node's."""

    def __init__(self, partitions, failing=(), no_data=(), inputs=None):
        super().__init__(partitions, failing, no_data)
        self.inputs = inputs or {}

    def send_and_receive(self, messages, timeout=None):
        replies = super().send_and_receive(messages, timeout)
        for reply in replies:
            if reply.has_content() and "metrics" in reply.content:
                shape, k = self.inputs.get(reply.metadata.src_node_id, ([1, 28, 28], 10))
                metrics = {**reply.content["metrics"], "image-shape": shape, "num-classes": k}
                reply.content["metrics"] = MetricRecord(metrics)
        return replies


@pytest.mark.usefixtures("task_identity")
def test_with_min_nodes_a_node_that_cannot_take_part_is_left_out_and_recorded():
    grid = DeviceGrid({1: (0, 0), 2: (1, 0), 3: (2, 0), 4: (3, 0), 5: (4, 0)}, failing=[5],
                      no_data=[3], inputs={4: ([3, 32, 32], 10)})  # fmt: skip
    failed = {}
    infos = discover_clients(grid, RunConfig(min_nodes=2, node_wait_timeout=1), failed)
    assert sorted(infos) == [1, 2]
    assert failed[3] == "could not load its data: data-path '/x' does not exist on this device"
    assert "gives the model [3, 32, 32] images" in failed[4]
    assert failed[5] == "its ClientApp failed (Flower error code 1): boom"
    with pytest.raises(ConfigError, match="set min-nodes=N"):  # devices without num-partitions
        discover_clients(grid, RunConfig(node_wait_timeout=1))
    with pytest.raises(ConfigError, match="set min-nodes=N"):
        discover_clients(DeviceGrid({1: (0, 0)}), RunConfig(node_wait_timeout=1))


@pytest.mark.usefixtures("task_identity")
def test_a_failed_clientapps_error_is_reported_as_its_exception_on_one_line():
    """Flower's code, then the ClientApp's message out of Flower's wrapper (`error_cause`);
    a reason of another form on one line, shortened."""
    request = Message(RecordDict(), dst_node_id=1, message_type="query")

    def reply(reason):
        return Message(Error(code=2, reason=reason), reply_to=request)

    simulation = (
        "<class 'flwr.clientapp.client_app.ClientAppException'>:<'\nException "
        "ClientAppException occurred. Message: division by zero'>"
    )
    assert (
        unavailable(reply(simulation))
        == "its ClientApp failed (Flower error code 2): division by zero"
    )
    long = unavailable(reply("x" * 1000))
    assert long.endswith("x...") and len(long) < 700 and "\n" not in long

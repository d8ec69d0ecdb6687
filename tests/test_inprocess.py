"""The ServerApp and ClientApp in one process (`pfedgm_engine.inprocess`, the driver of the
GPU checks and of long measurement runs): it dispatches through the ClientApp object as Flower's
engine does (every registered handler is reached, a handler that raises is an error reply), and
every method gives the same per-client results and global model as through `flwr run`."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from flwr.app import ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.constant import ErrorCode

from pfedgm_app import client_app as pfedgm_client
from pfedgm_app.methods import METHODS, run_config_keys
from pfedgm_app.protocol import wire
from pfedgm_app.records.initial_model import load_state
from pfedgm_app.records.run_folder import RunFolder
from pfedgm_cli.flwr_cli import run_app
from pfedgm_engine.inprocess import InProcessGrid, run_inprocess

TINY = {"num-server-rounds": 2, "local-epochs": 1, "pool-size": 2000, "fraction-train": 0.5,
        "client-threads": 1}  # fmt: skip
# Every method at its smallest: MNIST, 4 clients, 2 rounds of 1 epoch, one epoch (step, fold,
# cycle) of whatever its personalize round or inner solve repeats.
SMALLEST = {**TINY, "pool-size": 1000, "finetune-epochs": 1, "fedrep-refit-epochs": 1,
            "fedrep-head-epochs": 1, "fedpac-head-epochs": 1, "personal-epochs": 1,
            "lbfgs-cycles": 1, "lbfgs-max-iter": 2, "pfedme-inner-steps": 1}  # fmt: skip


def _clients(output_dir) -> list[dict]:
    """clients.csv without the node ids (they differ from engine to engine)."""
    rows = RunFolder(Path(output_dir)).read_clients()
    return [{k: v for k, v in row.items() if k != "node-id"} for row in rows]


def _same_weights(a: Path, b: Path) -> bool:
    x, y = load_state(RunFolder(a).global_model), load_state(RunFolder(b).global_model)
    return x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


# One method per way of meeting the engine: each strategy class (PersonalizedFedAvg: local and
# ditto; FedPAC, PFedFDA, PFedGM), each kind of client state (parts kept: fedpac; a personal
# model: ditto; none: pfedfda, pfedgm), a method that sends nothing (local), and both grids
# (the windowed one on odd indices: ditto, fedpac, pfedgm). The others differ from one of these
# only in the client's arithmetic: --exhaustive runs them.
ENGINE_CASES = ("local", "ditto", "fedpac", "pfedfda", "pfedgm")


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.parametrize(
    "method",
    [m if m in ENGINE_CASES else pytest.param(m, marks=pytest.mark.exhaustive) for m in METHODS],
)
def test_every_method_gives_flwr_runs_results_in_process(flower_env, tmp_path, mnist, method):
    """A method through `flwr run` (the simulation engine, on the session's one SuperLink)
    and through the in-process driver: the same clients.csv, value for value (node ids aside),
    and the same global model, so figures measured in process are the app's. Every other
    method's in-process run keeps one message in flight (`messages-in-flight=1`: the
    ServerApp's `WindowedGrid` pushes and pulls through the driver instead of
    `send_and_receive`), which changes no result either. Two clients train a round: Flower
    hands the replies over in no fixed order, and FedAvg's sum of two terms is the same in
    either order (of three or more it is not, to the last bit).

    Kept short: the engine runs one ClientApp at a time (`client-resources-num-cpus=2`, one
    Ray actor to start: on 2 cores a quarter faster than two for runs this small), and the
    in-process run goes while the engine's run starts up."""
    cfg = {**SMALLEST, "method": method, "dataset": str(mnist)}
    window = {"messages-in-flight": 1} if list(METHODS).index(method) % 2 else {}
    with ThreadPoolExecutor(1) as engine:
        submitted = engine.submit(
            run_app, {**cfg, "output-dir": str(tmp_path / "flwr")}, 4, flower_env, 2, 900
        )
        summary, grid = run_inprocess({**cfg, **window, "output-dir": str(tmp_path / "in")}, 4)
        run = submitted.result()
    assert run.ok, run.log[-3000:]
    out = Path(summary["output-dir"])
    assert len(_clients(out)) == 4 and len(grid.rounds) == 2
    assert _clients(out) == _clients(run.output_dir)
    assert _same_weights(out, run.output_dir)


# A ClientApp with a handler no table names: the driver reaches it through the ClientApp object.
# At module level, so that spawned workers load it (by reference) too.
PING_APP = ClientApp()


@PING_APP.query("ping")
def ping(msg: Message, context: Context) -> Message:
    context.state["pings"] = ConfigRecord({"count": 1})
    metrics = {"pong": int(context.node_config[wire.PARTITION_ID])}
    return Message(RecordDict({wire.METRICS: MetricRecord(metrics)}), reply_to=msg)


@PING_APP.query("fail")
def fail(msg: Message, context: Context) -> Message:
    context.state["touched"] = ConfigRecord({"by": "fail"})  # undone: the handler raises
    raise RuntimeError(f"no data on partition {context.node_config[wire.PARTITION_ID]}")


@pytest.mark.parametrize("workers", [1, pytest.param(2, marks=pytest.mark.slow)])  # processes
def test_any_handler_on_the_client_app_is_reached_and_an_exception_is_an_error_reply(
    task_identity, workers
):
    """`query.ping`, registered on a fresh ClientApp given to the grid, answers every node
    (in this process and in spawned workers); a handler that raises, and a message type no
    handler is registered for, come back as error replies with Flower's code and reason, and
    the raising handler's node keeps the context it had."""
    grid = InProcessGrid(run_config_keys(), 3, workers=workers, client_app=PING_APP)
    try:
        nodes = list(grid.get_node_ids())
        pings = [Message(RecordDict(), dst_node_id=n, message_type="query.ping") for n in nodes]
        replies = {r.metadata.reply_to_message_id: r for r in grid.send_and_receive(pings)}
        pongs = [replies[m.metadata.message_id].content[wire.METRICS]["pong"] for m in pings]
        assert pongs == [0, 1, 2]
        assert all(grid.contexts[n].state["pings"]["count"] == 1 for n in nodes)
        bad = [
            Message(RecordDict(), dst_node_id=nodes[0], message_type="query.fail"),
            Message(RecordDict(), dst_node_id=nodes[1], message_type="query.nothing"),
        ]
        replies = {r.metadata.reply_to_message_id: r for r in grid.send_and_receive(bad)}
        raised, unknown = (replies[m.metadata.message_id] for m in bad)
    finally:
        grid.close()
    assert raised.has_error() and unknown.has_error()
    assert raised.error.code == ErrorCode.CLIENT_APP_RAISED_EXCEPTION
    assert raised.error.reason.startswith("<class 'flwr.clientapp.client_app.ClientAppException'>")
    assert "no data on partition 0" in raised.error.reason
    assert "No query function registered with name 'nothing'" in unknown.error.reason
    assert "touched" not in grid.contexts[nodes[0]].state
    assert "pings" in grid.contexts[nodes[0]].state  # what earlier messages left stays


@pytest.mark.slow  # a run
def test_a_client_app_that_raises_gives_the_server_app_error_replies(tmp_path, mnist):
    """The app's handlers, one train handler raising on partition 0 and the personalize
    handler on partition 1: the run goes on as under Flower (each round averages the other
    client, the summary reports the failed client with its exception) instead of the driver
    crashing."""
    app = ClientApp()
    app.query()(pfedgm_client.query)

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        if context.node_config[wire.PARTITION_ID] == 0:
            raise RuntimeError("out of memory on partition 0")
        return pfedgm_client.train(msg, context)

    @app.train(wire.PERSONALIZE)
    def personalize(msg: Message, context: Context) -> Message:
        if context.node_config[wire.PARTITION_ID] == 1:
            raise RuntimeError("no test data on partition 1")
        return pfedgm_client.personalize(msg, context)

    cfg = {**SMALLEST, "method": "fedavg", "dataset": str(mnist), "fraction-train": 1.0,
           "output-dir": str(tmp_path)}  # fmt: skip
    summary, grid = run_inprocess(cfg, 2, client_app=app)
    rows = RunFolder(tmp_path).read_rounds()
    assert [r["num-clients"] for r in rows] == [1, 1]
    assert summary["num-clients-evaluated"] == 1 and len(summary["failures"]) == 1
    assert "no test data on partition 1" in summary["failures"][0]
    assert [row["partition-id"] for row in _clients(tmp_path)] == [0]


@pytest.mark.slow  # runs, processes
@pytest.mark.parametrize("method", ["pfedgm", "ditto"])
def test_worker_processes_change_no_result(tmp_path, cifar10, method):
    """Messages answered by two spawned processes at once (`workers=2`, how clients share a GPU)
    give the same per-client results as one after the other: pFedGM (the GPU benchmark's
    method) and Ditto, whose personal model is node state that must travel with each message
    (this test fails if a worker's state is not brought back)."""
    cfg = {**TINY, "method": method, "dataset": str(cifar10), "num-server-rounds": 3}
    one, _ = run_inprocess({**cfg, "output-dir": str(tmp_path / "one")}, 4)
    two, grid = run_inprocess({**cfg, "output-dir": str(tmp_path / "two")}, 4, workers=2)
    assert _clients(one["output-dir"]) == _clients(two["output-dir"])
    assert grid.pool is None and len(grid.rounds) == 3


@pytest.mark.slow  # runs
def test_evaluating_during_training_changes_nothing_else(tmp_path, cifar10):
    """eval-every=1 adds round 1's personalized accuracy; the final per-client results equal
    those of a run without it (evaluation leaves no trace on the clients). Both runs end
    with the final evaluation on the last round's line and a plot."""
    cfg = {**TINY, "method": "ditto", "dataset": str(cifar10)}
    plain, _ = run_inprocess({**cfg, "output-dir": str(tmp_path / "plain")}, 4)
    evaluated, grid = run_inprocess({**cfg, "eval-every": 1, "output-dir": str(tmp_path / "ev")}, 4)
    assert _clients(plain["output-dir"]) == _clients(evaluated["output-dir"])
    rows = RunFolder(Path(evaluated["output-dir"])).read_rounds()
    assert 0 <= rows[0]["personalized-accuracy"] <= 100
    assert rows[1]["personalized-accuracy"] == evaluated["mean-accuracy"]
    for run in (plain, evaluated):
        assert RunFolder(Path(run["output-dir"])).plot.exists()
    assert grid.client_seconds["train.personalize"] > 0


# Every baseline learns (pfedgm and fedavg: test_e2e's learning run): MNIST, 2 clients, both
# trained in both rounds. In process: the engine's path of each method is the one above, whose
# results are these. pfedme: 2 inner steps, not 5: its inner solve is checked in
# test_baselines_math.
BASELINE_RUN = {"num-server-rounds": 2, "local-epochs": 3, "finetune-epochs": 2,
                "pool-size": 6000, "fraction-train": 1.0, "pfedme-inner-steps": 2}  # fmt: skip


@pytest.mark.slow  # runs
@pytest.mark.parametrize("method", [m for m in METHODS if m not in ("pfedgm", "fedavg")])
def test_every_baseline_learns_through_the_apps(tmp_path, mnist, method):
    """Each baseline through the ServerApp and ClientApps: outputs written, every client
    evaluated, above chance."""
    cfg = {**BASELINE_RUN, "method": method, "dataset": str(mnist), "client-threads": 1}
    summary, _ = run_inprocess({**cfg, "output-dir": str(tmp_path)}, 2)
    assert summary["num-clients-evaluated"] == 2 and summary["rounds"] == 2
    assert summary["mean-accuracy"] > 25  # chance is 10%

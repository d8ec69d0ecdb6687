"""A federation with hostile clients, through `flwr run`: the run completes, the numbers are the
honest clients', and the log names the hostile nodes.

The app here is the real one with another ClientApp: the app's own handlers, whose replies
partitions 0 and 1 then tamper with (as an outdated or malicious client would).
"""

from __future__ import annotations

import re

import pytest

from devtools.clientapp_variant import clientapp_variant
from pfedgm_app.records.run_folder import RunFolder
from pfedgm_cli.flwr_cli import run_app
from pfedgm_engine.inprocess import run_inprocess

pytestmark = pytest.mark.e2e

HOSTILE_CLIENT = """
import io

import numpy as np
from flwr.app import Array
from flwr.clientapp import ClientApp

from pfedgm_app import client_app as honest

app = ClientApp()


@app.query()
def query(msg, context):
    return honest.query(msg, context)


@app.train()
def train(msg, context):
    reply = honest.train(msg, context)
    pid = int(context.node_config["partition-id"])
    arrays, metrics = reply.content["arrays"], reply.content["metrics"]
    if pid == 0:  # claims far more data than it has
        metrics["num-examples"] = 1e12
    if pid == 1:  # keeps the head local: a subset of the keys (merged, not dropped)
        for key in [k for k in arrays if k.startswith("head.")]:
            del arrays[key]
    if pid == 2:  # float64 bytes under a float32 label, and keys of the server's records
        key = next(iter(arrays))
        real = arrays[key].numpy().astype(np.float64)
        buffer = io.BytesIO()
        np.save(buffer, real)
        arrays[key] = Array(dtype="float32", shape=real.shape, stype="numpy.ndarray",
                            data=buffer.getvalue())
        metrics["round"], metrics["personalized-accuracy"] = 999.0, 0.0
    if pid == 3:  # a scaled copy of the model: every value inside the bound, far from the rest
        for key in list(arrays):
            arrays[key] = Array(arrays[key].numpy() * 1000)
    return reply


@app.train("personalize")
def personalize(msg, context):
    reply = honest.personalize(msg, context)
    if int(context.node_config["partition-id"]) == 0:  # an accuracy outside [0, 1]
        reply.content["metrics"]["accuracy"] = 1.5
    return reply
"""

RUN = {"method": "fedavg", "num-server-rounds": 2, "fraction-train": 1.0, "local-epochs": 1,
       "pool-size": 1200, "client-threads": 1}  # fmt: skip


def test_hostile_clients_neither_end_the_run_nor_enter_its_numbers(flower_env, tmp_path, mnist):
    """5 SuperNodes, 4 of them hostile: the run completes, summary.json names each dropped
    node and why, the records are the server's, and the honest clients' accuracy stays within
    15 points of a run whose clients are all honest (a model taken over falls to chance)."""
    cfg = {**RUN, "dataset": str(mnist)}
    app_dir = clientapp_variant(tmp_path / "app", "hostile", HOSTILE_CLIENT)
    hostile = run_app({**cfg, "output-dir": str(tmp_path / "hostile")}, 5, flower_env,
                      app_dir=app_dir)  # fmt: skip
    assert hostile.ok, hostile.log[-3000:]
    rows = {int(r["partition-id"]): r for r in RunFolder(hostile.output_dir).read_clients()}
    assert sorted(rows) == [1, 2, 3, 4]  # partition 0's accuracy of 1.5 is not a client's row
    node0 = re.search(r"node (\d+): 'accuracy' must be a finite number", hostile.log)
    assert node0, "the personalize round names the hostile node"
    assert f"Dropping update of node {node0.group(1)}: 'num-examples'" in hostile.log
    summary = hostile.summary
    assert summary["num-clients-evaluated"] == 4
    assert any(node0.group(1) in f for f in summary["failures"])
    dropped = summary["dropped-replies"]
    assert sum("declares float32" in d and "holds float64" in d for d in dropped) == 2, dropped
    assert sum("'num-examples'" in d for d in dropped) == 2  # partition 0, both rounds
    lines = RunFolder(hostile.output_dir).read_rounds()
    assert [r["round"] for r in lines] == [1, 2]
    assert "personalized-accuracy" not in lines[0]  # no client writes the server's keys
    assert all(r["updates-clipped"] == 1 for r in lines)  # partition 3's scaled copy
    # the honest twin in process: the same numbers as through `flwr run` (tests/test_inprocess.py)
    honest, _ = run_inprocess({**cfg, "output-dir": str(tmp_path / "honest")}, 5)
    assert honest["suspects"] == []  # an honest run names no one
    assert any("node" in s for s in summary["suspects"])  # partition 3's copy, clipped
    assert abs(summary["mean-accuracy"] - honest["mean-accuracy"]) < 15, (
        summary["mean-accuracy"], honest["mean-accuracy"])  # fmt: skip

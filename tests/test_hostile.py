"""A federation with hostile clients, through `flwr run`: the run completes, the numbers are the
honest clients', and the log names the hostile nodes.

The app here is the real one with another ClientApp: the app's own handlers, whose replies
partitions 0 and 1 then tamper with (as an outdated or malicious client would).
"""

from __future__ import annotations

import csv
import re
import tomllib
from pathlib import Path

import pytest

from pfedgm_app.paper.flwr_cli import run_app

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.e2e

HOSTILE_CLIENT = """
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
    if pid == 0:  # claims far more data than it has
        reply.content["metrics"]["num-examples"] = 1e12
    if pid == 1:  # keeps the head local: a subset of the keys (merged, not dropped)
        arrays = reply.content["arrays"]
        for key in [k for k in arrays if k.startswith("head.")]:
            del arrays[key]
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


def hostile_app(folder: Path) -> Path:
    """The app's pyproject with the hostile ClientApp as its component."""
    text = (ROOT / "pyproject.toml").read_text()
    text = text.replace('name = "pfedgm-app"', 'name = "pfedgm-hostile"')
    text = text.replace('clientapp = "pfedgm_app.client_app:app"', 'clientapp = "hostile:app"')
    assert tomllib.loads(text)["tool"]["flwr"]["app"]["components"]["clientapp"] == "hostile:app"
    folder.mkdir()
    (folder / "pyproject.toml").write_text(text)
    (folder / "hostile.py").write_text(HOSTILE_CLIENT)
    return folder


def test_hostile_clients_neither_end_the_run_nor_enter_its_numbers(flower_env, tmp_path, mnist):
    cfg = {**RUN, "dataset": str(mnist)}
    hostile = run_app({**cfg, "output-dir": str(tmp_path / "hostile")}, 4, flower_env,
                      app_dir=hostile_app(tmp_path / "app"))  # fmt: skip
    assert hostile.ok, hostile.log[-3000:]
    with open(hostile.output_dir / "clients.csv") as f:
        rows = {int(float(r["partition-id"])): r for r in csv.DictReader(f)}
    assert sorted(rows) == [1, 2, 3]  # partition 0's accuracy of 1.5 is not a client's row
    node0 = re.search(r"node (\d+): 'accuracy' must be a finite number", hostile.log)
    assert node0, "the personalize round names the hostile node"
    assert f"Dropping update of node {node0.group(1)}: 'num-examples'" in hostile.log
    assert hostile.summary["num_clients_evaluated"] == 3
    assert 0 <= hostile.summary["mean_accuracy"] <= 100
    assert any(node0.group(1) in f for f in hostile.summary["failures"])

"""The ServerApp and ClientApps in one process (`devtools.inprocess`, the driver of the GPU checks
and of long measurement runs): the same per-client results as `flwr run`, and the baselines
whose messages the engine tests already cover, run through the apps here."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from devtools.inprocess import run_inprocess
from devtools.launch import run_app
from pfedgm_app.methods import METHODS
from tests.test_e2e import BASELINE_RUN, ENGINE_BASELINES

TINY = {"num-server-rounds": 2, "local-epochs": 1, "pool-size": 2000, "fraction-train": 0.5,
        "client-threads": 1}  # fmt: skip


def _clients(output_dir) -> list[dict]:
    """clients.csv without the node ids (they differ from engine to engine)."""
    with open(Path(output_dir) / "clients.csv") as f:
        return [{k: v for k, v in row.items() if k != "node-id"} for row in csv.DictReader(f)]


@pytest.mark.e2e
def test_inprocess_run_equals_flwr_run(flower_env, tmp_path, cifar10):
    """FedPAC (server extras, client state) through both drivers: identical per-client results,
    so figures measured in process are the app's. The engine's run keeps one message in flight
    at a time (`messages-in-flight=1`), which therefore changes no result either."""
    cfg = {**TINY, "method": "fedpac", "dataset": str(cifar10)}
    summary, _ = run_inprocess({**cfg, "output-dir": str(tmp_path / "inprocess")}, 4)
    windowed = {**cfg, "messages-in-flight": 1, "output-dir": str(tmp_path / "flwr")}
    run = run_app(windowed, 4, flower_env, timeout=900)
    assert run.ok, run.log[-3000:]
    assert _clients(summary["output_dir"]) == _clients(run.output_dir)


@pytest.mark.parametrize("method", ["pfedgm", "ditto"])
def test_worker_processes_change_no_result(tmp_path, cifar10, method):
    """Messages answered by two spawned processes at once (`workers=2`, how clients share a GPU)
    give the same per-client results as one after the other: pFedGM (the GPU benchmark's
    method) and Ditto, whose personal model is node state that must travel with each message
    (this test fails if a worker's state is not brought back)."""
    cfg = {**TINY, "method": method, "dataset": str(cifar10), "num-server-rounds": 3}
    one, _ = run_inprocess({**cfg, "output-dir": str(tmp_path / "one")}, 4)
    two, grid = run_inprocess({**cfg, "output-dir": str(tmp_path / "two")}, 4, workers=2)
    assert _clients(one["output_dir"]) == _clients(two["output_dir"])
    assert grid.pool is None and len(grid.rounds) == 3


def test_evaluating_during_training_changes_nothing_else(tmp_path, cifar10):
    """eval-every=1 adds round 1's personalized accuracy and a plot; the final per-client
    results equal those of a run without it (evaluation leaves no trace on the clients)."""
    cfg = {**TINY, "method": "ditto", "dataset": str(cifar10)}
    plain, _ = run_inprocess({**cfg, "output-dir": str(tmp_path / "plain")}, 4)
    evaluated, grid = run_inprocess({**cfg, "eval-every": 1, "output-dir": str(tmp_path / "ev")}, 4)
    assert _clients(plain["output_dir"]) == _clients(evaluated["output_dir"])
    rows = [json.loads(r) for r in open(Path(evaluated["output_dir"]) / "rounds.jsonl")]
    assert 0 <= rows[0]["personalized-accuracy"] <= 100 and "personalized-accuracy" not in rows[1]
    assert (Path(evaluated["output_dir"]) / "accuracy.png").exists()
    assert not (Path(plain["output_dir"]) / "accuracy.png").exists()
    assert grid.client_seconds["train.personalize"] > 0


@pytest.mark.parametrize(
    "method", [m for m in METHODS if m not in (*ENGINE_BASELINES, "pfedgm", "fedavg")]
)
def test_other_baselines_run_through_the_apps(tmp_path, mnist, method):
    """FedAvgFT, FedBABU, FedRep, LG-FedAvg, FedPer through the ServerApp and ClientApps (as in
    test_e2e's engine runs): outputs written, every client evaluated, above chance."""
    cfg = {**BASELINE_RUN, "method": method, "dataset": str(mnist), "client-threads": 1}
    summary, _ = run_inprocess({**cfg, "output-dir": str(tmp_path)}, 2)
    assert summary["num_clients_evaluated"] == 2 and summary["rounds"] == 2
    assert summary["mean_accuracy"] > 25  # chance is 10%

"""Checkpoints and `resume`: a ServerApp killed after a round continues from its checkpoint,
logs each round once, and ends with the arrays of a run that was never stopped."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from devtools.inprocess import RunStopped, run_inprocess
from pfedgm_app.config import ConfigError
from pfedgm_app.strategies import FedPAC

RUN = {"num-server-rounds": 4, "local-epochs": 1, "pool-size": 1500, "fraction-train": 0.5,
       "client-threads": 1}  # fmt: skip


def _rounds(out: Path) -> list[int]:
    return [json.loads(line)["round"] for line in (out / "rounds.jsonl").read_text().splitlines()]


@pytest.mark.slow  # whole runs, twice
@pytest.mark.parametrize("method", ["pfedgm", "fedavg", "fedper", "pfedme"])
def test_a_killed_run_resumes_to_the_uninterrupted_runs_arrays(tmp_path, mnist, method):
    """pFedGM and FedAvg keep nothing on the clients; FedPer (its heads) and pFedMe (theta)
    do, in `client-state-dir`, which the resumed run's new clients start from."""
    cfg = {**RUN, "method": method, "dataset": str(mnist)}
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    run_inprocess({**cfg, "output-dir": str(whole), "client-state-dir": str(whole / "c")}, 4)
    cfg["client-state-dir"] = str(stopped / "clients")
    with pytest.raises(RunStopped):
        run_inprocess({**cfg, "output-dir": str(stopped)}, 4, stop_after_rounds=2)
    assert _rounds(stopped) == [1, 2] and (stopped / "checkpoint.pt").exists()
    summary, grid = run_inprocess({**cfg, "output-dir": str(stopped), "resume": True}, 4)
    assert len(grid.rounds) == 2  # only rounds 3 and 4 ran again
    assert _rounds(stopped) == [1, 2, 3, 4] and summary["resumed_after_round"] == 2
    a = torch.load(whole / "global_model.pt")
    b = torch.load(stopped / "global_model.pt")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert (whole / "clients.csv").read_text() == (stopped / "clients.csv").read_text()


def test_client_state_files_hold_the_two_latest_saves_and_roll_back_a_rerun_round(tmp_path):
    from flwr.app import RecordDict

    from pfedgm_app.methods.base import ClientState

    path = tmp_path / "client-3.pt"
    for r in (2, 5, 7):
        ClientState(RecordDict(), path, r).save("w", {"x": torch.full((2,), r)})
    assert [r for r, _ in torch.load(path)] == [5, 7]
    # round 7 run again (resumed after round 6): the state before it, round 5's
    assert ClientState(RecordDict(), path, 7).load("w")["x"].tolist() == [5, 5]
    assert ClientState(RecordDict(), path, 9).load("w")["x"].tolist() == [7, 7]
    assert ClientState(RecordDict(), path, 0).load("w")["x"].tolist() == [7, 7]  # personalize
    assert "w" not in ClientState(RecordDict(), path, 5)  # nothing saved before round 5


@pytest.mark.slow  # a run
def test_resume_refuses_a_folder_without_a_checkpoint_or_with_a_finished_run(tmp_path, mnist):
    cfg = {**RUN, "num-server-rounds": 1, "method": "fedavg", "dataset": str(mnist)}
    with pytest.raises(ConfigError, match="holds no checkpoint.pt"):
        run_inprocess({**cfg, "output-dir": str(tmp_path / "empty"), "resume": True}, 2)
    run_inprocess({**cfg, "output-dir": str(tmp_path / "done")}, 2)
    with pytest.raises(ConfigError, match="finished"):
        run_inprocess({**cfg, "output-dir": str(tmp_path / "done"), "resume": True}, 2)


@pytest.mark.slow  # whole runs, twice
def test_a_round_logged_after_the_last_checkpoint_is_dropped_and_run_again(tmp_path, mnist):
    """A kill between the round's line and its checkpoint: the line goes, the round reruns."""
    cfg = {**RUN, "num-server-rounds": 3, "method": "fedavg", "dataset": str(mnist)}
    out = tmp_path / "run"
    with pytest.raises(RunStopped):
        run_inprocess({**cfg, "output-dir": str(out)}, 4, stop_after_rounds=2)
    with open(out / "rounds.jsonl", "a") as f:
        f.write(json.dumps({"round": 3, "loss": 0.0}) + "\n")
    run_inprocess({**cfg, "output-dir": str(out), "resume": True}, 4)
    assert _rounds(out) == [1, 2, 3]


def test_fedpac_state_follows_clients_by_rank_to_their_new_node_ids():
    """A resumed run's nodes have new ids: the combined heads go to the same partitions."""
    before = FedPAC(node_ranks={101: 0, 202: 1}, seed=3)
    before.rng.random()
    before.heads = {101: {"head.weight": np.ones(2)}, 202: {"head.weight": np.zeros(2)}}
    before.global_protos, before.protos_count = np.eye(2), np.array([3, 4])
    after = FedPAC(node_ranks={7: 1, 9: 0}, seed=3)
    after.load_state(before.state())
    assert after.heads[9]["head.weight"].tolist() == [1, 1]  # partition 0
    assert after.heads[7]["head.weight"].tolist() == [0, 0]  # partition 1
    assert np.array_equal(after.global_protos, np.eye(2))
    assert after.rng.random() == before.rng.random()

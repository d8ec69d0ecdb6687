"""Checkpoints and `resume`: a ServerApp killed after a round continues from its checkpoint,
logs each round once, and ends with the arrays of a run that was never stopped."""

from __future__ import annotations

import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from pfedgm_app.records.checkpoint import FolderLock
from pfedgm_app.records.initial_model import load_state
from pfedgm_app.records.run_folder import RunFolder
from pfedgm_app.runconfig.settings import ConfigError
from pfedgm_cli.flwr_calls import flwr_json
from pfedgm_cli.flwr_cli import run_app
from pfedgm_engine.inprocess import RunStopped, run_inprocess

RUN = {"num-server-rounds": 4, "local-epochs": 1, "pool-size": 1500, "fraction-train": 0.5,
       "client-threads": 1}  # fmt: skip


def _rounds(out: Path) -> list[int]:
    return [r["round"] for r in RunFolder(out).read_rounds()]


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
    assert _rounds(stopped) == [1, 2] and RunFolder(stopped).checkpoint.exists()
    summary, grid = run_inprocess({**cfg, "output-dir": str(stopped), "resume": True}, 4)
    assert len(grid.rounds) == 2  # only rounds 3 and 4 ran again
    assert _rounds(stopped) == [1, 2, 3, 4] and summary["resumed-after-round"] == 2
    a = load_state(RunFolder(whole).global_model)
    b = load_state(RunFolder(stopped).global_model)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert RunFolder(whole).clients.read_text() == RunFolder(stopped).clients.read_text()


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def _unfinished_runs(env: dict[str, str]) -> set[str]:
    """Ids of the runs of this FLWR_HOME's SuperLink not finished yet (`flwr list`)."""
    listed = subprocess.run(["flwr", "list", "--format", "json"], env=env, capture_output=True,
                            text=True, check=True).stdout  # fmt: skip
    runs = flwr_json(listed)["runs"]
    return {r["run-id"] for r in runs if not r["status"].startswith("finished")}


def _wait_for_rounds(out: Path, rounds: int) -> None:
    """Until `out`'s rounds.jsonl holds `rounds` lines (or 10 minutes)."""
    deadline = time.monotonic() + 600
    while _lines(RunFolder(out).rounds) < rounds and time.monotonic() < deadline:
        time.sleep(0.1)


def _stop_after(out: Path, rounds: int, env: dict[str, str], others: set[str]) -> set[str]:
    """`flwr stop` the run writing to `out` once its rounds.jsonl holds `rounds` lines. Its id
    is looked up once round 1 is logged (the unfinished run not in `others`), so that only the
    stop itself lies between round `rounds` and the run's end. Returns the ids it stopped."""
    _wait_for_rounds(out, 1)
    running = _unfinished_runs(env) - others
    _wait_for_rounds(out, rounds)
    for run_id in running:
        subprocess.run(["flwr", "stop", run_id], env=env, capture_output=True, check=True)
    return running


def _wait_for_the_run_to_end(out: Path, timeout: float = 120) -> None:
    """`flwr stop` marks a run stopped at once, but its simulation goes on until its next
    heartbeat; until then it holds the lock on its output-dir, which a resumed run needs."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            FolderLock(out).release()
            return
        except ConfigError:  # in use by a live run
            assert time.monotonic() < deadline, f"the run writing to {out} did not end"
            time.sleep(0.5)


def _clients(out: Path) -> list[dict]:
    """clients.csv without the node ids (each run's SuperNodes get new ones)."""
    return [
        {k: v for k, v in row.items() if k != "node-id"} for row in RunFolder(out).read_clients()
    ]


@pytest.mark.slow
@pytest.mark.e2e
def test_a_flwr_run_stopped_after_round_2_resumes_to_the_uninterrupted_runs_results(
    flower_env, tmp_path, mnist
):
    """Through `flwr run` (the simulation engine): a pFedGM run stopped with `flwr stop` once
    round 2 is logged, then run again with resume=true on its output-dir, logs every round
    once and ends with the global model and per-client results of a run never stopped.

    A stop reaches a simulation only at its next heartbeat to the SuperLink (every 17 to 23 s
    in Flower 1.42; the ServerApp's messages stay in the simulation process), though `flwr`
    reports the run stopped at once. So the run has 30 rounds (about 1.4 s each here, alone on
    the SuperLink): well after round 2 it is still in its rounds when the stop lands, and the
    resumed run waits for it to let go of its output-dir. The uninterrupted run goes in
    process (the same results as through `flwr run`: test_inprocess), beside the one stopped,
    which it only slows: more rounds still to run when the stop lands. Two
    clients train a round: Flower hands the replies over in no fixed order, and FedAvg's sum of
    two terms is the same in either order (of three or more it is not, to the last bit)."""
    cfg = {**RUN, "num-server-rounds": 30, "local-epochs": 6, "pool-size": 5000,
           "method": "pfedgm", "dataset": str(mnist), "personal-epochs": 1,
           "lbfgs-cycles": 1}  # fmt: skip
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    with ThreadPoolExecutor(2) as threads:
        stopper = threads.submit(_stop_after, stopped, 2, flower_env, _unfinished_runs(flower_env))
        flwr_run = threads.submit(
            run_app, {**cfg, "output-dir": str(stopped)}, 4, flower_env, timeout=900
        )
        run_inprocess({**cfg, "output-dir": str(whole)}, 4)
        first = flwr_run.result()
        assert stopper.result(timeout=60) == {first.run_id}
    assert first.status == "finished:stopped", f"{first.details}\n{first.log[-3000:]}"
    _wait_for_the_run_to_end(stopped)
    assert 2 <= len(_rounds(stopped)) < 30 and not RunFolder(stopped).finished
    resumed = run_app(
        {**cfg, "output-dir": str(stopped), "resume": True}, 4, flower_env, timeout=900
    )
    assert resumed.ok, f"{resumed.details}\n{resumed.log[-3000:]}"
    assert _rounds(stopped) == list(range(1, 31))
    assert 2 <= resumed.summary["resumed-after-round"] < 30
    a, b = load_state(RunFolder(whole).global_model), load_state(RunFolder(stopped).global_model)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert _clients(whole) == _clients(stopped)


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
    RunFolder(out).append_round({"round": 3, "loss": 0.0})
    run_inprocess({**cfg, "output-dir": str(out), "resume": True}, 4)
    assert _rounds(out) == [1, 2, 3]

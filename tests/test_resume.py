"""Checkpoints and `resume`: a ServerApp killed after a round continues from its checkpoint,
logs each round once, and ends with the arrays of a run that was never stopped."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch
from flwr.app import Array, ArrayRecord

from pfedgm_app.methods import METHODS
from pfedgm_app.records import checkpoint
from pfedgm_app.records.checkpoint import FolderLock
from pfedgm_app.records.initial_model import load_state
from pfedgm_app.records.results import RunWriter
from pfedgm_app.records.run_folder import RunFolder
from pfedgm_app.runconfig.common import RunConfig
from pfedgm_app.runconfig.method_settings import PFedGMSettings
from pfedgm_app.runconfig.settings import ConfigError
from pfedgm_app.strategies import FedPAC
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


def test_fedpac_state_follows_clients_by_rank_to_their_new_node_ids():
    """A resumed run's nodes have new ids: the combined heads go to the same partitions."""
    before = FedPAC(node_partitions={101: 0, 202: 1}, seed=3)
    before.rng.random()
    before.heads = {101: {"head.weight": np.ones(2)}, 202: {"head.weight": np.zeros(2)}}
    before.global_protos, before.protos_count = np.eye(2), np.array([3, 4])
    after = FedPAC(node_partitions={7: 1, 9: 0}, seed=3)
    after.load_state(before.state())
    assert after.heads[9]["head.weight"].tolist() == [1, 1]  # partition 0
    assert after.heads[7]["head.weight"].tolist() == [0, 0]  # partition 1
    assert np.array_equal(after.global_protos, np.eye(2))
    assert after.rng.random() == before.rng.random()


def _same(a, b) -> bool:
    """Equal to the last bit, of the same types and dtypes, through dicts, lists and tuples."""
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def test_every_strategys_state_round_trips_through_a_checkpoint_exactly(tmp_path):
    """Each method's strategy state (the sampling RNG; FedPAC's prototypes, counts and heads,
    of their own dtypes) comes back from `checkpoint.pt` as it went in, and a strategy loaded
    from it samples on as the saved one does."""
    ranks = {11: 0, 22: 1}
    for cls in {m.strategy_class() for m in METHODS.values()}:
        saved = cls(node_partitions=ranks, seed=3)
        saved.rng.random()
        if isinstance(saved, FedPAC):
            saved.global_protos = np.arange(6, dtype=np.float32).reshape(2, 3)
            saved.protos_count = np.array([3, 0], dtype=np.int64)
            saved.heads = {11: {"head.weight": np.full((2, 3), 0.1, np.float32),
                                "head.bias": np.array([1.5, -2.0], np.float64)}}  # fmt: skip
        arrays = ArrayRecord({"w": Array(np.linspace(0, 1, 5, dtype=np.float32))})
        checkpoint.save(tmp_path, 7, arrays, saved.state())
        done, loaded_arrays, state = checkpoint.load(tmp_path)
        assert done == 7 and _same(state, saved.state()), cls.__name__
        assert np.array_equal(loaded_arrays["w"].numpy(), arrays["w"].numpy())
        resumed = cls(node_partitions=ranks, seed=99)
        resumed.load_state(state)
        assert _same(resumed.state(), saved.state()), cls.__name__
        assert [resumed.rng.random() for _ in range(3)] == [saved.rng.random() for _ in range(3)]


class _Planted:
    """What a checkpoint from elsewhere might hold: unpickling it creates `marker`."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def _stopped(folder: Path, clients: int = 4, settings=None, **keys) -> RunConfig:
    """A pFedGM run of 2 rounds of 5, stopped: its config.json and checkpoint, as a run leaves
    them; the run-config that resumes it."""
    cfg = RunConfig(output_dir=str(folder), num_server_rounds=5, **keys)
    settings = settings or PFedGMSettings()
    writer = RunWriter.create(cfg, settings)
    writer.write_config(cfg, settings, clients)
    checkpoint.save(folder, 2, ArrayRecord({"w": Array(np.zeros(1))}), {})
    writer.close()
    return dataclasses.replace(cfg, resume=True)


@pytest.mark.parametrize("where", ["payload", "strategy state"])
def test_a_checkpoint_holding_an_object_is_refused_and_nothing_in_it_runs(tmp_path, where):
    resumed = _stopped(tmp_path / "run")
    marker = tmp_path / "ran"
    planted = _Planted(marker)
    payload = {"round": 2, "arrays": {"w": torch.zeros(1)}, "strategy": {"rng": planted}}
    path = RunFolder(tmp_path / "run").checkpoint
    torch.save(planted if where == "payload" else payload, path)
    path = str(path)
    with pytest.raises(ConfigError) as err:
        checkpoint.load(tmp_path / "run")
    assert path in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ConfigError, match=re.escape(path)):
        RunWriter.create(resumed, PFedGMSettings())  # resume=true reads it first
    assert not marker.exists()


def test_a_checkpoint_of_another_shape_is_refused_naming_the_file(tmp_path):
    RunFolder(tmp_path).checkpoint.write_text("not a checkpoint")
    with pytest.raises(ConfigError, match=re.escape(str(RunFolder(tmp_path).checkpoint))):
        checkpoint.load(tmp_path)
    for payload in ({"round": "2", "arrays": {}, "strategy": {}}, [1, 2],
                    {"round": -1, "arrays": {}, "strategy": {}},
                    {"round": 2, "arrays": {"w": [0.0]}, "strategy": {}}):  # fmt: skip
        torch.save(payload, RunFolder(tmp_path).checkpoint)
        with pytest.raises(ConfigError, match="is not a checkpoint of this app"):
            checkpoint.load(tmp_path)


@pytest.mark.parametrize(
    ("arrays", "state", "named"),
    [({"v": np.ones(2), "w": np.array([0.0, np.nan])}, {}, "array 'w' holds NaN or Inf"),
     ({"w": np.array([np.inf], np.float32)}, {}, "array 'w' holds NaN or Inf"),
     ({"w": np.array([-2e6])}, {}, "array 'w' holds values beyond 1e+06 in magnitude"),
     ({"w": np.zeros(1)}, {"heads": {3: {"b": np.array([np.nan])}}},
      "array 'strategy/heads/3/b' holds NaN or Inf")],
    ids=["nan", "inf", "beyond the contract", "nan in the strategy state"],
)  # fmt: skip
def test_a_checkpoint_of_values_no_round_could_send_is_refused_before_any_round(
    tmp_path, arrays, state, named
):
    """A diverged run's checkpoint (or an altered one) is refused when resume=true reads it,
    naming the file and the first array: resumed, every client would fail on it."""
    resumed = _stopped(tmp_path / "run")
    arrays = ArrayRecord({k: Array(v) for k, v in arrays.items()})
    checkpoint.save(tmp_path / "run", 2, arrays, state)
    path = RunFolder(tmp_path / "run").checkpoint
    with pytest.raises(ConfigError) as err:
        RunWriter.create(resumed, PFedGMSettings())
    assert f"{path} is not resumed: {named}" in str(err.value) and "\n" not in str(err.value)


def test_a_strategy_state_beyond_arrays_and_plain_values_is_refused_when_saved(tmp_path):
    """A state `weights_only` could not read back fails the round that saves it, not the
    resume: a numpy scalar (a float subclass) or an object."""
    arrays = ArrayRecord({"w": Array(np.zeros(1))})
    for state in ({"x": np.float32(1.0)}, {"x": object()}, {np.int64(3): 1}):
        with pytest.raises(TypeError, match="a checkpoint"):
            checkpoint.save(tmp_path, 1, arrays, state)


def test_resume_refuses_another_number_of_clients_and_keeps_the_stopped_runs_record(tmp_path):
    resumed = _stopped(tmp_path, clients=4)
    recorded = RunFolder(tmp_path).config.read_text()
    writer = RunWriter.create(resumed, PFedGMSettings())
    with pytest.raises(ConfigError) as err:
        writer.write_config(resumed, PFedGMSettings(), 3)
    assert "with 3 clients (SuperNodes)" in str(err.value) and "had 4" in str(err.value)
    assert RunFolder(tmp_path).config.read_text() == recorded
    writer.write_config(resumed, PFedGMSettings(), 4)  # the same clients: resumes
    writer.close()


def test_resume_takes_any_number_of_devices_that_come_and_go(tmp_path):
    resumed = _stopped(tmp_path, clients=4, min_nodes=2)
    writer = RunWriter.create(resumed, PFedGMSettings())
    writer.write_config(resumed, PFedGMSettings(), 3)
    writer.close()
    assert RunFolder(tmp_path).read_config()["num-clients"] == 3


@pytest.mark.parametrize(
    ("common", "method", "named"),
    [
        ({"test-fraction": 0.3}, {}, "test-fraction: 0.2 -> 0.3"),
        ({"learning-rate": 0.1}, {}, "learning-rate: 0.01 -> 0.1"),
        ({"client-state-dir": "/elsewhere"}, {}, "client-state-dir: '' -> '/elsewhere'"),
        ({}, {"lambda_": 0.5}, "lambda: 1.0 -> 0.5"),
        ({}, {"adaptation": "none"}, "adaptation: 'finetune-lbfgs' -> 'none'"),
    ],
)
def test_resume_refuses_any_other_key_naming_it_and_both_values(tmp_path, common, method, named):
    resumed = _stopped(tmp_path)
    fields = {f.name: v for k, v in common.items() for f in dataclasses.fields(RunConfig)
              if RunConfig.key(f.name) == k}  # fmt: skip
    with pytest.raises(ConfigError) as err:
        RunWriter.create(dataclasses.replace(resumed, **fields), PFedGMSettings(**method))
    assert named in str(err.value) and "\n" not in str(err.value)


def test_a_run_stopped_before_a_key_existed_resumes_with_the_value_that_does_what_it_did(
    tmp_path,
):
    """A config.json without `pull-bound` (written before the key): pull-bound 0 resumes it,
    the default is refused naming both values."""
    resumed = _stopped(tmp_path)
    config = RunFolder(tmp_path).read_config()
    del config["pull-bound"]
    RunFolder(tmp_path).config.write_text(json.dumps(config))
    with pytest.raises(ConfigError, match=r"pull-bound: 0\.0 -> 1\.0"):
        RunWriter.create(resumed, PFedGMSettings())
    RunWriter.create(dataclasses.replace(resumed, pull_bound=0.0), PFedGMSettings()).close()


def test_resume_refuses_a_checkpoint_of_another_model_or_strategy_naming_it(tmp_path):
    from pfedgm_app.server.experiment import resume

    method, cfg = METHODS["fedpac"], RunConfig(output_dir=str(tmp_path), resume=True)
    initial = ArrayRecord({"w": Array(np.zeros((2, 3), np.float32))})
    strategy, writer = FedPAC(seed=3), RunWriter(tmp_path)
    path = str(RunFolder(tmp_path).checkpoint)
    for arrays in (
        {"w": np.zeros((3, 2), np.float32)},
        {"w": np.zeros((2, 3))},
        {"v": np.zeros(1)},
    ):
        checkpoint.save(tmp_path, 2, ArrayRecord({k: Array(v) for k, v in arrays.items()}), {})
        with pytest.raises(ConfigError, match=f"the arrays of {re.escape(path)} are another"):
            resume(cfg, writer, strategy, method, initial)
    checkpoint.save(tmp_path, 2, initial, {"rng": FedPAC(seed=3).rng.getstate()})  # no heads
    with pytest.raises(ConfigError, match=f"{re.escape(path)} holds no state of this method"):
        resume(cfg, writer, strategy, method, initial)

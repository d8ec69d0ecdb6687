"""What a checkpoint holds and what `resume` accepts: each strategy's state round-trips exactly,
and a checkpoint or run-config of another run, shape or values is refused naming it."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from flwr.app import Array, ArrayRecord

from pfedgm_app.methods import METHODS
from pfedgm_app.records import checkpoint
from pfedgm_app.records.results import RunWriter
from pfedgm_app.records.run_folder import RunFolder
from pfedgm_app.runconfig.common import RunConfig
from pfedgm_app.runconfig.method_settings import PFedGMSettings
from pfedgm_app.runconfig.settings import ConfigError
from pfedgm_app.strategies import FedPAC


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

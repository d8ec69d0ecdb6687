"""Experiment tracking (records/tracking.py): a short run's TensorBoard event files and W&B
offline run read back, with every round's figures equal to rounds.jsonl's and each client's
final accuracy equal to clients.csv's."""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path

import pytest

from pfedgm_app.methods import parse_run_config
from pfedgm_app.records.run_folder import RunFolder
from pfedgm_app.records.tracking import figures
from pfedgm_app.runconfig.settings import ConfigError
from pfedgm_engine.inprocess import run_inprocess

RUN = {"method": "fedavg", "num-server-rounds": 3, "fraction-train": 1.0, "local-epochs": 1,
       "pool-size": 1500, "client-threads": 1, "eval-every": 2}  # fmt: skip


def _run(mnist: Path, out: Path, **keys) -> RunFolder:
    run_inprocess({**RUN, "dataset": str(mnist), "output-dir": str(out), **keys}, 3)
    return RunFolder(out)


@pytest.mark.e2e
def test_tensorboard_holds_each_rounds_figures_and_each_clients_accuracy(mnist, tmp_path):
    event_accumulator = pytest.importorskip(
        "tensorboard.backend.event_processing.event_accumulator"
    )
    folder = _run(mnist, tmp_path / "run", tracker="tensorboard")
    events = event_accumulator.EventAccumulator(str(tmp_path / "run" / "tensorboard"))
    events.Reload()
    rows = folder.read_rounds()
    assert len(rows) == 3 and "personalized-accuracy" in rows[1]  # eval-every 2
    for row in rows[:-1]:  # the last line also holds the final evaluation, logged at the end
        for key, value in figures(row).items():
            (scalar,) = [e for e in events.Scalars(key) if e.step == row["round"]]
            assert scalar.value == pytest.approx(value, rel=1e-6), (row["round"], key)
    for client in folder.read_clients():
        (final,) = events.Scalars(f"client-accuracy/{client['partition-id']}")
        assert final.step == 3 and final.value == pytest.approx(client["accuracy"])  # in %
    assert "fedavg" in events.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()


def wandb_records(path: Path) -> list:
    """The records of a W&B offline run file (`run-*.wandb`): a 7-byte header, then LevelDB
    log blocks of 32 KiB, each record a 7-byte header (crc, length, type: 1 full, 2 first,
    3 middle, 4 last) and its bytes, a protobuf `Record`. A record still being written (its
    bytes past the file's end) is left out."""
    from wandb.proto import wandb_internal_pb2

    data, pos, block, records, part = path.read_bytes(), 7, 32768, [], b""
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header: padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if pos + 7 + length > len(data):
            break
        part, pos = part + data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(part)
            records.append(record)
            part = b""
    return records


def finished_wandb_records(path: Path, seconds: float = 120) -> list:
    """The run file's records once its last one, `exit`, is on disk: W&B's service process
    writes the file and may still be flushing it when `run.finish()` has returned."""
    deadline = time.monotonic() + seconds
    while True:
        records = wandb_records(path)
        kinds = [r.WhichOneof("record_type") for r in records]
        if "exit" in kinds or time.monotonic() > deadline:
            assert "exit" in kinds, f"{path.name} has no exit record after {seconds} s: {kinds}"
            return records
        time.sleep(0.5)


@pytest.mark.e2e
def test_wandb_runs_offline_and_holds_each_rounds_figures(mnist, tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    for key in ("WANDB_MODE", "WANDB_API_KEY"):
        monkeypatch.delenv(key, raising=False)  # offline: nothing configured, no network
    keys = {"tracker": "wandb", "tracker-name": "cifar-cell", "tracker-group": "a-table"}
    folder = _run(mnist, tmp_path / "run", **keys)
    (path,) = (tmp_path / "run" / "wandb").glob("offline-run-*/run-*.wandb")
    records = finished_wandb_records(path)
    (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert run.display_name == "cifar-cell" and run.run_group == "a-table"
    config = {u.key: json.loads(u.value_json) for u in run.config.update}
    assert config["method"] == "fedavg" and config["num-server-rounds"] == 3
    history = [
        {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item}
        for r in records
        if r.WhichOneof("record_type") == "history"
    ]
    rows = folder.read_rounds()
    for row in rows[:-1]:
        (logged,) = [h for h in history if h["_step"] == row["round"]]
        for key, value in figures(row).items():
            assert logged[key] == pytest.approx(value, rel=1e-9), (row["round"], key)
    (table,) = [h["clients/path"] for h in history if "clients/path" in h]  # at the end
    table = json.loads((path.parent / "files" / table).read_text())
    by_client = {int(c["partition-id"]): c["accuracy"] for c in folder.read_clients()}
    assert {int(p): a for p, a, _ in table["data"]} == pytest.approx(by_client)


def test_a_tracker_without_its_package_is_refused_before_round_1(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "wandb" else real(n, *a)
    )
    with pytest.raises(ConfigError, match=r"tracker='wandb' needs the wandb package: pip install"):
        parse_run_config({"tracker": "wandb"})
    with pytest.raises(ConfigError, match="tracker must be one of"):
        parse_run_config({"tracker": "mlflow"})

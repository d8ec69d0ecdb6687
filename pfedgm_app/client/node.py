"""A SuperNode as the app sees it: which client it is, its data, where it keeps its
personalized model, and the task a message gives its method's plug-in.

A SuperNode's `--node-config` says which client it is and where its data is (`node_data`): a
partition of the run's dataset (`partition-id`, `num-partitions`, optionally `dataset`, its own
copy of it) or the device's own samples (`data-path`); and where it keeps the personalized
model the final personalize round evaluated (`model-dir`, `model_dir`: `personal_model`).
"""

from __future__ import annotations

import os
import time
import zlib
from collections.abc import Mapping
from logging import DEBUG, INFO
from pathlib import Path
from typing import Any

import torch
from flwr.app import Context, Message
from flwr.common import log

from pfedgm_app.data import (
    ClientData,
    DeviceData,
    Protocol,
    class_names,
    load_client_data,
    load_device_data,
    run_classes,
)
from pfedgm_app.learning.models import Model
from pfedgm_app.learning.training import keep_freed_memory, pick_device, set_threads
from pfedgm_app.methods import parse_run_config
from pfedgm_app.methods.base import ClientPlugin, ClientState, ClientTask, Personalized
from pfedgm_app.protocol import wire
from pfedgm_app.protocol.replies import message_round, received
from pfedgm_app.records.run_folder import RunFolder
from pfedgm_app.runconfig.common import RunConfig
from pfedgm_app.runconfig.settings import ConfigError

from . import personal_model

DATA_PATH = "data-path"  # node-config: the device's own data (`data.DeviceData`)
DATASET = "dataset"  # node-config: this SuperNode's own copy of the run's dataset
MODEL_DIR = "model-dir"  # node-config: where the device keeps its personalized model


def node_data(cfg: RunConfig, node: Mapping[str, Any]) -> tuple[int, int, ClientData]:
    """(client id, num-partitions, data) of the SuperNode with node-config `node`.

    With `data-path`, the device's own samples; its client id (the order clients are sampled
    in, the seed of its split and messages, its `client-state-dir` file, its summary row) is
    `partition-id` when given, else a hash of the data path (duplicates are refused by the
    server: give such devices distinct partition-ids); `num-partitions` is the federation's
    size when given, else 0 (the run then needs `min-nodes`). Without it, partition
    `partition-id` of `num-partitions` of the run's dataset (or the node's `dataset` copy).
    """
    if DATA_PATH in node:
        if DATASET in node:
            raise ConfigError(f"node-config gives both {DATA_PATH} and {DATASET}: keep one")
        if cfg.corruption != "none" or cfg.protocol != "standard":
            raise ConfigError(
                "corruption and protocol='generalization' assign clients by partition; a device "
                f"with its own data ({DATA_PATH}) needs corruption='none', protocol='standard'"
            )
        path = str(node[DATA_PATH])
        cid = int(node.get(wire.PARTITION_ID, zlib.crc32(path.encode()) & 0x7FFFFFFF))
        num = int(node.get(wire.NUM_PARTITIONS, 0))
        return cid, num, load_device_data(DeviceData.of(cfg, path, cid))
    if wire.PARTITION_ID not in node or wire.NUM_PARTITIONS not in node:
        raise ConfigError(
            f"node-config {dict(node)} names no data: give partition-id and num-partitions (a "
            f"partition of the run's dataset) or {DATA_PATH} (the device's own data)"
        )
    pid, num = int(node[wire.PARTITION_ID]), int(node[wire.NUM_PARTITIONS])
    dataset = str(node.get(DATASET, cfg.dataset))
    return pid, num, load_client_data(Protocol.of(cfg, num, dataset), pid)


class DataUnavailable(ConfigError):
    """This SuperNode's data cannot be loaded: its path missing, a file unreadable or corrupt,
    columns or labels the run cannot use. Its message is one line that names the data."""

    cause = "data"  # `wire.CAUSE`


class ModelDirUnavailable(DataUnavailable):
    """This SuperNode cannot write its personalized model where `model_dir` says."""

    cause = "model-dir"


def model_dir(cfg: RunConfig, node: Mapping[str, Any], run_id: int) -> Path:
    """Where this device keeps its personalized model: node-config `model-dir`; else the run's
    `output-dir`/models (simulation, a trial on one machine); else, with neither,
    `$XDG_DATA_HOME/pfedgm/models/run-<run id>` (default `~/.local/share`)."""
    if MODEL_DIR in node:
        return Path(str(node[MODEL_DIR])).expanduser()
    if cfg.output_dir:
        return RunFolder(Path(cfg.output_dir).expanduser()).models
    data_home = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(data_home) / "pfedgm" / "models" / f"run-{run_id}"


def load_node_data(cfg: RunConfig, node: Mapping[str, Any]) -> tuple[int, int, ClientData]:
    """`node_data`, its expected failures (ConfigError and any other ValueError or OSError of
    data loading) raised as one `DataUnavailable`."""
    try:
        return node_data(cfg, node)
    except (ValueError, OSError) as exc:
        reason = " ".join(str(exc).split()) or "no reason given"
        if not isinstance(exc, ConfigError):  # e.g. a PermissionError: its kind says what
            reason = f"{type(exc).__name__}: {reason}"
        raise DataUnavailable(reason) from exc


Client = tuple[int, int, ClientPlugin, ClientTask, float]


def client(msg: Message, context: Context, purpose: str) -> Client:
    """This client's id, num-partitions, its method's plug-in, its data and state, and the
    seconds its data took to be ready (decoded, or read from the cache)."""
    log(DEBUG, "pFedGM app: %s handler starts", purpose)  # a mark for `log_timing`'s readers
    cfg, method, settings = parse_run_config(context.run_config)
    set_threads(cfg.client_threads)
    keep_freed_memory()
    started = time.perf_counter()
    pid, num, data = load_node_data(cfg, context.node_config)
    seconds = time.perf_counter() - started
    device = pick_device(cfg.device)
    data = data.to(device)
    server_round = message_round(msg)  # 0: a query, the personalize round
    seed = zlib.crc32(f"{cfg.seed}/{server_round}/{pid}/{purpose}".encode())
    rng = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    path = Path(cfg.client_state_dir) / f"client-{pid}.pt" if cfg.client_state_dir else None
    state = ClientState(context.state, path, server_round)
    task = ClientTask(cfg, data, state, rng, device, server_round=server_round)
    return pid, num, method.plugin(settings), task, seconds


def received_model(msg: Message, plugin: ClientPlugin, task: ClientTask) -> Model:
    """The received global model, with what this client kept, and the server's extras."""
    model = plugin.build_model(task.data.image_shape, task.data.num_classes)
    model.load_state_dict(received(msg)[0].to_torch_state_dict())
    plugin.restore(model, task)
    if wire.EXTRAS in msg.content.array_records:
        extras = msg.content.array_records[wire.EXTRAS].to_torch_state_dict()
        task.received = {k: v.to(task.device) for k, v in extras.items()}
    return model.to(task.device)


def sizes(task: ClientTask) -> dict[str, int]:
    """The client's train and test sizes, as the server bounds its claims by them."""
    return {wire.NUM_EXAMPLES: len(task.data.y_train), wire.NUM_TEST: len(task.data.y_test)}


def keep(result: Personalized, task: ClientTask, context: Context, pid: int) -> Path:
    """Save the personalized model in `model_dir` as `client-<pid>.safetensors`, with what
    using it needs: its classes' names, image shape, method, run and accuracy."""
    cfg, node = task.cfg, context.node_config
    dataset = str(node.get(DATASET, cfg.dataset))
    names = (
        run_classes(cfg.classes, cfg.dataset)
        if DATA_PATH in node
        else class_names(cfg.classes, dataset)
    )
    run = {
        "method": cfg.method,
        "run-id": context.run_id,
        "dataset": dataset,
        "rounds": cfg.num_server_rounds,  # of Phase 1 (wire.ROUND is the current one)
        "initial-model": cfg.initial_model,
        "partition-id": pid,
        "accuracy": result.metrics[wire.ACCURACY],
        "num-test": len(task.data.y_test),
    }
    path = model_dir(cfg, node, context.run_id) / f"client-{pid}{personal_model.SUFFIX}"
    personal_model.save(path, result.model, task.data.image_shape, list(names), run)
    log(INFO, "pFedGM app: client %d keeps its personalized model in %s", pid, path)
    return path


def log_timing(handler: str, **seconds: float) -> None:
    """One DEBUG line per message: its handler's parts (`benchmarks.bench_deploy` reads it
    beside Flower's own DEBUG lines to take a deployment message apart)."""
    parts = ", ".join(f"{k} {v:.3f} s" for k, v in seconds.items())
    log(DEBUG, "pFedGM app: %s handler: %s", handler, parts)

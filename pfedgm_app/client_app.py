"""ClientApp: Flower handlers only; the work is done by the method plug-ins (`methods/`).

Messages (`wire`): `query` (which client is this, how much data), `train` (one round of Phase 1
or of a baseline), `train.personalize` (the final personalize-and-evaluate round). The run's
settings come from `context.run_config`; messages carry the arrays and the round only.
"""

from __future__ import annotations

import zlib
from pathlib import Path

import torch
from flwr.app import Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from . import wire
from .data import Protocol, load_client_data
from .methods import ClientPlugin, ClientRun, ClientState, parse_run_config
from .models import Model
from .replies import personalize_reply, received, train_reply
from .training import pick_device, set_threads

app = ClientApp()


def _client(msg: Message, context: Context, purpose: str) -> tuple[int, ClientPlugin, ClientRun]:
    """This client's partition id, its method's plug-in, and its data and state."""
    cfg, method, settings = parse_run_config(context.run_config)
    set_threads(cfg.client_threads)
    node = context.node_config
    pid, num = int(node[wire.PARTITION_ID]), int(node[wire.NUM_PARTITIONS])
    dataset = str(node.get("dataset", cfg.dataset))  # a SuperNode may hold its own copy
    device = pick_device(cfg.device)
    data = load_client_data(Protocol.of(cfg, num, dataset), pid).to(device)
    config = msg.content.config_records.get(wire.CONFIG, {})  # query messages carry none
    server_round = int(config.get(wire.ROUND, 0))
    seed = zlib.crc32(f"{cfg.seed}/{server_round}/{pid}/{purpose}".encode())
    rng = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    path = Path(cfg.client_state_dir) / f"client-{pid}.pt" if cfg.client_state_dir else None
    state = ClientState(context.state, path, server_round)
    run = ClientRun(cfg, data, state, rng, device, server_round=server_round)
    return pid, method.plugin(settings), run


def _model(msg: Message, plugin: ClientPlugin, run: ClientRun) -> Model:
    """The received global model, with what this client kept, and the server's extras."""
    model = plugin.build_model(tuple(run.data.x_train.shape[1:]), run.data.num_classes)
    model.load_state_dict(received(msg)[0].to_torch_state_dict())
    plugin.restore(model, run)
    if wire.EXTRAS in msg.content:
        extras = msg.content[wire.EXTRAS].to_torch_state_dict()
        run.received = {k: v.to(run.device) for k, v in extras.items()}
    return model.to(run.device)


def _sizes(run: ClientRun) -> dict[str, int]:
    return {wire.NUM_EXAMPLES: len(run.data.y_train), wire.NUM_TEST: len(run.data.y_test)}


@app.query()
def query(msg: Message, context: Context) -> Message:
    """Report identity and data sizes (the server checks the federation before round 1)."""
    pid, _, run = _client(msg, context, "query")
    metrics = {
        wire.PARTITION_ID: pid,
        wire.NUM_PARTITIONS: int(context.node_config[wire.NUM_PARTITIONS]),
        wire.NUM_CLASSES_PRESENT: int(torch.unique(run.data.y_train).numel()),
        **_sizes(run),
    }
    return Message(RecordDict({wire.METRICS: MetricRecord(metrics)}), reply_to=msg)


@app.train()
def train(msg: Message, context: Context) -> Message:
    """One local round of the configured method; sends only what the method shares."""
    _, plugin, run = _client(msg, context, "train")
    model = _model(msg, plugin, run)
    model.train()
    reply = plugin.train(model, run)
    metrics = {**reply.metrics, wire.NUM_EXAMPLES: len(run.data.y_train)}
    return train_reply(msg, reply.arrays, metrics, reply.extras)


@app.train(wire.PERSONALIZE)
def personalize(msg: Message, context: Context) -> Message:
    """Final round on every client: personalize with the method's rule, evaluate on test."""
    pid, plugin, run = _client(msg, context, "personalize")
    metrics = plugin.personalize(_model(msg, plugin, run), run)
    return personalize_reply(msg, {**metrics, **_sizes(run), wire.PARTITION_ID: pid})

"""ClientApp: Flower handlers only; the work is done by the method plug-ins.

Messages: `query` (which client is this, how much data), `train` (one round of Phase 1 or of
a baseline), `train.personalize` (the final personalize-and-evaluate round), `evaluate` (the
received global model on the client's test split).
"""

from __future__ import annotations

import zlib

import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from .config import RunConfig
from .data import load_client_data
from .methods import EXTRAS_RECORD, ClientRun, get_method
from .training import accuracy, pick_device, set_threads

app = ClientApp()


def _client(msg: Message, context: Context, purpose: str) -> tuple[int, RunConfig, ClientRun]:
    """Parse the run settings sent by the server and load this client's data."""
    settings = dict(msg.content["config"])
    server_round = int(settings.pop("server-round", 0))
    cfg = RunConfig.from_run_config(settings)
    set_threads(cfg.client_threads)
    node = context.node_config
    pid, num = int(node["partition-id"]), int(node["num-partitions"])
    dataset = str(node.get("dataset", cfg.dataset))  # a SuperNode may hold its own copy
    device = pick_device(cfg.device)
    data = load_client_data(cfg.protocol(num, dataset), pid).to(device)
    seed = zlib.crc32(f"{cfg.seed}/{server_round}/{pid}/{purpose}".encode())
    rng = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    return pid, cfg, ClientRun(cfg, data, context.state, rng, device)


def _model(msg: Message, cfg: RunConfig, run: ClientRun):
    method = get_method(cfg.method)
    model = method.build_model(tuple(run.data.x_train.shape[1:]), run.data.num_classes)
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    method.restore(model, run.state)
    if EXTRAS_RECORD in msg.content:
        extras = msg.content[EXTRAS_RECORD].to_torch_state_dict()
        run.received = {k: v.to(run.device) for k, v in extras.items()}
    return method, model.to(run.device)


def _reply(msg: Message, run: ClientRun, records: dict) -> Message:
    """The reply, with the method's non-model arrays (if any) in their own record."""
    if run.sent:
        records[EXTRAS_RECORD] = ArrayRecord({k: v.detach().cpu() for k, v in run.sent.items()})
    return Message(RecordDict(records), reply_to=msg)


def _counts(run: ClientRun) -> dict[str, int]:
    return {"num-examples": len(run.data.y_train), "num-test": len(run.data.y_test)}


@app.query()
def query(msg: Message, context: Context) -> Message:
    """Report identity and data sizes (the server checks the federation before round 1)."""
    pid, _, run = _client(msg, context, "query")
    metrics = {
        "partition-id": pid,
        "num-partitions": int(context.node_config["num-partitions"]),
        "num-classes-present": int(torch.unique(run.data.y_train).numel()),
        **_counts(run),
    }
    return Message(RecordDict({"metrics": MetricRecord(metrics)}), reply_to=msg)


@app.train()
def train(msg: Message, context: Context) -> Message:
    """One local round of the configured method; sends only what the method shares."""
    _, cfg, run = _client(msg, context, "train")
    method, model = _model(msg, cfg, run)
    model.train()
    metrics = method.train(model, run)
    method.keep(model, run.state)
    return _reply(
        msg,
        run,
        {
            "arrays": method.outgoing(model.cpu()),
            "metrics": MetricRecord({**metrics, "num-examples": len(run.data.y_train)}),
        },
    )


@app.train("personalize")
def personalize(msg: Message, context: Context) -> Message:
    """Final round on every client: personalize with the method's rule, evaluate on test."""
    pid, cfg, run = _client(msg, context, "personalize")
    method, model = _model(msg, cfg, run)
    metrics = method.personalize(model, run)
    reply = MetricRecord({**metrics, **_counts(run), "partition-id": pid})
    return _reply(msg, run, {"metrics": reply})


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    """The received model (with the client's kept parameters) on the client's test split."""
    pid, cfg, run = _client(msg, context, "evaluate")
    method, model = _model(msg, cfg, run)
    acc = accuracy(model, run.data.x_test, run.data.y_test)
    reply = MetricRecord({"accuracy": acc, **_counts(run), "partition-id": pid})
    return Message(RecordDict({"metrics": reply}), reply_to=msg)

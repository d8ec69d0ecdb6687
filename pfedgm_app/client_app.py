"""ClientApp: Flower handlers only; the work is done by the method plug-ins (`methods/`), the
SuperNode's data and model folder by `node`.

Messages (`wire`): `query` (which client is this, how much data), `train` (one round of Phase 1
or of a baseline), `train.personalize` (the final personalize-and-evaluate round). The run's
settings come from `context.run_config`; messages carry the arrays and the round only.
"""

from __future__ import annotations

import time
from logging import ERROR

import torch
from flwr.app import ConfigRecord, Context, Message, MetricRecord, MetricRecordValues, RecordDict
from flwr.clientapp import ClientApp
from flwr.common import log

from .client import personal_model
from .client.node import (
    DATA_PATH,
    MODEL_DIR,
    DataUnavailable,
    ModelDirUnavailable,
    client,
    keep,
    log_timing,
    model_dir,
    received_model,
    sizes,
)
from .protocol import wire
from .protocol.replies import personalize_reply, train_reply

app = ClientApp()


@app.query()
def query(msg: Message, context: Context) -> Message:
    """Report identity and data sizes (the server checks the federation before round 1). A
    node whose data cannot be loaded answers with the reason instead (`wire.UNAVAILABLE`), and
    logs it in one line: the server names the node and the reason before round 1."""
    try:
        pid, num, _, task, seconds = client(msg, context, "query")
        folder = model_dir(task.cfg, context.node_config, context.run_id)
        if problem := personal_model.folder_problem(folder):
            raise ModelDirUnavailable(f"{problem}; give node-config {MODEL_DIR} a writable folder")
    except DataUnavailable as exc:
        log(ERROR, "pFedGM app: node %s cannot take part: %s", context.node_id, exc)
        reason = ConfigRecord({wire.REASON: str(exc), wire.CAUSE: exc.cause})
        return Message(RecordDict({wire.UNAVAILABLE: reason}), reply_to=msg)
    metrics: dict[str, MetricRecordValues] = {
        wire.PARTITION_ID: pid,
        wire.NUM_PARTITIONS: num,
        wire.NUM_CLASSES_PRESENT: int(torch.unique(task.data.y_train).numel()),
        wire.OWN_DATA: int(DATA_PATH in context.node_config),
        wire.NUM_CLASSES: task.data.num_classes,
        wire.IMAGE_SHAPE: list(task.data.x_train.shape[1:]),
        wire.DATA_SECONDS: seconds,
        **sizes(task),
    }
    log_timing("query", data=seconds)
    return Message(RecordDict({wire.METRICS: MetricRecord(metrics)}), reply_to=msg)


@app.train()
def train(msg: Message, context: Context) -> Message:
    """One local round of the configured method; sends only what the method shares. Its
    metrics time the round's parts: `seconds-data` (data ready), `seconds-model` (model built
    from the message) and `seconds-compute` (the method's round)."""
    _, _, plugin, task, seconds = client(msg, context, "train")
    started = time.perf_counter()
    model = received_model(msg, plugin, task)
    model.train()
    ready = time.perf_counter()
    reply = plugin.train(model, task)
    compute = time.perf_counter() - ready
    metrics = {**reply.metrics, wire.NUM_EXAMPLES: len(task.data.y_train),
               wire.DATA_SECONDS: seconds, "seconds-model": ready - started,
               "seconds-compute": compute}  # fmt: skip
    log_timing("train", data=seconds, model=ready - started, compute=compute)
    return train_reply(msg, reply.arrays, metrics, reply.extras)


@app.train(wire.PERSONALIZE)
def personalize(msg: Message, context: Context) -> Message:
    """Final round on every client: personalize with the method's rule, evaluate on test. The
    final one (not an `eval-every` evaluation) saves the model it evaluated on the device
    (`node.keep`); the reply carries the metrics only."""
    pid, _, plugin, task, seconds = client(msg, context, "personalize")
    started = time.perf_counter()
    result = plugin.personalize(received_model(msg, plugin, task), task)
    log_timing("personalize", data=seconds, compute=time.perf_counter() - started)
    reply = personalize_reply(msg, {**result.metrics, **sizes(task), wire.PARTITION_ID: pid})
    if not task.server_round:
        keep(result, task, context, pid)
    return reply

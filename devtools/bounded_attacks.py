"""The attacks that aim at the influence bound itself (docs/robustness.md): each reply inside
every check, as long as the bound lets it be, pointed where it hurts most. Several are
omniscient: the attacker trains the other partitions' data itself (`honest_steps`, the same
seeds, so for a stateless method their very steps) to know the round's direction, as a
colluding server-side observer could; so they bound what any client could do.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from flwr.app import Array, Context, Message, RecordDict

from pfedgm_app.protocol import wire
from pfedgm_engine.inprocess import app_component

DEFAULT_BOUND = 5.0  # the attacker's guess of c when the run sets none (clip-ratio 0)

_HONEST: dict[tuple[int, int], dict[str, np.ndarray]] = {}  # (round, partition) -> its step


def _round(msg: Message) -> int:
    return int(msg.content[wire.CONFIG][wire.ROUND])


def steps_of(msg: Message, reply: Message) -> dict[str, np.ndarray]:
    """The reply's arrays minus those the message sent, in float64."""
    sent = msg.content[wire.ARRAYS]
    return {
        k: v.numpy().astype(np.float64) - sent[k].numpy()
        for k, v in reply.content[wire.ARRAYS].items()
    }


def send(msg: Message, reply: Message, steps: Mapping[str, np.ndarray]) -> None:
    """Replace the reply's arrays by those sent plus `steps`, in their own dtypes."""
    sent, arrays = msg.content[wire.ARRAYS], reply.content[wire.ARRAYS]
    for key, step in steps.items():
        dtype = sent[key].numpy().dtype
        arrays[key] = Array((sent[key].numpy() + step).astype(dtype))


def honest_steps(msg: Message, context: Context) -> dict[int, dict[str, np.ndarray]]:
    """Every partition's honest step this round, trained here on its data (kept per round)."""
    honest = app_component("clientapp")
    config = context.node_config
    out = {}
    for pid in range(int(config[wire.NUM_PARTITIONS])):
        key = (_round(msg), pid)
        if key not in _HONEST:
            node = {**config, wire.PARTITION_ID: pid}
            other = Context(context.run_id, context.node_id, node, RecordDict(), context.run_config)
            _HONEST[key] = steps_of(msg, honest(msg, other))
        out[pid] = _HONEST[key]
    return out


def bound_of(context: Context) -> float:
    """The c the attacker aims at: the run's `clip-ratio`, or `DEFAULT_BOUND` without one."""
    return float(context.run_config.get("clip-ratio", 0.0)) or DEFAULT_BOUND


def _flat(steps: Mapping[str, np.ndarray]) -> np.ndarray:
    return np.concatenate([steps[k].ravel() for k in sorted(steps)])


def _unflat(flat: np.ndarray, like: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    out, at = {}, 0
    for key in sorted(like):
        size = like[key].size
        out[key] = flat[at : at + size].reshape(like[key].shape)
        at += size
    return out


def _typical(steps: dict[int, dict[str, np.ndarray]]) -> float:
    return float(np.median([np.linalg.norm(_flat(s)) for s in steps.values()]))


def reversed_claiming(scale: float):
    """Its own step sign-flipped and `scale` times as long, having claimed 1e9 examples at
    the query (each train reply claims its true size: a larger claim would be dropped)."""

    def tamper(msg: Message, reply: Message, context: Context) -> None:
        if msg.metadata.message_type == "query" and reply.has_content():
            reply.content[wire.METRICS][wire.NUM_EXAMPLES] = 1e9
        if msg.metadata.message_type == "train":
            send(msg, reply, {k: -scale * s for k, s in steps_of(msg, reply).items()})

    return tamper


def random_at_bound(msg: Message, reply: Message, context: Context) -> None:
    """A random direction (new each round), c times its own step's length."""
    if msg.metadata.message_type == "train":
        own = steps_of(msg, reply)
        rng = np.random.default_rng(_round(msg))
        noise = rng.normal(0, 1, _flat(own).size)
        length = bound_of(context) * np.linalg.norm(_flat(own))
        send(msg, reply, _unflat(noise * length / np.linalg.norm(noise), own))


def max_harm(msg: Message, reply: Message, context: Context) -> None:
    """The others' mean step reversed, c typical steps long: the most a reply inside the
    bound can take back of the round's progress."""
    if msg.metadata.message_type == "train":
        pid = int(context.node_config[wire.PARTITION_ID])
        steps = honest_steps(msg, context)
        others = np.mean([_flat(s) for p, s in steps.items() if p != pid], axis=0)
        harm = -others * bound_of(context) * _typical(steps) / np.linalg.norm(others)
        send(msg, reply, _unflat(harm, steps[pid]))


def a_little(z: float):
    """ "A little is enough" (Baruch et al. 2019): the coordinate-wise mean of every client's
    honest step minus z times their std, sent by each colluder alike."""

    def tamper(msg: Message, reply: Message, context: Context) -> None:
        if msg.metadata.message_type == "train":
            steps = honest_steps(msg, context)
            flat = np.stack([_flat(s) for s in steps.values()])
            own = steps[int(context.node_config[wire.PARTITION_ID])]
            send(msg, reply, _unflat(flat.mean(0) - z * flat.std(0), own))

    return tamper


def fixed_push(msg: Message, reply: Message, context: Context) -> None:
    """Its honest step plus a push as long as that step, in one fixed direction every round."""
    if msg.metadata.message_type == "train":
        own = steps_of(msg, reply)
        direction = np.random.default_rng(0).normal(0, 1, _flat(own).size)
        push = direction * np.linalg.norm(_flat(own)) / np.linalg.norm(direction)
        send(msg, reply, _unflat(_flat(own) + push, own))


def label_flip(msg: Message, context: Context) -> None:
    """Before its ClientApp runs: its own training labels become (y + 1) mod C, once per
    process (the decoded client is kept in memory, `data.cache`)."""
    from pfedgm_app.client.node import load_node_data
    from pfedgm_app.runconfig.common import RunConfig

    if msg.metadata.message_type != "train":
        return
    _, _, data = load_node_data(RunConfig.from_run_config(context.run_config), context.node_config)
    if not getattr(data, "labels_flipped", False):
        data.y_train.copy_((data.y_train + 1) % data.num_classes)
        data.labels_flipped = True  # type: ignore[attr-defined]


def clear() -> None:
    """Forget the kept honest steps (a new run)."""
    _HONEST.clear()

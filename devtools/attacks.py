"""The attacks of docs/robustness.md that stay inside every bound the server checks, as
ClientApps for the in-process engine: the app's own ClientApp, whose replies the attacking
partitions then tamper with. Each runs on MNIST with a few SuperNodes for a few rounds, beside
the same run with honest clients (`compare`), so that what an attack costs is a difference of
two numbers from one command: `python -m benchmarks.bench_attacks` prints every attack under
every aggregator, `tests/test_attacks.py` asserts what each leaves under its defence.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord

from pfedgm_app.protocol import wire
from pfedgm_engine.inprocess import app_component, run_inprocess

from . import bounded_attacks as bounded

# clients that learn (a consensus to pull against): honest FedAvg reaches about 66 % here
RUN = {"method": "fedavg", "num-server-rounds": 3, "fraction-train": 1.0, "local-epochs": 2,
       "learning-rate": 0.05, "pool-size": 3000, "client-threads": 1}  # fmt: skip
FLIP = -9.0  # a sign-flipped step this many times as long: inside the clip bound (10x)

Tamper = Callable[[Message, Message, Context], None]  # (message, reply, its context): in place


@dataclass(frozen=True)
class Attack:
    """`attackers` (partition ids) tamper with their replies by `tamper`; `run` holds the
    run-config keys the attack needs (another method, fewer replies), `nodes` the federation."""

    name: str
    summary: str
    tamper: Tamper
    attackers: tuple[int, ...] = (0,)
    run: Mapping[str, Any] = field(default_factory=dict)
    nodes: int = 6
    before: Callable[[Message, Context], None] | None = None  # on its own data, first


def _arrays(reply: Message) -> ArrayRecord:
    return reply.content[wire.ARRAYS]


def _metrics(reply: Message, **changes: Callable[[float], float]) -> None:
    metrics = dict(reply.content[wire.METRICS])
    metrics.update(
        {k.replace("_", "-"): f(metrics[k.replace("_", "-")]) for k, f in changes.items()}
    )
    reply.content[wire.METRICS] = MetricRecord(metrics)


def _steps(msg: Message, reply: Message) -> dict[str, np.ndarray]:
    sent = msg.content[wire.ARRAYS]
    return {k: v.numpy() - sent[k].numpy() for k, v in _arrays(reply).items()}


def _send_steps(msg: Message, reply: Message, steps: Mapping[str, np.ndarray]) -> None:
    sent, arrays = msg.content[wire.ARRAYS], _arrays(reply)
    for key, step in steps.items():
        arrays[key] = Array((sent[key].numpy() + step).astype(sent[key].numpy().dtype))


def _is_train(msg: Message) -> bool:
    return msg.metadata.message_type == "train"


def flip(msg: Message, reply: Message, context: Context) -> None:
    """Its own step, sign-flipped and `-FLIP` times as long."""
    if _is_train(msg):
        _send_steps(msg, reply, {k: FLIP * s for k, s in _steps(msg, reply).items()})


def forged_weight(msg: Message, reply: Message, context: Context) -> None:
    """The flipped step, claiming 1e9 examples at the query and in every round."""
    if msg.metadata.message_type in ("query", "train") and reply.has_content():
        _metrics(reply, num_examples=lambda _: 1e9)
    flip(msg, reply, context)


def zero_model(msg: Message, reply: Message, context: Context) -> None:
    """A model of zeros every round."""
    if _is_train(msg):
        _send_steps(msg, reply, {k: -msg.content[wire.ARRAYS][k].numpy() for k in _arrays(reply)})


def forged_headline(msg: Message, reply: Message, context: Context) -> None:
    """Accuracy 0 on 19 times its test set, in the personalize round."""
    if msg.metadata.message_type == wire.PERSONALIZE_MESSAGE_TYPE and reply.has_content():
        _metrics(reply, num_test=lambda n: 19 * n, accuracy=lambda _: 0.0)


def true_size_zero_accuracy(msg: Message, reply: Message, context: Context) -> None:
    """Accuracy 0 at its true test size, in the personalize round: a client's fair share."""
    if msg.metadata.message_type == wire.PERSONALIZE_MESSAGE_TYPE and reply.has_content():
        _metrics(reply, accuracy=lambda _: 0.0)


_POISON: dict[int, dict[str, np.ndarray]] = {}  # the colluders' one update, by round


def collusion(msg: Message, reply: Message, context: Context) -> None:
    """Every colluder sends the first colluder's flipped step (in-process: one worker)."""
    if _is_train(msg):
        server_round = int(msg.content[wire.CONFIG][wire.ROUND])
        steps = _steps(msg, reply)
        poison = _POISON.setdefault(server_round, {k: FLIP * s for k, s in steps.items()})
        _send_steps(msg, reply, poison)


def scaled_model(msg: Message, reply: Message, context: Context) -> None:
    """Its model times 1e5: every value inside the value bound, far from the rest."""
    if _is_train(msg):
        arrays = _arrays(reply)
        for key in list(arrays):
            arrays[key] = Array(arrays[key].numpy() * np.float32(1e5))


def bias_budget(msg: Message, reply: Message, context: Context) -> None:
    """pFedGM: no step but on one class's bias b_0, which gets the whole length of a flipped
    step (inside the clip bound)."""
    if _is_train(msg):
        steps = _steps(msg, reply)
        length = float(np.sqrt(sum(np.sum(s.astype(np.float64) ** 2) for s in steps.values())))
        steps = {k: np.zeros_like(s) for k, s in steps.items()}
        steps["head.b"][0] = -FLIP * length
        _send_steps(msg, reply, steps)


def tiny_precision(msg: Message, reply: Message, context: Context) -> None:
    """pFedGM: A = 1e-30, whose covariance 1e30 the covariance reading would average."""
    if _is_train(msg):
        arrays = _arrays(reply)
        arrays["head.A"] = Array(np.full_like(arrays["head.A"].numpy(), 1e-30))


def fedpac_counts(msg: Message, reply: Message, context: Context) -> None:
    """FedPAC: class counts of 1e6 with prototypes of -1e3."""
    if _is_train(msg) and wire.EXTRAS in reply.content:
        extras = reply.content[wire.EXTRAS]
        for key, value in ((wire.CLASS_COUNTS, 1e6), (wire.PROTOS, -1e3)):
            extras[key] = Array(np.full_like(extras[key].numpy(), value))


def malformed_query(msg: Message, reply: Message, context: Context) -> None:
    """A query reply that describes no client: an image shape of -1."""
    if msg.metadata.message_type == "query" and reply.has_content():
        _metrics(reply, image_shape=lambda _: -1.0)


def nothing(msg: Message, reply: Message, context: Context) -> None:
    """The reply as trained (the attack is in `Attack.before`)."""


PFEDGM = {"method": "pfedgm"}
ATTACKS: dict[str, Attack] = {a.name: a for a in (
    Attack("flip", "a step sign-flipped, 9x as long", flip),
    Attack("forged-weight", "the flipped step, claiming 1e9 examples", forged_weight),
    Attack("zero-model", "a model of zeros every round", zero_model),
    Attack("forged-headline", "accuracy 0 on 19x its test set", forged_headline),
    Attack("zero-accuracy", "accuracy 0 at its true test size", true_size_zero_accuracy),
    Attack("collusion", "2 of 6 send one flipped step", collusion, attackers=(0, 1)),
    Attack("few-replies", "x1e5 model among 2 replies (4 nodes, fraction 0.5)", scaled_model,
           run={"fraction-train": 0.5}, nodes=4),
    Attack("bias-budget", "pFedGM: a flipped step's length on b_0", bias_budget, run=PFEDGM),
    Attack("tiny-precision", "pFedGM: A = 1e-30, covariance reading", tiny_precision,
           run={**PFEDGM, "covariance-average": "covariance"}),
    Attack("fedpac-counts", "FedPAC: counts 1e6, prototypes -1e3", fedpac_counts,
           run={"method": "fedpac"}),
    Attack("malformed-query", "a query reply of image shape -1", malformed_query),
    # aimed at the influence bound (devtools/bounded_attacks.py)
    Attack("reversed-9", "its step reversed, 9x, 1e9 claimed at query",
           bounded.reversed_claiming(9.0)),
    Attack("reversed-100", "its step reversed, 100x, 1e9 claimed at query",
           bounded.reversed_claiming(100.0)),
    Attack("random-bound", "a random direction at c times its length", bounded.random_at_bound),
    Attack("max-harm", "the others' mean reversed, c typical steps", bounded.max_harm),
    Attack("a-little-1", "2 of 6 send mean - 1 std (Baruch et al.)", bounded.a_little(1.0),
           attackers=(0, 1)),
    Attack("a-little-1.5", "2 of 6 send mean - 1.5 std", bounded.a_little(1.5),
           attackers=(0, 1)),
    Attack("label-flip", "trains on labels (y + 1) mod C", nothing, before=bounded.label_flip),
    Attack("fixed-push", "a push of its step's length, one direction, 20 rounds",
           bounded.fixed_push, run={"num-server-rounds": 20}),
)}  # fmt: skip


def hostile_app(attack: Attack) -> Callable[[Message, Context], Message]:
    """The app's ClientApp, whose replies `attack.attackers` tamper with."""
    honest = app_component("clientapp")

    def client_app(msg: Message, context: Context) -> Message:
        pid = int(context.node_config["partition-id"])
        if attack.before is not None and pid in attack.attackers:
            attack.before(msg, context)
        reply = honest(msg, context)
        if pid in attack.attackers and not reply.has_error():
            attack.tamper(msg, reply, context)
        return reply

    return client_app


def run(
    attack: Attack,
    dataset: Path,
    out: Path,
    honest: bool = False,
    nodes: int | None = None,
    **keys: Any,
) -> dict:
    """The summary of `attack`'s run (its honest twin with `honest`) on `dataset` in `out`,
    with the run-config `keys` (the aggregator) over RUN and the attack's own, on `nodes`
    SuperNodes (default: the attack's)."""
    _POISON.clear()
    bounded.clear()
    config = {**RUN, **attack.run, **keys, "dataset": str(dataset), "output-dir": str(out)}
    app = None if honest else hostile_app(attack)
    summary, _ = run_inprocess(config, nodes or attack.nodes, client_app=app)
    return summary

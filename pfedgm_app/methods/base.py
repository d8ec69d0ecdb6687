"""A method's client side: the plug-in base (FedAvg's behaviour; methods override its hooks),
the task a message gives it, the state it keeps and what it replies. A method is declared in
the registry (`methods/__init__.py`, a `Method`).

A client plug-in builds its model, trains it for one round and returns what it sends (`Reply`),
names the parameters it keeps on the client (`kept_keys`, stored in `ClientState`, never sent),
and personalizes + evaluates at the end (`Personalized`: the metrics it reports and the model
they are of, which the device keeps, `personal_model`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch
from flwr.app import ArrayRecord, RecordDict
from torch import nn

from pfedgm_app.data import ClientData
from pfedgm_app.learning.models import Model, build_model
from pfedgm_app.learning.training import accuracy, make_sgd, run_epochs, supervised_step
from pfedgm_app.runconfig.common import RunConfig
from pfedgm_app.runconfig.method_settings import NoSettings
from pfedgm_app.runconfig.settings import Settings

KEPT = "kept-arrays"  # ClientState name of the model parameters a client never sends


class Diverged(ValueError):
    """A round's training loss became non-finite: its update would wreck the global model."""


@dataclass
class Reply:
    """What a client sends after a training round: `arrays` (model arrays the server
    averages), `metrics` (with the weight, `num-examples`, added by the ClientApp) and `extras`
    (non-model arrays: statistics, a head to combine).
    """

    arrays: dict[str, torch.Tensor]
    metrics: dict[str, float]
    extras: dict[str, torch.Tensor] = field(default_factory=dict)


@dataclass
class Personalized:
    """A client's personalize round: `metrics` (at least `accuracy`, of `model` on the client's
    test split) and `model`, the module evaluated (images -> logits; its head one of
    `personal_model.HEADS`), which the ClientApp saves on the device and never sends.
    """

    metrics: dict[str, float]
    model: Model


def accuracy_on_test(model: nn.Module, task: ClientTask) -> float:
    """`model`'s accuracy on the client's test split."""
    return accuracy(model, task.data.x_test, task.data.y_test)


class ClientState:
    """Arrays a method keeps on the client between messages, by name (in `context.state`,
    which lives as long as the SuperNode; never sent). The one way client state is kept.

    With a `path` (`client-state-dir`), every save also goes to that file on the device,
    tagged with the message's round, and a state found empty (a new SuperNode or a resumed
    run) is filled from it: from the latest save of a round before `server_round` (a round a
    resumed run runs again starts from the state before it; the file keeps the two latest
    saves), or from the latest save of all for the personalize round (`server_round` 0).
    """

    def __init__(
        self, records: RecordDict | None = None, path: Path | None = None, server_round: int = 0
    ) -> None:
        self.records = RecordDict() if records is None else records
        self.path, self.server_round = path, server_round
        if path is not None and not len(self.records) and path.exists():
            earlier = [(r, s) for r, s in _saves(path) if not server_round or r < server_round]
            for name, tensors in (earlier[-1][1] if earlier else {}).items():  # saves are sorted
                self.records[name] = ArrayRecord(tensors)

    def __contains__(self, name: str) -> bool:
        return name in self.records

    def load(self, name: str) -> dict[str, torch.Tensor]:
        return self.records.array_records[name].to_torch_state_dict()

    def save(self, name: str, tensors: Mapping[str, torch.Tensor]) -> None:
        self.records[name] = ArrayRecord({k: v.detach().cpu() for k, v in tensors.items()})
        if self.path is not None:
            snapshot = {n: self.load(n) for n in self.records}
            saves = [(r, s) for r, s in _saves(self.path) if r != self.server_round]
            saves = sorted([*saves, (self.server_round, snapshot)], key=lambda rs: rs[0])[-2:]
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            torch.save(saves, tmp)
            os.replace(tmp, self.path)  # a kill leaves the previous file whole


def _saves(path: Path) -> list[tuple[int, dict[str, dict[str, torch.Tensor]]]]:
    """The (round, state) saves of a client state file, oldest first; none without the file."""
    return torch.load(path, weights_only=True) if path.exists() else []


@dataclass
class ClientTask:
    """Everything a plug-in needs on a client for one message."""

    cfg: RunConfig
    data: ClientData
    state: ClientState
    rng: torch.Generator  # seeded per (seed, round, client, message)
    device: torch.device
    received: dict[str, torch.Tensor] = field(default_factory=dict)  # the server's extras
    server_round: int = 0  # the round of a train message (0: the personalize round)

    def epochs(self, step, params, epochs: int, lr: float | None = None, after_step=None) -> dict:
        """The shared training loop with the run's optimizer settings."""
        cfg = self.cfg
        opt = make_sgd(params, lr or cfg.learning_rate, cfg.momentum, cfg.weight_decay)
        x, y = self.data.x_train, self.data.y_train
        return run_epochs(step, x, y, opt, epochs, cfg.batch_size, self.rng, after_step)


class ClientPlugin:
    """FedAvg on a client: train the whole model with cross-entropy, send everything.

    What leaves the client is declared once, in `sends` (model parts: `generator`, `head`,
    `convolutions`); every other array is kept on the client (`kept_keys`). `own_state` says
    the method keeps arrays of its own between messages besides those (Ditto's personal model,
    pFedMe's theta); `keeps_state()` derives whether its clients keep any.
    """

    sends: tuple[str, ...] = ("generator", "head")
    own_state: bool = False

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings if settings is not None else NoSettings()

    def build_model(self, image_shape: tuple[int, int, int], num_classes: int) -> Model:
        return build_model(image_shape, lambda dim: nn.Linear(dim, num_classes))

    def kept_keys(self, model: Model) -> list[str]:
        """state_dict keys that stay on the client (never leave it): the parts not in `sends`."""
        shared = {k for part in self.sends for k in model.part_keys(part)}
        return [k for k in model.state_dict() if k not in shared]

    @classmethod
    def keeps_state(cls) -> bool:
        """Whether clients keep arrays between rounds (`ClientState`): a resumed run's new
        clients start without them."""
        return cls.own_state or set(cls.sends) != {"generator", "head"}

    def train(self, model: Model, task: ClientTask) -> Reply:
        """One local round; returns what the client sends (end with `self.send`)."""
        metrics = task.epochs(supervised_step(model), model.parameters(), task.cfg.local_epochs)
        return self.send(model, task, metrics)

    def personalize(self, model: Model, task: ClientTask) -> Personalized:
        """Final round on every client: the model it is evaluated with (here the received
        global model with what the client kept) and at least its `accuracy`."""
        return Personalized({"accuracy": accuracy_on_test(model, task)}, model)

    def divergence_advice(self) -> str:
        """What else than the learning rate makes this method's steps steep: the end of the
        line `Diverged` gives, starting with ' or ...' (empty: nothing)."""
        return ""

    def restore(self, model: Model, task: ClientTask) -> None:
        """Load the parameters this client kept (absent before its first round)."""
        if KEPT in task.state:
            model.load_state_dict(task.state.load(KEPT), strict=False)

    def send(
        self,
        model: Model,
        task: ClientTask,
        metrics: dict[str, float],
        extras: Mapping[str, torch.Tensor] | None = None,
    ) -> Reply:
        """Keep `kept_keys` in the client state and put every other array in the reply; a round
        whose loss went non-finite raises `Diverged` instead, naming the learning rate."""
        if not math.isfinite(metrics.get("loss", 0.0)):
            raise Diverged(
                f"training diverged: the loss became non-finite in round {task.server_round} at "
                f"learning-rate={task.cfg.learning_rate}; lower learning-rate (the paper's: 0.01)"
                f"{self.divergence_advice()}"
            )
        kept, weights = set(self.kept_keys(model)), model.state_dict()
        if kept:
            task.state.save(KEPT, {k: weights[k] for k in kept})
        shared = {k: v for k, v in weights.items() if k not in kept}
        return Reply(shared, metrics, dict(extras or {}))

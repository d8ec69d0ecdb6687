"""What a method does on a client. FedAvg's behaviour is the default; methods override hooks.

A method builds its model, trains it for one round, names the parameters it keeps on the
client (stored in `context.state`, never sent), and personalizes + evaluates at the end.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from flwr.app import ArrayRecord, RecordDict
from torch import nn

from ..config import RunConfig
from ..data import ClientData
from ..models import FEATURE_DIM, Model, build_generator
from ..training import accuracy, make_sgd, run_epochs, supervised_step

KEPT_RECORD = "kept-arrays"  # context.state key of the parameters a client never sends
EXTRAS_RECORD = "extras"  # message ArrayRecord of non-model arrays (statistics, personal heads)


@dataclass
class ClientRun:
    """Everything a method needs on a client for one message."""

    cfg: RunConfig
    data: ClientData
    state: RecordDict
    generator: torch.Generator  # seeded per (seed, round, client)
    device: torch.device
    # Non-model arrays: `received` from the server's "extras" record (e.g. FedPAC's global
    # prototypes), `sent` back in the reply's (statistics the server aggregates).
    received: dict[str, torch.Tensor] = field(default_factory=dict)
    sent: dict[str, torch.Tensor] = field(default_factory=dict)

    def epochs(self, step, params, epochs: int, lr: float | None = None, after_step=None) -> dict:
        """The shared training loop with the run's optimizer settings."""
        cfg = self.cfg
        opt = make_sgd(params, lr or cfg.learning_rate, cfg.momentum, cfg.weight_decay)
        x, y = self.data.x_train, self.data.y_train
        return run_epochs(step, x, y, opt, epochs, cfg.batch_size, self.generator, after_step)


class Method:
    """FedAvg on a client: train the whole model with cross-entropy, send everything."""

    name = "fedavg"

    def build_model(self, image_shape: tuple[int, int, int], num_classes: int) -> Model:
        return Model(build_generator(image_shape), nn.Linear(FEATURE_DIM, num_classes))

    def kept_keys(self, model: Model) -> list[str]:
        """state_dict keys that stay on the client (never leave it)."""
        return []

    def train(self, model: Model, run: ClientRun) -> dict:
        return run.epochs(supervised_step(model), model.parameters(), run.cfg.local_epochs)

    def personalize(self, model: Model, run: ClientRun) -> dict:
        """Final round on every client: returns at least `accuracy` on the client's test split."""
        return {"accuracy": accuracy(model, run.data.x_test, run.data.y_test)}

    # -- state kept on the client -------------------------------------------------------------
    def restore(self, model: Model, state: RecordDict) -> None:
        if KEPT_RECORD in state:
            model.load_state_dict(state[KEPT_RECORD].to_torch_state_dict(), strict=False)

    def keep(self, model: Model, state: RecordDict) -> None:
        kept = self.kept_keys(model)
        if kept:
            sd = model.state_dict()
            state[KEPT_RECORD] = ArrayRecord({k: sd[k] for k in kept})

    def outgoing(self, model: Model) -> ArrayRecord:
        kept = set(self.kept_keys(model))
        return ArrayRecord({k: v for k, v in model.state_dict().items() if k not in kept})

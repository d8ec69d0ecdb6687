"""Ditto (Li et al., 2021): FedAvg for the global model plus a personal model per client."""

from __future__ import annotations

import copy

import torch
from flwr.app import ArrayRecord

from ..models import Model
from ..training import accuracy, supervised_step
from .base import ClientRun, Method

PERSONAL_RECORD = "ditto-personal"  # context.state key of the personal model (never sent)


class Ditto(Method):
    """Each round a sampled client (1) trains the received global model w as FedAvg does and sends
    it, and (2) trains its personal model v on f(v) + mu/2 ||v - w||^2 with w the received global
    model (`ditto-mu`, 1.0 as tuned in the paper). v starts from the first global model it
    receives, stays in `context.state`, and is what the client is evaluated with.
    """

    name = "ditto"

    def train(self, model: Model, run: ClientRun) -> dict:
        received = [p.detach().clone() for p in model.parameters()]
        personal = self._personal(model, run)
        mu = run.cfg.ditto_mu
        task = supervised_step(personal)

        def proximal_step(xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
            prox = sum(
                (v - w).pow(2).sum() for v, w in zip(personal.parameters(), received, strict=True)
            )
            return task(xb, yb) + 0.5 * mu * prox

        run.epochs(proximal_step, personal.parameters(), run.cfg.local_epochs)
        run.state[PERSONAL_RECORD] = ArrayRecord(personal.state_dict())
        return super().train(model, run)

    def personalize(self, model: Model, run: ClientRun) -> dict:
        global_acc = super().personalize(model, run)["accuracy"]
        personal = self._personal(model, run)
        return {"accuracy": accuracy(personal, run.data.x_test, run.data.y_test),
                "acc-global": global_acc}  # fmt: skip

    @staticmethod
    def _personal(model: Model, run: ClientRun) -> Model:
        personal = copy.deepcopy(model)
        if PERSONAL_RECORD in run.state:
            personal.load_state_dict(run.state[PERSONAL_RECORD].to_torch_state_dict())
        return personal

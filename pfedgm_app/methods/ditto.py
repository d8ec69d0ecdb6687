"""Ditto (Li et al., 2021): FedAvg for the global model plus a personal model per client.

Reference: litian96/ditto, `flearn/trainers_MTL/ditto.py: Server.train` (the personal step
v <- v - lr * (grad f(v) + mu * (v - w)), mu being its `lam`); the schedule is PFLlib's
(`serverditto.py: Ditto.train`: `client.ptrain()` on the personal model, then `client.train()`
on the global copy, each for whole epochs), where the authors' code interleaves one step of
each per batch.
"""

from __future__ import annotations

import copy

import torch

from pfedgm_app.learning.models import Model
from pfedgm_app.learning.training import supervised_step
from pfedgm_app.runconfig.method_settings import DittoSettings

from .base import ClientPlugin, ClientTask, Personalized, Reply, accuracy_on_test

PERSONAL = "ditto-personal"  # ClientState name of the personal model (never sent)


class DittoClient(ClientPlugin):
    """Each round a sampled client (1) trains the received global model w as FedAvg does and sends
    it, and (2) trains its personal model v on f(v) + mu/2 ||v - w||^2 with w the received global
    model (`ditto-mu`). v starts from the first global model it receives, stays in the client
    state, and is what the client is evaluated with.
    """

    settings: DittoSettings  # what the registry gives it (`methods.METHODS`)

    own_state = True  # its personal model v, never sent

    def train(self, model: Model, task: ClientTask) -> Reply:
        received = [p.detach().clone() for p in model.parameters()]
        personal = self._personal(model, task)
        mu = self.settings.mu
        loss_of = supervised_step(personal)

        def proximal_step(xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
            prox = sum(
                (v - w).pow(2).sum() for v, w in zip(personal.parameters(), received, strict=True)
            )
            return loss_of(xb, yb) + 0.5 * mu * prox

        task.epochs(proximal_step, personal.parameters(), task.cfg.local_epochs)
        task.state.save(PERSONAL, personal.state_dict())
        return super().train(model, task)

    def personalize(self, model: Model, task: ClientTask) -> Personalized:
        global_acc = accuracy_on_test(model, task)
        personal = self._personal(model, task)
        metrics = {"accuracy": accuracy_on_test(personal, task), "acc-global": global_acc}
        return Personalized(metrics, personal)

    @staticmethod
    def _personal(model: Model, task: ClientTask) -> Model:
        personal = copy.deepcopy(model)
        if PERSONAL in task.state:
            personal.load_state_dict(task.state.load(PERSONAL))
        return personal

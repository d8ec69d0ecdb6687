"""pFedMe (Dinh et al., NeurIPS 2020): personalization through Moreau envelopes.

Client i keeps a personal model theta_i that solves, on each mini-batch D,

    h(theta; w) = f_i(theta; D) + lambda/2 ||theta - w||^2 + wd/2 ||theta||^2      (inner problem)

approximately (`pfedme-inner-steps` K gradient steps at `pfedme-personal-learning-rate`,
stopping early once ||grad h|| <= `pfedme-tolerance`: the paper's delta-approximate solution),
then moves its local copy of the global model toward it, w <- w - eta * lambda * (w - theta)
(the outer step, eta = `learning-rate`). Only w is sent; theta stays on the client. The server
averages the w's (beta = 1).
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
from flwr.app import ArrayRecord
from torch import nn

from ..models import Model
from ..training import accuracy, run_epochs, supervised_step
from .base import ClientRun, Method

PERSONAL_RECORD = "pfedme-personal"  # context.state key of theta (never sent)


def moreau_step_(
    personal: nn.Module,
    anchor: list[torch.Tensor],
    loss_fn: Callable[[], torch.Tensor],
    lam: float,
    lr: float,
    steps: int,
    tolerance: float = 0.0,
    weight_decay: float = 0.0,
) -> tuple[torch.Tensor, float]:
    """Approximately minimize h(theta) = loss_fn() + lam/2 ||theta - anchor||^2
    + weight_decay/2 ||theta||^2 over `personal`'s parameters, in place, by at most `steps`
    gradient steps of size `lr`; stops once ||grad h(theta)|| <= `tolerance`.

    Evaluates the gradient at most `steps` times, once before each step, as pFedMe's code does
    (K forward/backward passes per batch, not K + 1). Returns loss_fn() and ||grad h|| at the
    last point evaluated: the returned theta when the tolerance stopped the loop (so the
    tolerance is met there), else the point before the last step.
    """
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    params = [p for p in personal.parameters() if p.requires_grad]

    def grad_h() -> tuple[torch.Tensor, list[torch.Tensor]]:
        loss = loss_fn()
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            return loss.detach(), [
                g + lam * (p - w) + weight_decay * p
                for g, p, w in zip(grads, params, anchor, strict=True)
            ]

    for _ in range(steps):
        loss, grads = grad_h()
        norm = _norm(grads)
        if norm <= tolerance:
            break
        with torch.no_grad():
            for p, g in zip(params, grads, strict=True):
                p.sub_(lr * g)
    return loss, norm


def _norm(tensors: list[torch.Tensor]) -> float:
    return torch.sqrt(sum(t.pow(2).sum() for t in tensors)).item()


class PFedMe(Method):
    """pFedMe client: per batch, the inner problem on theta, then the outer step on w.

    The personalize round runs this client update once more against the final global model on
    every client and evaluates theta, as pFedMe's code does after its last round (there every
    client trains in every round; here a fraction q does, so the final update is run here).
    """

    name = "pfedme"

    def train(self, model: Model, run: ClientRun) -> dict:
        personal, metrics = self._client_update(model, run)
        run.state[PERSONAL_RECORD] = ArrayRecord(personal.state_dict())
        return metrics

    def personalize(self, model: Model, run: ClientRun) -> dict:
        global_acc = super().personalize(model, run)["accuracy"]
        personal, metrics = self._client_update(model, run)
        return {
            "accuracy": accuracy(personal, run.data.x_test, run.data.y_test),
            "acc-global": global_acc,
            "pfedme-inner-grad-norm": metrics["pfedme-inner-grad-norm"],
        }

    @staticmethod
    def _client_update(model: Model, run: ClientRun) -> tuple[Model, dict]:
        """One round of pFedMe on `model` (w, updated in place); returns theta and metrics."""
        cfg = run.cfg
        personal = copy.deepcopy(model)  # theta^0 = w, as pFedMe sets both from the global model
        anchor = [p.detach() for p in model.parameters()]  # w, updated in place below
        task = supervised_step(personal)
        norms: list[float] = []

        def step(xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
            loss, norm = moreau_step_(
                personal,
                anchor,
                lambda: task(xb, yb),
                cfg.pfedme_lambda,
                cfg.pfedme_personal_learning_rate,
                cfg.pfedme_inner_steps,
                cfg.pfedme_tolerance,
                cfg.weight_decay,
            )
            norms.append(norm)
            with torch.no_grad():  # outer step: w <- w - eta * lambda * (w - theta)
                for w, theta in zip(anchor, personal.parameters(), strict=True):
                    w.sub_(cfg.learning_rate * cfg.pfedme_lambda * (w - theta))
            return loss

        # Both updates happen inside `step`: the loop only batches (optimizer=None).
        x, y = run.data.x_train, run.data.y_train
        metrics = run_epochs(step, x, y, None, cfg.local_epochs, cfg.batch_size, run.generator)
        metrics["pfedme-inner-grad-norm"] = sum(norms) / max(len(norms), 1)
        return personal, metrics

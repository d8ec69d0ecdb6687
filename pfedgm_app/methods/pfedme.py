"""pFedMe (Dinh et al., NeurIPS 2020): personalization through Moreau envelopes.

Client i keeps a personal model theta_i that solves, on each mini-batch D,

    h(theta; w) = f_i(theta; D) + lambda/2 ||theta - w||^2 + wd/2 ||theta||^2      (inner problem)

approximately (`pfedme-inner-steps` K gradient steps at `pfedme-personal-learning-rate`,
stopping early once ||grad h|| <= `pfedme-tolerance`: the paper's delta-approximate solution),
then moves its local copy of the global model toward it, w <- w - eta * lambda * (w - theta)
(the outer step, eta = `learning-rate`). Only w is sent; theta stays on the client. The server
averages the w's (beta = 1).

Reference: CharlieDinh/pFedMe, `FLAlgorithms/users/userpFedMe.py: UserpFedMe.train` and
`FLAlgorithms/optimizers/fedoptimizer.py: pFedMeOptimizer.step`. Defaults: the paper's protocol
where it fixes a value (lr 0.01, 5 local epochs, batch 50, lambda 5 as the paper tuned it; the
authors' command has 15), the authors' CIFAR-10 command where it does not (K = 5, personal lr
0.01). Their local work is R = 20 single mini-batches
per round (`pfedme-local-batches=20`; here drawn from a seeded permutation, theirs from an
unshuffled loader that continues across rounds). Their "personalized" accuracy evaluates, in
effect, w_i after the local round (the optimizer returns the model's own parameters, which
`update_parameters(local_model)` then overwrites; the repository's issue #5): both are reported,
theta as `accuracy` (the paper), w_i as `acc-local-model` (the authors' code). Departures:
their inner step also adds mu * theta (mu = 0.001), here the protocol's weight decay.
"""

from __future__ import annotations

import copy
import operator
from collections.abc import Callable
from functools import reduce

import torch
from torch import nn

from pfedgm_app.learning.models import Model
from pfedgm_app.learning.training import run_epochs, supervised_step
from pfedgm_app.runconfig.method_settings import PFedMeSettings

from .base import ClientPlugin, ClientTask, Personalized, Reply, accuracy_on_test

PERSONAL = "pfedme-personal"  # ClientState name of theta (never sent)


def moreau_step_(
    personal: nn.Module,
    anchor: list[torch.Tensor],
    loss_fn: Callable[[], torch.Tensor],
    lambda_: float,
    lr: float,
    steps: int,
    tolerance: float = 0.0,
    weight_decay: float = 0.0,
) -> tuple[torch.Tensor, float]:
    """Approximately minimize h(theta) = loss_fn() + lambda/2 ||theta - anchor||^2
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
                g + lambda_ * (p - w) + weight_decay * p
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
    return torch.sqrt(reduce(operator.add, (t.pow(2).sum() for t in tensors))).item()


class PFedMeClient(ClientPlugin):
    """pFedMe client: per batch, the inner problem on theta, then the outer step on w.

    The personalize round runs this client update once more against the final global model on
    every client and evaluates theta (`accuracy`) and the updated w_i (`acc-local-model`), as
    pFedMe's code does after its last round (there every client trains in every round; here a
    fraction q does, so the final update is run here).
    """

    settings: PFedMeSettings  # what the registry gives it (`methods.METHODS`)

    own_state = True  # its personal model theta, never sent

    def train(self, model: Model, task: ClientTask) -> Reply:
        personal, metrics = self._client_update(model, task)
        task.state.save(PERSONAL, personal.state_dict())
        return self.send(model, task, metrics)

    def personalize(self, model: Model, task: ClientTask) -> Personalized:
        global_acc = accuracy_on_test(model, task)
        personal, metrics = self._client_update(model, task)
        return Personalized(
            {
                "accuracy": accuracy_on_test(personal, task),  # theta: the client's model
                "acc-local-model": accuracy_on_test(model, task),  # w_i
                "acc-global": global_acc,
                "pfedme-inner-grad-norm": metrics["pfedme-inner-grad-norm"],
            },
            personal,
        )

    def _client_update(self, model: Model, task: ClientTask) -> tuple[Model, dict]:
        """One round of pFedMe on `model` (w, updated in place); returns theta and metrics."""
        cfg, settings = task.cfg, self.settings
        personal = copy.deepcopy(model)  # theta^0 = w, as pFedMe sets both from the global model
        anchor = [p.detach() for p in model.parameters()]  # w, updated in place below
        loss_of = supervised_step(personal)
        norms: list[float] = []

        def step(xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
            loss, norm = moreau_step_(
                personal,
                anchor,
                lambda: loss_of(xb, yb),
                settings.lambda_,
                settings.personal_learning_rate,
                settings.inner_steps,
                settings.tolerance,
                cfg.weight_decay,
            )
            norms.append(norm)
            with torch.no_grad():  # outer step: w <- w - eta * lambda * (w - theta)
                for w, theta in zip(anchor, personal.parameters(), strict=True):
                    w.sub_(cfg.learning_rate * settings.lambda_ * (w - theta))
            return loss

        # Both updates happen inside `step`: the loop only batches (optimizer=None).
        x, y = task.data.x_train, task.data.y_train
        epochs = cfg.local_epochs
        if settings.local_batches:  # R mini-batches: one pass over R batches of a seeded draw
            need = settings.local_batches * cfg.batch_size
            draws = torch.cat(
                [torch.randperm(len(x), generator=task.rng) for _ in range(-(-need // len(x)))]
            )[:need]
            x, y, epochs = x[draws.to(x.device)], y[draws.to(y.device)], 1
        metrics = run_epochs(step, x, y, None, epochs, cfg.batch_size, task.rng)
        metrics["pfedme-inner-grad-norm"] = sum(norms) / max(len(norms), 1)
        return personal, metrics

"""pFedGM on a client: Algorithm 1, Phase 1 (`train`) and Phase 2 (`personalize`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..config import Settings, above, at_least
from ..gaussian import (
    GaussianHead,
    PersonalizedHead,
    class_means,
    covariance_objective,
    fine_tune_,
    personalized_objective,
    refine_biases_,
    shared_objective,
    update_prototypes_,
)
from ..models import Model, build_model
from ..strategies import PFedGM
from ..training import accuracy, apply_batched, run_epochs
from .base import ClientPlugin, ClientRun, Method, Reply


@dataclass(frozen=True)
class PFedGMSettings(Settings):
    """The paper's hyperparameters (Sec. Training Setup): lambda in Eq. (main_loss) and in zeta
    of Eq. (LossC); Phase 2 SGD fine-tuning, then L-BFGS on the biases (`lbfgs-cycles=0` skips
    it).
    """

    lambda_: float = at_least(0, 1.0)
    personal_epochs: int = at_least(0, 5)
    personal_learning_rate: float = above(0, 0.05)
    lbfgs_learning_rate: float = above(0, 0.05)
    lbfgs_max_iter: int = at_least(1, 10)
    lbfgs_cycles: int = at_least(0, 5)


class PFedGMClient(ClientPlugin):
    """Generator phi + Gaussian head (navigator psi, covariance nu); all three are sent."""

    def build_model(self, image_shape: tuple[int, int, int], num_classes: int) -> Model:
        return build_model(image_shape, lambda dim: GaussianHead(num_classes, dim))

    def train(self, model: Model, run: ClientRun) -> Reply:
        """Phase 1 on client i in round r: E epochs of Eq. (main_loss) on phi and psi, i.e.
        H(phi, psi, E) + lambda R_c(phi), plus Eq. (cov_approx) on nu in the same steps.
        """
        gen, head, lam = model.generator, model.head, self.settings.lambda_
        x, y = run.data.x_train, run.data.y_train
        # upsilon^r_{i,k} = E[z^r | y=k, c=i], computed exactly at the start of the round.
        prototypes, counts = class_means(apply_batched(gen, x), y, head.mu.shape[0], head.mu)

        def step(xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
            z = gen(xb)
            zd = model.dropout(z)  # the navigator's input; R_c takes z before dropout
            loss = shared_objective(zd, yb, head) + lam * personalized_objective(z, yb, prototypes)
            loss = loss + covariance_objective(zd, yb, head)  # reaches A only
            update_prototypes_(prototypes, z, yb, counts)
            return loss

        # nu is a statistic, not a weight: no weight decay on it (decay would shrink the
        # precision toward 0, i.e. inflate the variances, regardless of the data).
        params = [
            {"params": [*gen.parameters(), head.mu, head.b]},
            {"params": [head.A], "weight_decay": 0.0},
        ]
        metrics = run.epochs(step, params, run.cfg.local_epochs, after_step=head.project_)
        return self.send(model, run, metrics)

    def personalize(self, model: Model, run: ClientRun) -> dict:
        """Phase 2: freeze phi*, fit the personalized head (Eq. LossC) by SGD, then refine its
        biases with L-BFGS. Also reports the two ablation points of the paper's Table
        (adaptation): the global heads with no adaptation and the head after fine-tuning only.
        """
        cfg, own, data, head = run.cfg, self.settings, run.data, model.head
        z_train = apply_batched(model.generator, data.x_train)
        z_test = apply_batched(model.generator, data.x_test)
        # upsilon*_k = E[z | y=k] on the client; a class it never saw has no local evidence, so
        # its prototype is the global mean mu*_k (the prior), which leaves zeta_k uninformative.
        upsilon, _ = class_means(z_train, data.y_train, head.mu.shape[0], head.mu.detach())
        ph = PersonalizedHead(head.mu, head.b, head.A, upsilon, own.lambda_)
        result = {
            "acc-global": accuracy(head, z_test, data.y_test),
            "acc-global-cov": accuracy(head.covariance_logits, z_test, data.y_test),
        }

        def epochs(step, z, y, opt, n, after_step=None):
            return run_epochs(step, z, y, opt, n, cfg.batch_size, run.rng, after_step)

        with torch.enable_grad():
            fine_tune_(
                ph,
                z_train,
                data.y_train,
                epochs,
                own.personal_epochs,
                own.personal_learning_rate,
                cfg.momentum,
                cfg.weight_decay,
            )
            result["acc-finetune"] = accuracy(ph, z_test, data.y_test)
            if own.lbfgs_cycles:
                refine_biases_(
                    ph,
                    z_train,
                    data.y_train,
                    own.lbfgs_learning_rate,
                    own.lbfgs_max_iter,
                    own.lbfgs_cycles,
                )
        result["accuracy"] = accuracy(ph, z_test, data.y_test)
        return result


PFEDGM = Method(
    "pfedgm",
    PFedGMClient,
    "pFedGM (this paper): Phase 1 as Algorithm 1, Phase 2 personalized head + L-BFGS biases",
    strategy=PFedGM,
    settings=PFedGMSettings,
)

"""pFedGM on a client: Algorithm 1, Phase 1 (`train`) and Phase 2 (`personalize`)."""

from __future__ import annotations

from ..gaussian import GaussianHead
from ..method_settings import PFedGMSettings
from ..models import Model, build_model
from ..phases import personalized_head, train_round
from ..strategies import PFedGM
from .base import ClientPlugin, ClientTask, Method, Personalized, Reply


class PFedGMClient(ClientPlugin):
    """Generator phi + Gaussian head (navigator psi, covariance nu); all three are sent."""

    def build_model(self, image_shape: tuple[int, int, int], num_classes: int) -> Model:
        std = self.settings.navigator_std
        return build_model(image_shape, lambda dim: GaussianHead(num_classes, dim, std))

    def divergence_advice(self) -> str:
        # mu^0 ~ N(0, std^2) puts ||mu_k|| near std sqrt(d), and H's gradient on z,
        # mu_y - sum_i P_i mu_i, grows with it: at std 1 a rate a linear head takes can
        # diverge (MNIST at 0.05 does in round 1, docs/running.md)
        std = self.settings.navigator_std
        return (
            f", or navigator-std ({std:g} now): H's gradient on z grows with ||mu_k||, about "
            "navigator-std * sqrt(d) at the start"
        )

    def _shared(self, task: ClientTask) -> dict:
        """The keyword arguments both phases take from the run: lambda, SGD, batches, RNG."""
        cfg = task.cfg
        return {
            "lambda_": self.settings.lambda_,
            "momentum": cfg.momentum,
            "rng": task.rng,
            "weight_decay": cfg.weight_decay,
            "batch_size": cfg.batch_size,
            "objective_scale": self.settings.objective_scale,
        }

    def train(self, model: Model, task: ClientTask) -> Reply:
        """Phase 1 on client i in round r: `phases.train_round` (Algorithm 1's client step)."""
        data, cfg, settings = task.data, task.cfg, self.settings
        metrics = train_round(
            model.generator,
            model.head,
            (data.x_train, data.y_train),
            **self._shared(task),
            epochs=cfg.local_epochs,
            lr=cfg.learning_rate,
            dropout=model.dropout,
            personalized=settings.personalized_objective,
            decoupling=settings.decoupling,
            prototype_step=settings.prototype_step,
            navigator_lr_scale=settings.navigator_lr_scale,
            head_decay=settings.head_decay,
            rc_input=settings.rc_input,
            gradients=settings.gradient_diagnostics,
        )
        return self.send(model, task, metrics)

    def personalize(self, model: Model, task: ClientTask) -> Personalized:
        """Phase 2: `phases.personalized_head` (by SGD on Eq. LossC, then L-BFGS on its
        biases), with the paper's adaptation ablation points; the client's model is phi* under
        that head (under `adaptation`, the head of that ablation point)."""
        settings, data, cfg = self.settings, task.data, task.cfg
        head, result = personalized_head(
            model.generator,
            model.head,
            (data.x_train, data.y_train),
            (data.x_test, data.y_test),
            **{**self._shared(task), "batch_size": settings.personal_batch_size or cfg.batch_size},
            epochs=settings.personal_epochs,
            lr=settings.personal_learning_rate,
            lbfgs_lr=settings.lbfgs_learning_rate,
            lbfgs_max_iter=settings.lbfgs_max_iter,
            lbfgs_cycles=settings.lbfgs_cycles,
            lbfgs_line_search=settings.lbfgs_line_search,
            adaptation=settings.adaptation,
        )
        result.pop("num-test")  # the ClientApp reports the sizes
        return Personalized(result, Model(model.generator, head))


PFEDGM = Method(
    "pfedgm",
    "pFedGM",
    PFedGMClient,
    "pFedGM (this paper): Phase 1 as Algorithm 1, Phase 2 personalized head + L-BFGS biases",
    strategy=PFedGM,
    settings=PFedGMSettings,
)

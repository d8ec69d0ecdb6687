"""pFedGM on a client: Algorithm 1, Phase 1 (`train`) and Phase 2 (`personalize`)."""

from __future__ import annotations

from pfedgm_app.learning.gaussian import GaussianHead
from pfedgm_app.learning.models import Model, build_model
from pfedgm_app.learning.phases import personalized_head, train_round
from pfedgm_app.runconfig.method_settings import PFedGMSettings
from pfedgm_app.runconfig.readings import Phase1Options, Phase2Options

from .base import ClientPlugin, ClientTask, Personalized, Reply


def gaussian_head(model: Model) -> GaussianHead:
    """`model`'s head, the `GaussianHead` that `PFedGMClient.build_model` gives it."""
    assert isinstance(model.head, GaussianHead)
    return model.head


class PFedGMClient(ClientPlugin):
    """Generator phi + Gaussian head (navigator psi, covariance nu); all three are sent."""

    settings: PFedGMSettings  # what the registry gives it (`methods.METHODS`)

    def build_model(self, image_shape: tuple[int, int, int], num_classes: int) -> Model:
        std = self.settings.navigator_std or None  # 0: 1/sqrt(d)
        return build_model(image_shape, lambda dim: GaussianHead(num_classes, dim, std))

    def divergence_advice(self) -> str:
        # mu^0 ~ N(0, std^2) puts ||mu_k|| near std sqrt(d), and H's gradient on z,
        # mu_y - sum_i P_i mu_i, grows with it: at std 1 a rate a linear head takes can
        # diverge (MNIST at 0.05 does in round 1, docs/running.md)
        std = self.settings.navigator_std
        now = f"{std:g}" if std else "0: 1/sqrt(d)"
        return (
            f", or navigator-std ({now} now): H's gradient on z grows with ||mu_k||, about "
            "navigator-std * sqrt(d) at the start"
        )

    def phase1_options(self, task: ClientTask) -> Phase1Options:
        """Phase 1's options from the run-config: the run's SGD settings, pFedGM's switches."""
        cfg, settings = task.cfg, self.settings
        return Phase1Options(
            lambda_=settings.lambda_,
            learning_rate=cfg.learning_rate,
            momentum=cfg.momentum,
            weight_decay=cfg.weight_decay,
            batch_size=cfg.batch_size,
            objective_scale=settings.objective_scale,
            personalized=settings.personalized_objective,
            decoupling=settings.decoupling,
            prototype_step=settings.prototype_step,
            navigator_lr_scale=settings.navigator_lr_scale,
            head_decay=settings.head_decay,
            rc_input=settings.rc_input,
            gradients=settings.gradient_diagnostics,
        )

    def phase2_options(self, task: ClientTask) -> Phase2Options:
        """Phase 2's options from the run-config: its own SGD and L-BFGS settings, the run's
        momentum and weight decay, its batch size (`personal-batch-size`, 0: the run's)."""
        cfg, settings = task.cfg, self.settings
        return Phase2Options(
            lambda_=settings.lambda_,
            learning_rate=settings.personal_learning_rate,
            momentum=cfg.momentum,
            weight_decay=cfg.weight_decay,
            batch_size=settings.personal_batch_size or cfg.batch_size,
            objective_scale=settings.objective_scale,
            lbfgs_learning_rate=settings.lbfgs_learning_rate,
            lbfgs_max_iter=settings.lbfgs_max_iter,
            lbfgs_cycles=settings.lbfgs_cycles,
            lbfgs_line_search=settings.lbfgs_line_search,
            adaptation=settings.adaptation,
        )

    def train(self, model: Model, task: ClientTask) -> Reply:
        """Phase 1 on client i in round r: `phases.train_round` (Algorithm 1's client step)."""
        data, epochs = (task.data.x_train, task.data.y_train), task.cfg.local_epochs
        options = self.phase1_options(task)
        metrics = train_round(
            model.generator, gaussian_head(model), data, options,
            epochs=epochs, rng=task.rng, dropout=model.dropout,
        )  # fmt: skip
        return self.send(model, task, metrics)

    def personalize(self, model: Model, task: ClientTask) -> Personalized:
        """Phase 2: `phases.personalized_head` (by SGD on Eq. LossC, then L-BFGS on its
        biases), with the paper's adaptation ablation points; the client's model is phi* under
        that head (under `adaptation`, the head of that ablation point)."""
        data = task.data
        train, test = (data.x_train, data.y_train), (data.x_test, data.y_test)
        head, result = personalized_head(
            model.generator, gaussian_head(model), train, test, self.phase2_options(task),
            epochs=self.settings.personal_epochs, rng=task.rng,
        )  # fmt: skip
        result.pop("num-test")  # the ClientApp reports the sizes
        return Personalized(result, Model(model.generator, head))

"""pFedGM on a client: Algorithm 1, Phase 1 (`train`) and Phase 2 (`personalize`)."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import ConfigError, Settings, above, at_least
from ..gaussian import NAVIGATOR_INITS, GaussianHead
from ..models import Model, build_model
from ..phases import ADAPTATIONS, DECOUPLINGS, personalized_head, train_round
from ..strategies import PFedGM
from .base import ClientPlugin, ClientTask, Method, Personalized, Reply


@dataclass(frozen=True)
class PFedGMSettings(Settings):
    """The paper's hyperparameters (Sec. Training Setup): lambda in Eq. (main_loss) and in zeta
    of Eq. (LossC); Phase 2 SGD fine-tuning, then L-BFGS on the biases (`lbfgs-cycles=0` skips
    it). `navigator-init` is the scale of mu^0's Gaussian in psi^0 (`gaussian.NAVIGATOR_INITS`).

    The ablations of Sec. Ablation Studies, each pFedGM by default: `adaptation`
    (`phases.ADAPTATIONS`: NA, FA, GA), `personalized-objective` (false: NPO, Phase 1 on H
    alone; lambda still weighs zeta in Phase 2) and `decoupling` (`phases.DECOUPLINGS`: G.M.,
    G.M.-C., G.M.+D.).
    """

    lambda_: float = at_least(0, 1.0)
    personal_epochs: int = at_least(0, 5)
    personal_learning_rate: float = above(0, 0.05)
    lbfgs_learning_rate: float = above(0, 0.05)
    lbfgs_max_iter: int = at_least(1, 10)
    lbfgs_cycles: int = at_least(0, 5)
    navigator_init: str = "standard"
    adaptation: str = "finetune-lbfgs"
    personalized_objective: bool = True
    decoupling: str = "gm-d"

    def validate(self, run) -> None:
        super().validate(run)
        if self.navigator_init not in NAVIGATOR_INITS:
            raise ConfigError(
                f"navigator-init must be one of {NAVIGATOR_INITS}, got {self.navigator_init!r}"
            )
        for key, value, choices in (
            ("adaptation", self.adaptation, ADAPTATIONS),
            ("decoupling", self.decoupling, DECOUPLINGS),
        ):
            if value not in choices:
                raise ConfigError(f"{key} must be one of {choices}, got {value!r}")


class PFedGMClient(ClientPlugin):
    """Generator phi + Gaussian head (navigator psi, covariance nu); all three are sent."""

    def build_model(self, image_shape: tuple[int, int, int], num_classes: int) -> Model:
        init = self.settings.navigator_init
        return build_model(image_shape, lambda dim: GaussianHead(num_classes, dim, init))

    def _shared(self, task: ClientTask) -> dict:
        """The keyword arguments both phases take from the run: lambda, SGD, batches, RNG."""
        cfg = task.cfg
        return {"lam": self.settings.lambda_, "momentum": cfg.momentum, "rng": task.rng,
                "weight_decay": cfg.weight_decay, "batch_size": cfg.batch_size}  # fmt: skip

    def train(self, model: Model, task: ClientTask) -> Reply:
        """Phase 1 on client i in round r: `phases.train_round` (Algorithm 1's client step)."""
        data, cfg = task.data, task.cfg
        metrics = train_round(
            model.generator, model.head, (data.x_train, data.y_train), **self._shared(task),
            epochs=cfg.local_epochs, lr=cfg.learning_rate, dropout=model.dropout,
            personalized=self.settings.personalized_objective,
            decoupling=self.settings.decoupling,
        )  # fmt: skip
        return self.send(model, task, metrics)

    def personalize(self, model: Model, task: ClientTask) -> Personalized:
        """Phase 2: `phases.personalized_head` (by SGD on Eq. LossC, then L-BFGS on its
        biases), with the paper's adaptation ablation points; the client's model is phi* under
        that head (under `adaptation`, the head of that ablation point)."""
        settings, data = self.settings, task.data
        head, result = personalized_head(
            model.generator, model.head, (data.x_train, data.y_train),
            (data.x_test, data.y_test), **self._shared(task), epochs=settings.personal_epochs,
            lr=settings.personal_learning_rate, lbfgs_lr=settings.lbfgs_learning_rate,
            lbfgs_max_iter=settings.lbfgs_max_iter, lbfgs_cycles=settings.lbfgs_cycles,
            adaptation=settings.adaptation,
        )  # fmt: skip
        result.pop("num-test")  # the ClientApp reports the sizes
        return Personalized(result, Model(model.generator, head))


PFEDGM = Method(
    "pfedgm",
    PFedGMClient,
    "pFedGM (this paper): Phase 1 as Algorithm 1, Phase 2 personalized head + L-BFGS biases",
    strategy=PFedGM,
    settings=PFedGMSettings,
)

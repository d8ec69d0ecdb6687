"""pFedGM on a client: Algorithm 1, Phase 1 (`train`) and Phase 2 (`personalize`)."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import ConfigError, Settings, above, at_least, setting
from ..gaussian import NAVIGATOR_INITS, OBJECTIVE_SCALES, PROTOTYPE_STEPS, GaussianHead
from ..models import Model, build_model
from ..phases import (
    ADAPTATIONS,
    DECOUPLINGS,
    HEAD_DECAY,
    RC_INPUTS,
    personalized_head,
    train_round,
)
from ..strategies import PFedGM
from ..strategies.pfedgm import BIAS_AVERAGES, COVARIANCE_AVERAGES
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

    The readings of Phase 1 the paper leaves open, each named where the code makes it:
    `prototype-step` (`gaussian.PROTOTYPE_STEPS`), `objective-scale` (R_c's and zeta's 1/d,
    `gaussian.OBJECTIVE_SCALES`), `navigator-lr-scale` (mu and b at the body's learning rate
    times it), `head-weight-decay` (`phases.HEAD_DECAY`), `covariance-average` and
    `bias-average` (the server's, `strategies.pfedgm`), `rc-input` (`phases.RC_INPUTS`).
    """

    # upper bounds: far beyond the paper's values (lambda 1, epochs 5, rates 0.05, L-BFGS 10 x 5)
    # and what converges (SGD diverges long before a rate of 100), short of a run without end
    # fmt: off
    lambda_: float = at_least(0, 1.0, at_most=1e4, doc="weight of the personalized objective "
        "R_c (also in zeta of Eq. LossC)")
    personal_epochs: int = at_least(0, 5, at_most=10_000,
        doc="Phase 2: SGD epochs fine-tuning the personalized head")
    personal_learning_rate: float = above(0, 0.05, at_most=100,
        doc="Phase 2: their learning rate")
    lbfgs_learning_rate: float = above(0, 0.05, at_most=100,
        doc="Phase 2: L-BFGS learning rate on the biases")
    lbfgs_max_iter: int = at_least(1, 10, at_most=10_000,
        doc="Phase 2: L-BFGS iterations per cycle")
    lbfgs_cycles: int = at_least(0, 5, at_most=10_000,
        doc="Phase 2: L-BFGS cycles (0 skips the refinement)")
    navigator_init: str = setting("standard", doc="scale of mu^0 in psi^0: `standard` N(0, 1) "
        "per coordinate (Algorithm 1 read literally), `scaled` N(0, 1/d)")
    adaptation: str = setting("finetune-lbfgs", doc="Phase 2, the classifier-adaptation "
        "ablation: the head saved and reported as `accuracy`. `finetune-lbfgs` (GA, pFedGM) "
        "fine-tunes Eq. LossC then L-BFGS on the biases; `finetune` (FA) stops before L-BFGS; "
        "`none` (NA) keeps the global Gaussian classifier (psi*, nu*) with its covariance, no "
        "local term")
    personalized_objective: bool = setting(True, doc="false: the NPO ablation, Phase 1 trains "
        "on H alone (no R_c, no prototypes); unlike lambda = 0, Phase 2 keeps zeta, which lambda "
        "scales (2 lambda/d A_c)")
    decoupling: str = setting("gm-d", doc="Phase 1, the decoupling ablation: `gm-d` (G.M.+D., "
        "pFedGM) navigator on Eq. LossH with nu co-updated; `gm-c` (G.M.-C.) navigator alone, A "
        "stays E; `gm` (G.M.) one Gaussian classifier, H with covariance trained on phi, mu, b "
        "and A jointly")
    # Phase 1's open readings (RESULTS.md, "Phase 1's open readings"), each the first reading
    prototype_step: str = setting("epoch", doc="Phase 1, Algorithm 1's prototype step size "
        '("with a stepsize"): `epoch` n_k(batch)/N_k(client), a moving average over about an '
        "epoch; `batch` 1, the batch's class mean; `none` 0, the round-start means")
    objective_scale: str = setting("mean", doc="the scale of R_c (Eq. LossR) and zeta (Eq. "
        "LossC): `mean` with their 1/d as printed; `sum` without it, on the scale of H's sum "
        "over the d coordinates")
    navigator_lr_scale: float = above(0, 1.0, at_most=1e3,  # of a rate of at most 100 already
        doc="Phase 1: mu and b train at learning-rate times this")
    head_weight_decay: str = setting("mu,b", doc="Phase 1: the head parameters weight-decay "
        "reaches, a comma-separated subset of mu,b,A (empty: none)")
    covariance_average: str = setting("precision", doc="server: A averaged as `precision` (the "
        "arrays as sent) or as `covariance` (the mean of A^-1, inverted back)")
    bias_average: str = setting("arithmetic", doc="server: b averaged as sent (`arithmetic`) or "
        "as `mixture` weights (the log of the mean of exp b)")
    rc_input: str = setting("before-dropout", doc="Phase 1, where a dropout precedes the "
        "navigator (TinyImageNet): R_c reads z `before-dropout` (the paper, Sec. Model Setup) or "
        "`after-dropout`")
    # fmt: on

    def validate(self, run) -> None:
        super().validate(run)
        for key, value, choices in (
            ("navigator-init", self.navigator_init, NAVIGATOR_INITS),
            ("adaptation", self.adaptation, ADAPTATIONS),
            ("decoupling", self.decoupling, DECOUPLINGS),
            ("prototype-step", self.prototype_step, PROTOTYPE_STEPS),
            ("objective-scale", self.objective_scale, OBJECTIVE_SCALES),
            ("covariance-average", self.covariance_average, COVARIANCE_AVERAGES),
            ("bias-average", self.bias_average, BIAS_AVERAGES),
            ("rc-input", self.rc_input, RC_INPUTS),
        ):
            if value not in choices:
                raise ConfigError(f"{key} must be one of {choices}, got {value!r}")
        if unknown := set(self.head_decay) - set(HEAD_DECAY):
            raise ConfigError(
                f"head-weight-decay names {sorted(unknown)}: give a comma-separated subset of "
                f"{','.join(HEAD_DECAY)} (empty: none), got {self.head_weight_decay!r}"
            )

    @property
    def head_decay(self) -> tuple[str, ...]:
        """`head-weight-decay` as names: "mu,b" -> ("mu", "b")."""
        return tuple(n.strip() for n in self.head_weight_decay.split(",") if n.strip())

    def strategy_options(self) -> dict:
        return {"covariance_average": self.covariance_average, "bias_average": self.bias_average}


class PFedGMClient(ClientPlugin):
    """Generator phi + Gaussian head (navigator psi, covariance nu); all three are sent."""

    def build_model(self, image_shape: tuple[int, int, int], num_classes: int) -> Model:
        init = self.settings.navigator_init
        return build_model(image_shape, lambda dim: GaussianHead(num_classes, dim, init))

    def _shared(self, task: ClientTask) -> dict:
        """The keyword arguments both phases take from the run: lambda, SGD, batches, RNG."""
        cfg = task.cfg
        return {"lam": self.settings.lambda_, "momentum": cfg.momentum, "rng": task.rng,
                "weight_decay": cfg.weight_decay, "batch_size": cfg.batch_size,
                "objective_scale": self.settings.objective_scale}  # fmt: skip

    def train(self, model: Model, task: ClientTask) -> Reply:
        """Phase 1 on client i in round r: `phases.train_round` (Algorithm 1's client step)."""
        data, cfg, settings = task.data, task.cfg, self.settings
        metrics = train_round(
            model.generator, model.head, (data.x_train, data.y_train), **self._shared(task),
            epochs=cfg.local_epochs, lr=cfg.learning_rate, dropout=model.dropout,
            personalized=settings.personalized_objective, decoupling=settings.decoupling,
            prototype_step=settings.prototype_step, navigator_lr_scale=settings.navigator_lr_scale,
            head_decay=settings.head_decay, rc_input=settings.rc_input,
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
    "pFedGM",
    PFedGMClient,
    "pFedGM (this paper): Phase 1 as Algorithm 1, Phase 2 personalized head + L-BFGS biases",
    strategy=PFedGM,
    settings=PFedGMSettings,
)

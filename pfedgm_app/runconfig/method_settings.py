"""Each method's own run-config keys (its `Settings`: bounds, meanings, checks) and the parsing of
a run-config, without torch or flwr. The registry (`methods.METHODS`) names each method's
settings group and parses with them (`methods.parse_run_config`); what a method does with its
settings stays in its plug-in's module. This room is below the methods: it imports nothing
from them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .common import RunConfig
from .presets import apply_preset
from .readings import (
    ADAPTATIONS,
    BIAS_AVERAGES,
    COVARIANCE_AVERAGES,
    DECOUPLINGS,
    HEAD_DECAY,
    LBFGS_LINE_SEARCHES,
    OBJECTIVE_SCALES,
    PROTOTYPE_STEPS,
    RC_INPUTS,
)
from .settings import ConfigError, RunView, Settings, above, at_least, setting


@dataclass(frozen=True)
class NoSettings(Settings):
    """A method without hyperparameters of its own."""


@dataclass(frozen=True)
class FineTune(Settings):
    """Local fine-tuning at the end (FedAvgFT, FedBABU): `finetune-epochs` of the whole model
    (`finetune-part=model`) or of the head alone (`head`, the generator frozen)."""

    # fmt: off
    finetune_epochs: int = at_least(0, 5, at_most=10_000,  # 10^4 epochs is a typo
        doc="local fine-tuning epochs at the end")
    finetune_part: str = setting("model", doc="what they tune: `model` (generator and head, as "
        "FedBABU's authors) or `head` (the generator frozen)")
    # fmt: on

    def validate(self, run: RunView) -> None:
        super().validate(run)
        if self.finetune_part not in ("model", "head"):
            raise ConfigError(
                f"finetune-part must be 'model' or 'head', got {self.finetune_part!r}"
            )


@dataclass(frozen=True)
class DittoSettings(Settings):
    prefix = "ditto"
    # 1.0 as tuned in the paper; at 10^4 v is w already
    mu: float = at_least(
        0, 1.0, at_most=1e4, doc="proximal weight mu of the personal model's term mu/2 ||v - w||^2"
    )


@dataclass(frozen=True)
class FedPACSettings(Settings):
    prefix = "fedpac"
    # fmt: off
    lambda_: float = at_least(0, 1.0, at_most=1e4,  # the paper: 1
        doc="weight of the feature alignment (MSE to the global class prototypes)")
    head_epochs: int = at_least(1, 1, at_most=10_000,  # 10^4 epochs is a typo
        doc="head epochs before the `local-epochs` generator epochs of each round")
    head_learning_rate: float = above(0, 0.1, at_most=100,  # SGD diverges long before 100
        doc="learning rate of those head epochs")
    # fmt: on


@dataclass(frozen=True)
class FedRepSettings(Settings):
    """FedRep's local schedule: `fedrep-head-epochs` head epochs, then `local-epochs` generator
    epochs, each round; `fedrep-refit-epochs` head epochs on the final generator at the end."""

    prefix = "fedrep"
    # fmt: off
    head_epochs: int = at_least(1, 1, at_most=10_000, doc="head epochs, generator fixed, before "
        "the `local-epochs` generator epochs of each round (1: PFLlib's `plocal_epochs`, the "
        "paper's FedRep cost; the authors' CIFAR scripts: 10)")
    refit_epochs: int = at_least(0, 10, at_most=10_000, doc="head epochs of the final refit on "
        "the final generator (the authors' max(10, .))")  # max(10, local_ep - rep_ep)
    # fmt: on


@dataclass(frozen=True)
class LGFedAvgSettings(Settings):
    prefix = "lgfedavg"
    # below 1, so that the split happens
    # fmt: off
    warmup_fraction: float = at_least(0, 0.5, below=1, doc="the fraction of `num-server-rounds` "
        "run as FedAvg (every layer global) before the split into global convolutions and local "
        "fully connected layers")
    # fmt: on


@dataclass(frozen=True)
class PFedMeSettings(Settings):
    prefix = "pfedme"
    # fmt: off
    lambda_: float = at_least(0, 5.0, at_most=1e4,
        doc="Moreau-envelope weight lambda (as the paper tuned it)")
    inner_steps: int = at_least(1, 5, at_most=10_000,  # K; the paper: 5
        doc="inner steps per batch on the personal model theta")
    personal_learning_rate: float = above(0, 0.01, at_most=100,  # diverges long before 100
        doc="step size of the inner steps")
    tolerance: float = at_least(0, 0.0, at_most=1e6,  # ||grad h||; beyond 10^6 a typo
        doc="gradient norm at which the inner solve stops early (0: never)")
    local_batches: int = at_least(0, 0, at_most=10**6,  # 10^6 batches is a typo
        doc="0: `local-epochs` epochs a round (the paper's protocol); R > 0: R mini-batches a "
        "round (the authors': 20)")
    # fmt: on


@dataclass(frozen=True)
class PFedFDASettings(Settings):
    prefix = "pfedfda"
    # each fold costs an L-BFGS fit (the authors: 2)
    # fmt: off
    cv_folds: int = at_least(2, 2, at_most=100,
        doc="folds of the cross-validation that picks the interpolation coefficients")
    # fmt: on


@dataclass(frozen=True)
class PFedGMSettings(Settings):
    """The paper's hyperparameters (Sec. Training Setup) as defaults; its ablations (Sec.
    Ablation Studies: `adaptation`, `personalized-objective`, `decoupling`, pFedGM by default)
    and the readings it leaves open (Phase 1's, the navigator's scale, Phase 2's L-BFGS step
    and batch size), each a key whose values `readings.py` lists and whose choice is
    explained where the code makes it (`gaussian`, `adaptation`, `phases`, `strategies.pfedgm`).
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
    lbfgs_line_search: str = setting("none", doc="Phase 2: L-BFGS's step length, `none` (each "
        "step at `lbfgs-learning-rate`, the paper's \"learning rate\") or `strong-wolfe` (a "
        "line search under the strong Wolfe conditions)")
    personal_batch_size: int = at_least(0, 0, at_most=10**6,  # more than any client holds
        doc="Phase 2: the fine-tuning's batch size, which the paper does not give (0: the run's "
        "`batch-size`)")
    navigator_std: float = at_least(0, 0.0, at_most=100,  # ||mu_k|| ~ 100 sqrt(d): a typo
        doc="standard deviation of mu^0's coordinates in psi^0 (Algorithm 1's \"random Gaussian "
        "weights\"): 0 is 1/sqrt(d), a layer's scale (0.088 at d = 128), chosen on validation "
        "at 200 rounds (docs/notes/navigator-std.md); 1 reads the text literally")
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
    # Phase 1's open readings (RESULTS.md, "Why Phase 1 stalls"), each the first reading
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
    gradient_diagnostics: bool = setting(False, doc="Phase 1: also report, at each round's "
        "start, the norms of the gradients of H and lambda R_c on phi and R_c's share of them "
        "(`rounds.jsonl`; one more forward and two backward passes on a batch, about 3 % of a "
        "client's round)")
    # fmt: on

    def validate(self, run: RunView) -> None:
        super().validate(run)
        for key, value, choices in (
            ("adaptation", self.adaptation, ADAPTATIONS),
            ("decoupling", self.decoupling, DECOUPLINGS),
            ("prototype-step", self.prototype_step, PROTOTYPE_STEPS),
            ("objective-scale", self.objective_scale, OBJECTIVE_SCALES),
            ("covariance-average", self.covariance_average, COVARIANCE_AVERAGES),
            ("bias-average", self.bias_average, BIAS_AVERAGES),
            ("rc-input", self.rc_input, RC_INPUTS),
            ("lbfgs-line-search", self.lbfgs_line_search, LBFGS_LINE_SEARCHES),
        ):
            if value not in choices:
                raise ConfigError(f"{key} must be one of {choices}, got {value!r}")
        readings = (self.covariance_average, self.bias_average)
        if run.private and readings != ("precision", "arithmetic"):
            raise ConfigError(
                "under DP nu and b are averaged as sent (the noise is added there): leave "
                "covariance-average='precision' and bias-average='arithmetic'"
            )
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


def settings_groups(methods: Mapping[str, type[Settings]]) -> list[type[Settings]]:
    """Every group of run-config keys: the common ones, then each method's (once each)."""
    groups: list[type[Settings]] = [RunConfig]
    for group in methods.values():
        if group not in groups:
            groups.append(group)
    return groups


def run_config_keys(methods: Mapping[str, type[Settings]]) -> dict[str, Any]:
    """{key: default} of every run-config key (what `pyproject.toml` must declare)."""
    keys: dict[str, Any] = {}
    for group in settings_groups(methods):
        for key, default in group.keys().items():
            if key in keys:
                raise RuntimeError(f"run-config key {key!r} is declared by two settings groups")
            keys[key] = default
    return keys


def parse(
    run_config: Mapping[str, Any], methods: Mapping[str, type[Settings]]
) -> tuple[RunConfig, Settings]:
    """Flower's run-config -> (common settings, the chosen method's settings), `methods` being
    each method's settings group by name.

    A `preset` (`presets.py`) fills the keys left at their defaults. Every key is checked, the
    other methods' too (a bad value is an error even where unused);
    unknown keys are an error. Raises one ConfigError naming the key and how to fix it, before
    any data is loaded or any round runs.
    """
    known = run_config_keys(methods)
    unknown = sorted(set(run_config) - set(known))
    if unknown:
        raise ConfigError(f"unknown run-config key(s) {unknown}; known keys: {sorted(known)}")
    run_config = apply_preset(dict(run_config), known)
    unknown = sorted(set(run_config) - set(known))
    if unknown:
        raise ConfigError(f"preset {run_config['preset']!r} sets unknown key(s) {unknown}")
    cfg = RunConfig.from_run_config(run_config)
    if cfg.method not in methods:
        raise ConfigError(f"unknown method {cfg.method!r}; choose one of {list(methods)}")
    cfg.validate()
    for group in settings_groups(methods)[1:]:
        group.from_run_config(run_config).validate(cfg)
    return cfg, methods[cfg.method].from_run_config(run_config)

"""pFedGM's switches, standard library only: the values of each (the paper's ablations and the
readings of Phase 1 it leaves open, RESULTS.md) and the frozen options objects that carry them,
with the paper's hyperparameters, from the run-config (`method_settings.PFedGMSettings`, read by
`methods.pfedgm`) to the two phases (`phases.train_round`, `phases.personalized_head`): one
typed value each phase takes, checked once when it is built. Each value is explained where the
code makes the choice (`gaussian`, `phases`, `adaptation`, `strategies.pfedgm`); the run-config
check reads them here without importing torch or flwr. The default is the first value of a
reading and the last of an ablation (pFedGM itself).
"""

from __future__ import annotations

from dataclasses import dataclass

OBJECTIVE_SCALES = ("mean", "sum")  # R_c's and zeta's 1/d (gaussian.personalized_objective)
PROTOTYPE_STEPS = ("epoch", "batch", "none")  # upsilon's step size (gaussian.update_prototypes_)
DECOUPLINGS = ("gm", "gm-c", "gm-d")  # the decoupling ablation (phases.train_round)
ADAPTATIONS = ("none", "finetune", "finetune-lbfgs")  # the adaptation ablation (phases)
HEAD_DECAY = ("mu", "b", "A")  # what weight decay may reach in the head (phases.train_round)
RC_INPUTS = ("before-dropout", "after-dropout")  # where R_c reads z (phases.train_round)
COVARIANCE_AVERAGES = ("precision", "covariance")  # A's average (strategies.pfedgm)
BIAS_AVERAGES = ("arithmetic", "mixture")  # b's average (strategies.pfedgm)
LBFGS_LINE_SEARCHES = ("none", "strong-wolfe")  # L-BFGS's steps (adaptation.refine_biases_)


def check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    """One line naming the switch and its values when `value` is none of them."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")


@dataclass(frozen=True)
class PhaseOptions:
    """What both phases take alike: lambda, the scale of R_c and zeta, and SGD's settings
    (Sec. Training Setup). Build `Phase1Options` or `Phase2Options`, not this."""

    lambda_: float = 1.0
    """lambda of Eq. main_loss, H + lambda R_c (Phase 1), and in zeta of Eq. LossC (Phase 2)."""
    learning_rate: float = 0.01
    """SGD's learning rate (Sec. Training Setup: 0.01 for Phase 1)."""
    momentum: float = 0.5
    """SGD's momentum (Sec. Training Setup)."""
    weight_decay: float = 5e-4
    """SGD's weight decay (Sec. Training Setup; in Phase 1 on the head's `head_decay` only)."""
    batch_size: int = 50
    """The batch size where the data are a pair of tensors (Sec. Training Setup; a `DataLoader`
    keeps its own); in Phase 2, of the head's SGD on the features, which the paper does not give."""
    objective_scale: str = "mean"
    """R_c's (Eq. LossR) and zeta's (Eq. LossC) scale: "mean" with their 1/d as printed, "sum"
    without it (`OBJECTIVE_SCALES`, `gaussian.personalized_objective`)."""

    def __post_init__(self) -> None:
        check_choice("objective_scale", self.objective_scale, OBJECTIVE_SCALES)


@dataclass(frozen=True)
class Phase1Options(PhaseOptions):
    """Phase 1 on a client (Algorithm 1, `phases.train_round`): the paper's hyperparameters,
    its decoupling and NPO ablations, and the readings it leaves open, pFedGM's by default."""

    personalized: bool = True
    """False: the NPO ablation (Fig. "weight"), H alone: R_c dropped from Eq. main_loss."""
    decoupling: str = "gm-d"
    """The decoupling ablation (Table "decope", `DECOUPLINGS`): "gm-d" G.M.+D., the navigator
    on Eq. LossH with nu co-updated by Eq. cov_approx (pFedGM); "gm-c" G.M.-C., the navigator
    alone, A stays E; "gm" G.M., H(phi, psi, nu) on phi, mu, b and A jointly."""
    prototype_step: str = "epoch"
    """Algorithm 1's step size of Eq. proto_update ("with a stepsize", `PROTOTYPE_STEPS`):
    "epoch" n_k(batch)/N_k, "batch" 1, "none" 0 (the round-start means)."""
    navigator_lr_scale: float = 1.0
    """mu and b train at `learning_rate` times this (a reading: the paper gives one rate)."""
    head_decay: tuple[str, ...] = ("mu", "b")
    """Which head parameters `weight_decay` reaches (`HEAD_DECAY`): the navigator's mu and b,
    as the generator's weights; A, a precision that decay would shrink, only when named."""
    rc_input: str = "before-dropout"
    """Where R_c (Eq. LossR) reads z when a dropout precedes the navigator (`RC_INPUTS`):
    "before-dropout" as Sec. Model Setup says, or "after-dropout" (the navigator's input)."""
    gradients: bool = False
    """Also report the round-start norms of the gradients of H and lambda R_c on phi and R_c's
    share (`diagnostics`; one more forward and two backward passes on a batch)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "head_decay", tuple(self.head_decay))  # a list given: frozen
        check_choice("decoupling", self.decoupling, DECOUPLINGS)
        check_choice("prototype_step", self.prototype_step, PROTOTYPE_STEPS)
        check_choice("rc_input", self.rc_input, RC_INPUTS)
        if unknown := set(self.head_decay) - set(HEAD_DECAY):
            raise ValueError(f"head_decay names {sorted(unknown)}; choose among {HEAD_DECAY}")


@dataclass(frozen=True)
class Phase2Options(PhaseOptions):
    """Phase 2 on a client (`phases.personalized_head`): fine-tuning the personalized head of
    Eq. LossC, then L-BFGS on its biases, and the paper's adaptation ablation (GA by default)."""

    learning_rate: float = 0.05
    """SGD's learning rate fine-tuning the personalized head (Sec. Training Setup: 0.05)."""
    lbfgs_learning_rate: float = 0.05
    """L-BFGS's learning rate on the biases b (Sec. Training Setup: 0.05)."""
    lbfgs_max_iter: int = 10
    """L-BFGS iterations per cycle (Sec. Training Setup: 10)."""
    lbfgs_cycles: int = 5
    """L-BFGS cycles (Sec. Training Setup: 5); 0 skips the refinement."""
    lbfgs_line_search: str = "none"
    """L-BFGS's step length (`LBFGS_LINE_SEARCHES`): "none", each step at `lbfgs_learning_rate` (the
    paper's "learning rate"), or "strong-wolfe", a line search."""
    adaptation: str = "finetune-lbfgs"
    """The adaptation ablation (Table "adaptation", `ADAPTATIONS`), the head returned and its
    `accuracy`: "finetune-lbfgs" GA (pFedGM), "finetune" FA (no L-BFGS), "none" NA (the global
    Gaussian classifier with its covariance A*)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("adaptation", self.adaptation, ADAPTATIONS)
        check_choice("lbfgs_line_search", self.lbfgs_line_search, LBFGS_LINE_SEARCHES)

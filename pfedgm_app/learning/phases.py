"""pFedGM's two phases on a client, for any generator and any data (torch only).

    from pfedgm_app.learning.gaussian import GaussianHead
    from pfedgm_app.learning.phases import Phase1Options, personalize, train_round

    head = GaussianHead(num_classes, dim)            # navigator psi (mu, b) and covariance nu (A)
    metrics = train_round(generator, head, trainloader)        # Phase 1: one round, in place
    result = personalize(generator, head, trainloader, testloader)  # Phase 2: accuracies
    ph, result = personalized_head(generator, head, trainloader, testloader)  # and the head
    train_round(generator, head, trainloader, Phase1Options(lambda_=0.5), epochs=2)  # options

`generator` is phi: any module mapping a batch of inputs to features z of shape (batch, dim).
Data are either a pair of tensors `(x, y)`, shuffled into batches of the options' `batch_size`
by `rng` (what the app does), or any re-iterable of `(x, y)` batches such as a `DataLoader`,
used as it comes each epoch. Batches are moved to the head's device. Each phase takes its
switches and hyperparameters as one frozen options object (`Phase1Options`, `Phase2Options`,
from `readings`, checked when built), whose defaults are the paper's (Sec. Training Setup) and
pFedGM's; the keywords are how long (`epochs`), the shuffling (`rng`) and the model's
`dropout`. What leaves the client afterwards is the generator's and the head's `state_dict()`;
the prototypes upsilon and the personalized head never do.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F
from torch import nn

from pfedgm_app.runconfig.readings import Phase1Options, Phase2Options

from . import diagnostics
from .adaptation import PersonalizedHead, fine_tune_, refine_biases_
from .gaussian import (
    GaussianHead,
    class_means,
    covariance_objective,
    gaussian_logits,
    personalized_objective,
    update_prototypes_,
)
from .phase_data import Data, features, is_tensor_pair, recording_first, run_data_epochs
from .training import accuracy, make_sgd, run_epochs

# The paper's ablations (Sec. Ablation Studies) as switches; the last value of each is pFedGM.
# Phase 1, Table "decope": "G.M. denotes training without the decoupling mechanism; G.M. - C.
# denotes using the decoupling mechanism but removing the statistic extractor; and G.M. + D.
# represents our proposed method, which employs the decoupling mechanism along with the
# statistic extractor." Read as (`train_round`):
# - "gm": the conventional Gaussian classifier, not decoupled: H(phi, psi, nu) (Eq. H, with
#   the covariance) trained on phi, mu, b and A jointly, as one discriminative head;
# - "gm-c": the navigator alone, H(phi, psi, E) (Eq. LossH), no nu co-update: A stays E;
# - "gm-d": the navigator on Eq. LossH and nu co-updated by Eq. cov_approx (pFedGM)
#   (`readings.DECOUPLINGS`).
# Phase 2, Table "adaptation": NA "applies no personalized classifier head adaptation", FA
# "employs only fine-tuning of the classifier head", GA "further incorporates a fine-grained
# adjustment of b_i following the fine-tuning step" (`personalized_head`,
# `readings.ADAPTATIONS`).
# Readings of Phase 1 the paper leaves open (`train_round`), the first of each the default:
# - which head parameters SGD's weight decay reaches: Sec. Training Setup gives "weight
#   decay=5e-4" for the optimizer and says nothing of the head. mu and b are weights of the
#   navigator, decayed as the generator is (the default); A is a statistic, a precision that decay
#   would shrink toward 0 whatever the data, so it is left out unless named
#   (`readings.HEAD_DECAY`);
# - where R_c reads z when a dropout sits before the navigator (TinyImageNet): "The features
#   used in Eq. (LossR) are extracted before the dropout layer" (Sec. Model Setup), the
#   default; "after-dropout" is the navigator's input (`readings.RC_INPUTS`).


def check_features(z: torch.Tensor, y: torch.Tensor, head: GaussianHead) -> None:
    """One clear line when the generator's output or the labels do not fit the head."""
    num_classes, dim = head.mu.shape
    if z.dim() != 2 or z.shape[1] != dim:
        raise ValueError(
            f"the generator gives features of shape {tuple(z.shape)}, the head expects (batch, "
            f"{dim}): build GaussianHead(num_classes, {z.shape[-1]}) or change the generator"
        )
    if len(y) and not 0 <= int(y.min()) <= int(y.max()) < num_classes:
        raise ValueError(
            f"labels range over [{int(y.min())}, {int(y.max())}] but the head has "
            f"{num_classes} classes: labels must be 0..{num_classes - 1}"
        )


def train_round(
    generator: nn.Module,
    head: GaussianHead,
    data: Data,
    options: Phase1Options = Phase1Options(),
    *,
    epochs: int = 5,
    rng: torch.Generator | None = None,
    dropout: nn.Module | None = None,
) -> dict[str, float]:
    """Phase 1 on client i in round r (Algorithm 1), in place on `generator` and `head`:
    `epochs` epochs of Eq. (main_loss), H(phi, psi, E) + lambda R_c(phi), on phi and psi, with
    Eq. (cov_approx) on nu in the same steps; `options` holds lambda, SGD's settings, the
    ablations and the readings the paper leaves open (`Phase1Options`, pFedGM's by default).

    The prototypes upsilon^r_{i,k} = E[z^r | y=k, c=i] are computed exactly at the start of the
    round (a class absent here takes the navigator's mean mu_k) and updated by each step's batch
    (Eq. proto_update) with the step size `options.prototype_step`. `dropout` (e.g.
    TinyImageNet's) sits between z and the navigator; R_c reads z before it
    (`options.rc_input`). `rng` shuffles tensor data (None: torch's global generator). Returns
    the mean loss, the sample-passes, the seconds of the prototype pass (`seconds-prototypes`)
    and the round's diagnostics (`diagnostics`; the gradient norms with `options.gradients`).

    Under `options.personalized=False` (NPO, H alone) R_c's prototypes are still computed for
    the diagnostics but not timed.
    """
    dropout = dropout if dropout is not None else nn.Identity()
    generator.train(), dropout.train()
    start = time.perf_counter()
    first: list[tuple[torch.Tensor, torch.Tensor]] = []  # the diagnostics' gradient batch
    gradients = options.gradients
    recorded = data if is_tensor_pair(data) or not gradients else recording_first(data, first)
    z, y = features(generator, recorded)
    check_features(z, y, head)
    prototypes, counts = class_means(z, y, head.mu.shape[0], head.mu)
    seconds_prototypes = time.perf_counter() - start if options.personalized else 0.0
    at_start = diagnostics.round_start(head, z, y, prototypes)
    if gradients:
        n = options.batch_size
        xg, yg = (data[0][:n], data[1][:n]) if is_tensor_pair(data) else first[0]
        batch = (xg.to(head.mu.device), yg.to(head.mu.device))
        weight = options.lambda_ if options.personalized else 0.0  # lambda of R_c in the step
        at_start |= diagnostics.gradient_share(
            generator, head, prototypes, batch, weight, options.objective_scale
        )
    del z
    meter = diagnostics.RoundMeter()

    def step(xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        z = generator(xb)
        zd = dropout(z)  # the navigator's input
        if options.decoupling == "gm":  # one Gaussian classifier: H(phi, psi, nu) on all of them
            logits = head.covariance_logits(zd)
        else:  # Eq. LossH (the per-sample constant -1/2 z^T z left out: the same H)
            logits = gaussian_logits(zd, head.mu, head.b, per_sample=False)
        nll = F.cross_entropy(logits, yb, reduction="none")  # H per sample: also saturation's
        shared = nll.mean()
        loss = shared
        zr = z if options.rc_input == "before-dropout" else zd
        r = personalized_objective(zr, yb, prototypes, options.objective_scale)
        if options.personalized:
            loss = loss + options.lambda_ * r
            update_prototypes_(prototypes, zr, yb, counts, options.prototype_step)
        if options.decoupling == "gm-d":
            loss = loss + covariance_objective(zd, yb, head)  # reaches A only
        meter.add(len(yb), **{"loss-shared": shared, "loss-personalized": r})
        meter.add_count("saturated-fraction", diagnostics.saturated(nll))
        return loss

    nav_lr = options.learning_rate * options.navigator_lr_scale

    def decay(name: str) -> float:
        return options.weight_decay if name in options.head_decay else 0.0

    params = [
        {"params": [*generator.parameters()]},
        {"params": [head.mu], "lr": nav_lr, "weight_decay": decay("mu")},
        {"params": [head.b], "lr": nav_lr, "weight_decay": decay("b")},
        {"params": [head.A], "weight_decay": decay("A")},
    ]
    optimizer = make_sgd(params, options.learning_rate, options.momentum, options.weight_decay)
    device = head.mu.device
    metrics = run_data_epochs(
        data, step, optimizer, epochs, options.batch_size, rng, head.project_, device
    )
    return {**metrics, **meter.means(), **at_start, "seconds-prototypes": seconds_prototypes}


def personalized_head(
    generator: nn.Module,
    head: GaussianHead,
    train: Data,
    test: Data,
    options: Phase2Options = Phase2Options(),
    *,
    epochs: int = 5,
    rng: torch.Generator | None = None,
) -> tuple[PersonalizedHead, dict[str, float]]:
    """Phase 2 on a client: phi frozen, the personalized head (Eq. LossC) fitted by SGD on the
    client's features (`epochs` at `options.learning_rate`), then its biases refined by L-BFGS
    (`options.lbfgs_cycles` cycles of `lbfgs_max_iter` iterations at `lbfgs_learning_rate`; 0
    cycles skips it); `options` holds these, lambda and the adaptation ablation
    (`Phase2Options`, pFedGM's by default). `rng` shuffles the features (None: torch's global
    generator). `generator` and `head` are left as they were.

    Returns the personalized head (on z = generator(x): `generator` then this head is the
    client's model) and fractions in [0, 1] on `test`: `accuracy` (the personalized head), and
    the paper's adaptation ablation: `acc-global` (the global navigator alone),
    `acc-global-cov` (with the global covariance), `acc-finetune` (after fine-tuning, before
    L-BFGS); and `num-test`.

    `options.adaptation` stops Phase 2 early, so that the returned head and its `accuracy` are
    the ablation point: "finetune-lbfgs" is GA (pFedGM), "finetune" is FA (no L-BFGS), "none"
    is NA: the global Gaussian classifier (phi*, psi*, nu*) as Phase 1 returns it, with its
    covariance A* (the head Eq. LossC starts from, without the local term zeta), so `accuracy`
    is `acc-global-cov`; the navigator alone assumes A = E, which the paper calls "the loss of
    covariance information" that the statistic extractor compensates.
    """
    adaptation = options.adaptation
    z_train, y_train = features(generator, train)
    z_test, y_test = features(generator, test)
    check_features(z_train, y_train, head)
    check_features(z_test, y_test, head)
    # upsilon*_k = E[z | y=k] on the client; a class it never saw has no local evidence, so
    # its prototype is the global mean mu*_k (the prior), which leaves zeta_k uninformative.
    upsilon, _ = class_means(z_train, y_train, head.mu.shape[0], head.mu.detach())
    # NA: lambda 0 drops zeta, and untrained offsets leave the global head with A*
    lambda_ = 0.0 if adaptation == "none" else options.lambda_
    ph = PersonalizedHead(head.mu, head.b, head.A, upsilon, lambda_, options.objective_scale)
    result = {
        "acc-global": accuracy(head, z_test, y_test),
        "acc-global-cov": accuracy(head.covariance_logits, z_test, y_test),
    }

    def run(step, z, y, opt, n, after_step=None):
        return run_epochs(step, z, y, opt, n, options.batch_size, rng, after_step)

    with torch.enable_grad():
        if adaptation != "none":
            sgd = options.learning_rate, options.momentum, options.weight_decay
            fine_tune_(ph, z_train, y_train, run, epochs, *sgd)
            result["acc-finetune"] = accuracy(ph, z_test, y_test)
        if options.lbfgs_cycles and adaptation == "finetune-lbfgs":
            lbfgs = options.lbfgs_learning_rate, options.lbfgs_max_iter, options.lbfgs_cycles
            refine_biases_(ph, z_train, y_train, *lbfgs, options.lbfgs_line_search)
    result["accuracy"] = accuracy(ph, z_test, y_test)
    result["num-test"] = float(len(y_test))
    return ph, result


def personalize(
    generator: nn.Module,
    head: GaussianHead,
    train: Data,
    test: Data,
    options: Phase2Options = Phase2Options(),
    *,
    epochs: int = 5,
    rng: torch.Generator | None = None,
) -> dict[str, float]:
    """Phase 2's accuracies on `test`, for a client that keeps no model (`personalized_head`,
    whose arguments these are)."""
    return personalized_head(generator, head, train, test, options, epochs=epochs, rng=rng)[1]

"""Methods that split the model into a body (the generator) and a head and treat them apart."""

from __future__ import annotations

from ..models import Model
from ..training import frozen, supervised_step
from .base import ClientRun, Method


def head_keys(model: Model) -> list[str]:
    return [k for k in model.state_dict() if k.startswith("head.")]


def body_keys(model: Model) -> list[str]:
    return [k for k in model.state_dict() if k.startswith("generator.")]


class FedPer(Method):
    """FedPer (Arivazhagan et al., 2019): the body (base layers) is averaged, the head
    (personalization layers) stays on each client; both train together locally. A client is
    evaluated with its own head on the final global body.
    """

    name = "fedper"

    def kept_keys(self, model: Model) -> list[str]:
        return head_keys(model)


class LGFedAvg(Method):
    """LG-FedAvg (Liang et al., 2020): local representation (the body stays on each client),
    global head (averaged); both train together locally. Evaluated with the client's own body on
    the final global head.
    """

    name = "lgfedavg"

    def kept_keys(self, model: Model) -> list[str]:
        return body_keys(model)


class FedBABU(Method):
    """FedBABU (Oh et al., 2022): only the body is trained and averaged; the head keeps its random
    initialization during federated training, and each client fine-tunes the head
    (`finetune-epochs`) on its data before evaluation.
    """

    name = "fedbabu"

    def train(self, model: Model, run: ClientRun) -> dict:
        with frozen(model.head):
            return run.epochs(
                supervised_step(model), model.generator.parameters(), run.cfg.local_epochs
            )

    def personalize(self, model: Model, run: ClientRun) -> dict:
        global_acc = super().personalize(model, run)["accuracy"]
        with frozen(model.generator):
            run.epochs(supervised_step(model), model.head.parameters(), run.cfg.finetune_epochs)
        return {**super().personalize(model, run), "acc-global": global_acc}


class FedRep(Method):
    """FedRep (Collins et al., 2021): each round, the client first trains its local head with the
    received body fixed, then the body with the head fixed, and sends the body only; the head
    never leaves the client. Of the `local-epochs`, the last `fedrep-body-epochs` (1, as in the
    authors' code: `local_rep_ep`) train the body and the others the head.
    """

    name = "fedrep"

    def kept_keys(self, model: Model) -> list[str]:
        return head_keys(model)

    def train(self, model: Model, run: ClientRun) -> dict:
        step, body_epochs = supervised_step(model), run.cfg.fedrep_body_epochs
        with frozen(model.generator):
            run.epochs(step, model.head.parameters(), run.cfg.local_epochs - body_epochs)
        with frozen(model.head):
            return run.epochs(step, model.generator.parameters(), body_epochs)

"""Methods that split the model into a body (the generator) and a head and treat them apart."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import ConfigError, RunConfig, Settings
from ..models import Model
from ..training import frozen, supervised_step
from .base import ClientPlugin, ClientRun, Method, Reply
from .fedavg import FineTune


def head_keys(model: Model) -> list[str]:
    return [k for k in model.state_dict() if k.startswith("head.")]


def body_keys(model: Model) -> list[str]:
    return [k for k in model.state_dict() if k.startswith("generator.")]


class FedPerClient(ClientPlugin):
    """FedPer (Arivazhagan et al., 2019): the body (base layers) is averaged, the head
    (personalization layers) stays on each client; both train together locally. A client is
    evaluated with its own head on the final global body.
    """

    def kept_keys(self, model: Model) -> list[str]:
        return head_keys(model)


class LGFedAvgClient(ClientPlugin):
    """LG-FedAvg (Liang et al., 2020): local representation (the body stays on each client),
    global head (averaged); both train together locally. Evaluated with the client's own body on
    the final global head.
    """

    def kept_keys(self, model: Model) -> list[str]:
        return body_keys(model)


class FedBABUClient(ClientPlugin):
    """FedBABU (Oh et al., 2022): only the body is trained and averaged; the head keeps its random
    initialization during federated training, and each client fine-tunes the head
    (`finetune-epochs`) on its data before evaluation.
    """

    def train(self, model: Model, run: ClientRun) -> Reply:
        with frozen(model.head):
            metrics = run.epochs(
                supervised_step(model), model.generator.parameters(), run.cfg.local_epochs
            )
        return self.send(model, run, metrics)

    def personalize(self, model: Model, run: ClientRun) -> dict:
        global_acc = super().personalize(model, run)["accuracy"]
        with frozen(model.generator):
            step = supervised_step(model)
            run.epochs(step, model.head.parameters(), self.settings.finetune_epochs)
        return {**super().personalize(model, run), "acc-global": global_acc}


@dataclass(frozen=True)
class FedRepSettings(Settings):
    prefix = "fedrep"
    body_epochs: int = 1  # of the `local-epochs`; the others train the head

    def validate(self, run: RunConfig) -> None:
        if not 1 <= self.body_epochs <= run.local_epochs:
            raise ConfigError(
                f"fedrep-body-epochs must lie in [1, local-epochs={run.local_epochs}], "
                f"got {self.body_epochs}"
            )


class FedRepClient(ClientPlugin):
    """FedRep (Collins et al., 2021): each round, the client first trains its local head with the
    received body fixed, then the body with the head fixed, and sends the body only; the head
    never leaves the client. Of the `local-epochs`, the last `fedrep-body-epochs` (1, as in the
    authors' code: `local_rep_ep`) train the body and the others the head.
    """

    def kept_keys(self, model: Model) -> list[str]:
        return head_keys(model)

    def train(self, model: Model, run: ClientRun) -> Reply:
        step, body_epochs = supervised_step(model), self.settings.body_epochs
        with frozen(model.generator):
            run.epochs(step, model.head.parameters(), run.cfg.local_epochs - body_epochs)
        with frozen(model.head):
            metrics = run.epochs(step, model.generator.parameters(), body_epochs)
        return self.send(model, run, metrics)


FEDPER = Method(
    "fedper",
    FedPerClient,
    "FedPer (Arivazhagan et al., 2019): global body, local head (never sent)",
    sends=("generator",),
)
LGFEDAVG = Method(
    "lgfedavg",
    LGFedAvgClient,
    "LG-FedAvg (Liang et al., 2020): local body (never sent), global head",
    sends=("head",),
)
FEDBABU = Method(
    "fedbabu",
    FedBABUClient,
    "FedBABU (Oh et al., ICLR 2022): body trained with the randomly initialized head fixed; "
    "head fine-tuned `finetune-epochs` (5) per client at the end",
    settings=FineTune,
)
FEDREP = Method(
    "fedrep",
    FedRepClient,
    "FedRep (Collins et al., ICML 2021): per round, head epochs with the body fixed, then "
    "`fedrep-body-epochs` (1) body epochs with the head fixed; only the body is sent",
    settings=FedRepSettings,
    sends=("generator",),
)

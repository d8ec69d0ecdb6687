"""FedAvg and the two baselines built from it with no new training code: FedAvgFT and Local."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import Settings, at_least
from ..models import Model
from ..training import supervised_step
from .base import ClientPlugin, ClientRun, Method


@dataclass(frozen=True)
class FineTune(Settings):
    """Local fine-tuning at the end (FedAvgFT: whole model; FedBABU: head)."""

    finetune_epochs: int = at_least(0, 5)


class FedAvgClient(ClientPlugin):
    """McMahan et al. 2017: the global model, evaluated on each client's test split."""


class FedAvgFTClient(ClientPlugin):
    """FedAvg, then `finetune-epochs` (default 5) local epochs of the whole model per client."""

    def personalize(self, model: Model, run: ClientRun) -> dict:
        global_acc = super().personalize(model, run)["accuracy"]
        run.epochs(supervised_step(model), model.parameters(), self.settings.finetune_epochs)
        return {**super().personalize(model, run), "acc-global": global_acc}


class LocalClient(ClientPlugin):
    """No communication: every parameter stays on the client (none is ever sent).

    A client trains `local-epochs` on its own model in each round it is sampled, the same
    schedule as the federated methods, so it gets the same number of local epochs in total.
    """

    def kept_keys(self, model: Model) -> list[str]:
        return list(model.state_dict())


FEDAVG = Method(
    "fedavg",
    FedAvgClient,
    "FedAvg (McMahan et al., 2017): the global model evaluated on each client's test split",
)
FEDAVGFT = Method(
    "fedavgft",
    FedAvgFTClient,
    "FedAvg, then `finetune-epochs` (5) local epochs of the whole model on each client",
    settings=FineTune,
)
LOCAL = Method(
    "local",
    LocalClient,
    "no communication: each client trains its own model `local-epochs` whenever sampled",
    sends=(),
)

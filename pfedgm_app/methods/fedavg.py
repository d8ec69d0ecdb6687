"""FedAvg and the two baselines built from it with no new training code: FedAvgFT and Local."""

from __future__ import annotations

from ..models import Model
from ..training import supervised_step
from .base import ClientRun, Method


class FedAvg(Method):
    """McMahan et al. 2017: the global model, evaluated on each client's test split."""

    name = "fedavg"


class FedAvgFT(Method):
    """FedAvg, then `finetune-epochs` (default 5) local epochs of the whole model per client."""

    name = "fedavgft"

    def personalize(self, model: Model, run: ClientRun) -> dict:
        global_acc = super().personalize(model, run)["accuracy"]
        run.epochs(supervised_step(model), model.parameters(), run.cfg.finetune_epochs)
        return {**super().personalize(model, run), "acc-global": global_acc}


class Local(Method):
    """No communication: every parameter stays on the client (none is ever sent).

    A client trains `local-epochs` on its own model in each round it is sampled, the same
    schedule as the federated methods, so it gets the same number of local epochs in total.
    """

    name = "local"

    def kept_keys(self, model: Model) -> list[str]:
        return list(model.state_dict())

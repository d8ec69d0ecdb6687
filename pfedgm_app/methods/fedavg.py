"""FedAvg and the two baselines built from it with no new training code: FedAvgFT and Local.

Reference: cj-mclaughlin/pFedFDA's baselines, `clients/client_fedavg.py: ClientFedAvg.train`,
`clients/client_local.py: ClientLocal` and, for FedAvgFT, `servers/server_fedavg.py:
ServerFedAvg.evaluate_personalized` (the global model trained `local_epochs` on each client
before its evaluation; here `finetune-epochs`, 5 by default, the same).
"""

from __future__ import annotations

from pfedgm_app.learning.models import Model
from pfedgm_app.learning.training import frozen, supervised_step
from pfedgm_app.runconfig.method_settings import FineTune

from .base import ClientPlugin, ClientTask, Personalized, accuracy_on_test


class FedAvgClient(ClientPlugin):
    """McMahan et al. 2017: the global model, evaluated on each client's test split."""


class FedAvgFTClient(ClientPlugin):
    """FedAvg, then `finetune-epochs` (default 5) local epochs of the whole model per client."""

    settings: FineTune  # what the registry gives it (`methods.METHODS`)

    def personalize(self, model: Model, task: ClientTask) -> Personalized:
        """Fine-tune (`FineTune`), then evaluate; `acc-global` is the model before it."""
        global_acc = accuracy_on_test(model, task)
        fine_tune(model, task, self.settings.finetune_epochs, self.settings.finetune_part)
        return Personalized(
            {"accuracy": accuracy_on_test(model, task), "acc-global": global_acc}, model
        )


def fine_tune(model: Model, task: ClientTask, epochs: int, part: str = "model") -> None:
    """`epochs` of cross-entropy on the whole model (`model`) or on the head alone (`head`,
    the generator frozen): FedAvgFT's and FedBABU's fine-tuning, FedRep's head epochs."""
    if part == "head":
        with frozen(model.generator):
            task.epochs(supervised_step(model), model.head.parameters(), epochs)
    else:
        task.epochs(supervised_step(model), model.parameters(), epochs)


class LocalClient(ClientPlugin):
    """No communication: every parameter stays on the client (none is ever sent).

    A client trains `local-epochs` on its own model in each round it is sampled, the same
    schedule as the federated methods, so it gets the same number of local epochs in total.
    """

    sends = ()

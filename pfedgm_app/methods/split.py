"""Methods that split the model into the generator and a head and treat them apart (the
baselines' papers call the generator the body, base or representation)."""

from __future__ import annotations

from pfedgm_app.learning.models import Model
from pfedgm_app.learning.training import frozen, supervised_step
from pfedgm_app.runconfig.method_settings import FedRepSettings, LGFedAvgSettings

from .base import ClientPlugin, ClientTask, Personalized, Reply, accuracy_on_test
from .fedavg import FedAvgFTClient, fine_tune


class FedPerClient(ClientPlugin):
    """FedPer (Arivazhagan et al., 2019): the generator (base layers) is averaged, the head
    (personalization layers) stays on each client; both train together locally. A client is
    evaluated with its own head on the final global generator.

    Reference (no official code): PFLlib, `system/flcore/clients/clientper.py: clientPer`
    (`set_parameters` copies the base only) and `servers/serverper.py: FedPer.receive_models`.
    """

    sends = ("generator",)


class LGFedAvgClient(ClientPlugin):
    """LG-FedAvg (Liang et al., 2020): global convolution layers (averaged), local fully connected
    layers (the rest of the generator and the head, never sent); both train together locally.
    The first `lgfedavg-warmup-fraction` of the rounds are plain FedAvg (every layer global):
    the split starts from a FedAvg-trained model. Evaluated with each client's own local layers
    on the final global convolutions (a client never sampled after the split keeps the
    FedAvg-trained ones).

    Reference: pliang279/LG-FedAvg, `main_lg.py` (`w_glob_keys` = the last `num_layers_keep` = 2
    entries of `CNNCifar.weight_keys`: conv1 and conv2; fc1, fc2, fc3 local) and its mandatory
    `--load_fed` checkpoint of `main_fed.py` (the README: 1200 FedAvg rounds, then 200 LG
    rounds). Departures: within the paper's fixed round budget, half the rounds warm up by
    default; the authors pick each client's best round by its test accuracy, here the last
    round is evaluated as for every method.
    """

    settings: LGFedAvgSettings  # what the registry gives it (`methods.METHODS`)

    sends = ("convolutions",)

    def warm(self, task: ClientTask) -> bool:
        """Whether this round is one of the FedAvg rounds before the split (the first
        `lgfedavg-warmup-fraction` of `num-server-rounds`, rounded down)."""
        warmup = int(self.settings.warmup_fraction * task.cfg.num_server_rounds)
        return 0 < task.server_round <= warmup

    def train(self, model: Model, task: ClientTask) -> Reply:
        if self.warm(task):  # FedAvg: nothing kept, everything sent
            metrics = task.epochs(supervised_step(model), model.parameters(), task.cfg.local_epochs)
            return Reply(dict(model.state_dict()), metrics, {})
        return super().train(model, task)


class FedBABUClient(FedAvgFTClient):
    """FedBABU (Oh et al., 2022): only the generator is trained and averaged; the head keeps its
    random initialization during federated training; at the end each client fine-tunes the whole
    model (`finetune-epochs`) on its data before evaluation.

    Reference: jhoon-oh/FedBABU, `main_fed.py` (`local_upt_part='body'`, head lr 0) and the
    personalization cell of `analysis.ipynb` (5 epochs of generator and head); PFLlib's
    `clientbabu.py: fine_tune` also tunes base and head (`finetune-part=head`: the head only).
    Departure: the fine-tuning uses the protocol's SGD (lr 0.01, momentum 0.5, weight decay
    5e-4), as FedAvgFT does, where the authors' notebook uses lr 1e-3, momentum 0.9, no weight
    decay.
    """

    def train(self, model: Model, task: ClientTask) -> Reply:
        with frozen(model.head):
            metrics = task.epochs(
                supervised_step(model), model.generator.parameters(), task.cfg.local_epochs
            )
        return self.send(model, task, metrics)


class FedRepClient(ClientPlugin):
    """FedRep (Collins et al., 2021): each round, the client first trains its local head with the
    received generator fixed (`fedrep-head-epochs`), then the generator with the head fixed
    (`local-epochs`, the protocol's), and sends the generator only; the head never leaves the
    client. At the end every client refits its head on the final global generator
    (`fedrep-refit-epochs`) before evaluation.

    Reference: lgcollins/FedRep, `models/Update.py: LocalUpdate.train` (head epochs first, then
    `local_rep_ep` generator epochs; `last=True`: head only for max(10, .) epochs) and
    `main_fedrep.py` (a final round over every client). Defaults: the generator gets the
    protocol's 5 epochs; the head 1 epoch per round, as PFLlib's `clientrep.py`
    (`plocal_epochs=1`), which matches the paper's FedRep cost; the authors' CIFAR scripts run 10
    head epochs (`--local_ep 15 --local_rep_ep 5`): `fedrep-head-epochs=10`. Departure: the
    protocol's SGD for both parts (the authors' momentum is 0.5 too, weight decay 1e-4 on weights
    only).
    """

    settings: FedRepSettings  # what the registry gives it (`methods.METHODS`)

    sends = ("generator",)

    def train(self, model: Model, task: ClientTask) -> Reply:
        step = supervised_step(model)
        fine_tune(model, task, self.settings.head_epochs, "head")
        with frozen(model.head):
            metrics = task.epochs(step, model.generator.parameters(), task.cfg.local_epochs)
        return self.send(model, task, metrics)

    def personalize(self, model: Model, task: ClientTask) -> Personalized:
        global_acc = accuracy_on_test(model, task)  # its last head, the final generator
        fine_tune(model, task, self.settings.refit_epochs, "head")
        metrics = {"accuracy": accuracy_on_test(model, task), "acc-global": global_acc}
        return Personalized(metrics, model)

"""FedPAC (Xu, Tong & Huang, ICLR 2023): feature alignment + classifier collaboration.

Each round a client (1) extracts its feature statistics (V_i, H_i) with the received
generator, (2) trains its head for `fedpac-head-epochs` (1) at `fedpac-head-learning-rate` (0.1)
with the generator fixed, (3) trains the generator for `local-epochs` with the head fixed on
cross-entropy plus `fedpac-lambda` * MSE(z, c_y), c_y the server's global prototype of class y
(the client's own class mean from the start of the round where the server has none; no
alignment in the first round), and (4) sends the generator (averaged by the server) plus, in
the extras record, its head, its class means after training with their counts, and (V_i, H_i).
The server combines the heads per client (`strategies.FedPAC`) and sends client i its
combination with its next message.
Reference: JianXu95/FedPAC, `methods/fedpac.py: LocalUpdate_FedPAC` (`statistics_extraction`,
`local_training`) and `running.py: train_round_fedpac` with `tools.py: get_head_agg_weight`
(the server's combination); these are its settings. Departure: the authors use lr 0.02 for the
generator on CIFAR; the paper's protocol fixes 0.01 for every method, kept here. On TinyImageNet
the paper reports the better of FedPAC on z before and after the dropout that precedes the head,
chosen on the test clients; here the alignment and the prototypes read z before it, as pFedGM's
R_c does (`learning.models.TinyImageNetCNN`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from pfedgm_app.learning.gaussian import class_means
from pfedgm_app.learning.models import Model
from pfedgm_app.learning.training import apply_batched, frozen, supervised_step
from pfedgm_app.protocol import wire
from pfedgm_app.runconfig.method_settings import FedPACSettings

from .base import ClientPlugin, ClientTask, Personalized, Reply


def feature_statistics(
    z: torch.Tensor, y: torch.Tensor, num_classes: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """FedPAC's (V_i, H_i) from features z (N, d) with labels y, and the class means they use
    (zero for absent classes).

    H_i[k] = p_k mu_k (zero for absent classes) and
    V_i = 1/N sum_k [p_k E_k ||z||^2 - p_k^2 ||mu_k||^2], with p_k = N_k / N: the formula of the
    authors' `statistics_extraction`, including its p_k^2 on the mean term and its final 1/N.
    """
    means, counts = class_means(z, y, num_classes, z.new_zeros(z.shape[1]))
    p = counts / len(y)
    sq = z.new_zeros(num_classes).index_add_(0, y, (z * z).sum(1))
    mean_sq = sq / counts.clamp(min=1)
    v = (p * mean_sq - p**2 * (means * means).sum(1)).sum() / len(y)
    return v, p[:, None] * means, means


class FedPACClient(ClientPlugin):
    settings: FedPACSettings  # what the registry gives it (`methods.METHODS`)
    sends = ("generator",)  # the head goes in the extras, to be combined, never averaged

    def train(self, model: Model, task: ClientTask) -> Reply:
        settings, generator, head = self.settings, model.generator, model.head
        x, y, num_classes = task.data.x_train, task.data.y_train, task.data.num_classes
        self._receive_head(model, task)
        z = apply_batched(generator, x)
        variance, h_ref, local = feature_statistics(z, y, num_classes)
        targets = None
        if wire.PROTOS in task.received:  # from round 2 on
            known = task.received[wire.PROTOS_COUNT] > 0
            targets = torch.where(known[:, None], task.received[wire.PROTOS], local)

        step = supervised_step(model)
        with frozen(generator):
            task.epochs(step, head.parameters(), settings.head_epochs, settings.head_learning_rate)

        def aligned_step(xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
            zb = generator(xb)
            loss = F.cross_entropy(head(model.dropout(zb)), yb)
            if targets is not None:
                loss = loss + settings.lambda_ * F.mse_loss(zb, targets[yb])
            return loss

        with frozen(head):
            metrics = task.epochs(aligned_step, generator.parameters(), task.cfg.local_epochs)
        protos, counts = class_means(apply_batched(generator, x), y, num_classes, local)
        weights = model.state_dict()
        extras = {
            **{k: weights[k] for k in model.part_keys("head")},
            wire.PROTOS: protos,
            wire.CLASS_COUNTS: counts,
            wire.VARIANCE: variance.reshape(1),
            wire.H_REF: h_ref,
        }
        return self.send(model, task, metrics, extras)

    def personalize(self, model: Model, task: ClientTask) -> Personalized:
        """The client's combined head (from its last round) on the final global generator."""
        self._receive_head(model, task)
        return super().personalize(model, task)

    @staticmethod
    def _receive_head(model: Model, task: ClientTask) -> None:
        """Load the head the server combined for this client (absent before its first round)."""
        combined = {k: v for k, v in task.received.items() if k.startswith("head.")}
        if combined:
            model.load_state_dict(combined, strict=False)

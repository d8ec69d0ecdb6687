"""Server side of pFedGM (Algorithm 1): weighted averaging of the generator phi, the navigator
psi = {mu_k, b_k} and the diagonal covariance nu = {A_k}, then the personalize round.

Usable by any Flower project with its own torch generator. Requirements on the ArrayRecord:
the navigator and covariance arrays are named by `navigator_keys` / `covariance_keys`
(default: `head.mu`, `head.b`, `head.A`, the names of `pfedgm_app.learning.gaussian.GaussianHead`
mounted as `model.head`); every other array is the generator. The ClientApp trains with the
losses of `pfedgm_app.learning.gaussian` and answers `train` and `train.personalize` messages.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
from flwr.app import Array, ArrayRecord, RecordDict

from pfedgm_app.protocol import wire
from pfedgm_app.runconfig.readings import BIAS_AVERAGES, COVARIANCE_AVERAGES, check_choice

# Algorithm 1: "Server updates phi, psi, nu using a weighted average" of the clients' values,
# without saying in which coordinates b and A are averaged. The readings:
# - A (`covariance_average`): "precision", the arithmetic mean of the precisions A_k, the
#   arrays as sent (the default); "covariance", the mean of the covariances S_k = A_k^-1,
#   i.e. the weighted harmonic mean of A.
# - b (`bias_average`): "arithmetic", the mean of b_k = log(pi_k / |S_k|^(1/2)) as sent (the
#   default); "mixture", the log of the mean of exp(b_k) = pi_k / |S_k|^(1/2), i.e. averaging
#   the mixture weights pi_k (at equal S_k) rather than their logarithms
#   (`readings.COVARIANCE_AVERAGES`, `readings.BIAS_AVERAGES`).
from .contract import MAX_ABS_VALUE
from .personalized_fedavg import PersonalizedFedAvg


class PFedGM(PersonalizedFedAvg):
    """pFedGM: FedAvg over (phi, psi, nu) weighted by `num-examples`, with nu kept positive.

    Parameters
    ----------
    navigator_keys, covariance_keys : names of psi's and nu's arrays in the ArrayRecord.
    bias_key : the biases b among `navigator_keys` (`bias_average` applies to it).
    covariance_average, bias_average : in which coordinates A and b are averaged
        (`COVARIANCE_AVERAGES`, `BIAS_AVERAGES`; the defaults average the arrays as sent).
    **kwargs : any argument of `PersonalizedFedAvg` / `flwr.serverapp.strategy.FedAvg`
        (`fraction_train` is the paper's participation rate q).
    """

    def __init__(
        self,
        *,
        navigator_keys: Sequence[str] = ("head.mu", "head.b"),
        covariance_keys: Sequence[str] = ("head.A",),
        bias_key: str = "head.b",
        covariance_average: str = "precision",
        bias_average: str = "arithmetic",
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        check_choice("covariance_average", covariance_average, COVARIANCE_AVERAGES)
        check_choice("bias_average", bias_average, BIAS_AVERAGES)
        self.navigator_keys = tuple(navigator_keys)
        self.covariance_keys = tuple(covariance_keys)
        self.bias_key = bias_key
        self.covariance_average, self.bias_average = covariance_average, bias_average

    @property
    def default_metric_keys(self) -> tuple[str, ...]:
        """The train metrics and Phase 1's diagnostics (`wire.PFEDGM_METRICS`)."""
        return wire.TRAIN_METRICS + wire.PFEDGM_METRICS

    def options(self) -> dict[str, object]:
        return {**super().options(), "nu averaged as": self.covariance_average,
                "b averaged as": self.bias_average}  # fmt: skip

    def average_transform(self) -> dict[str, tuple[Callable, Callable]]:
        """{key: (to, back)}: the arrays averaged as to(x), the mean mapped back by back()."""
        transforms: dict[str, tuple[Callable, Callable]] = {}
        if self.covariance_average == "covariance":
            transforms.update({k: (np.reciprocal, np.reciprocal) for k in self.covariance_keys})
        if self.bias_average == "mixture":
            transforms[self.bias_key] = (np.exp, np.log)
        return transforms

    def privatized(self, update: dict, sent: dict) -> dict:
        """Under DP the noise may push a precision A below zero: each entry is kept at least
        half its value sent, so nu stays positive (post-processing: no privacy spent)."""
        for key in self.covariance_keys:
            if key in update and key in sent:
                floor = np.asarray(sent[key]) / 2
                update[key] = np.maximum(update[key], floor).astype(update[key].dtype)
        return update

    def check_initial(self, arrays: ArrayRecord) -> None:
        """psi's and nu's arrays must be there, nu^0 positive."""
        missing = [k for k in self.navigator_keys + self.covariance_keys if k not in arrays]
        if missing:
            raise ValueError(
                f"initial arrays lack the pFedGM head keys {missing}; name them with "
                f"navigator_keys= / covariance_keys= (found: {sorted(arrays)})"
            )
        for key in self.covariance_keys:
            if not (arrays[key].numpy() > 0).all():
                raise ValueError(f"covariance '{key}' must start positive (nu^0 = identity)")

    def reject_reason(self, content: RecordDict) -> str | None:
        record: Mapping[str, Array] = content.array_records.get(self.arrayrecord_key, {})
        return self._covariance_problem(record)

    def aggregate_problem(self, arrays: ArrayRecord) -> str | None:
        return super().aggregate_problem(arrays) or self._covariance_problem(arrays)

    def _covariance_problem(self, record: Mapping[str, Array]) -> str | None:
        """nu (the diagonal precision A) must stay positive, and its reciprocal (the variance,
        which the covariance reading averages) within the value bound every array keeps: a
        precision of 1e-30 would otherwise outweigh every other client's in that mean."""
        for key in self.covariance_keys:
            if key not in record:
                continue
            values = np.asarray(record[key].numpy())
            if not (values > 0).all():
                return f"covariance '{key}' has non-positive entries"
            if values.size and values.min() < 1 / MAX_ABS_VALUE:
                return f"covariance '{key}' has entries below {1 / MAX_ABS_VALUE:g}"
        return None

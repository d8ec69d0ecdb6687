"""Server side of pFedGM (Algorithm 1): weighted averaging of the generator phi, the navigator
psi = {mu_k, b_k} and the diagonal covariance nu = {A_k}, then the personalize round.

Usable by any Flower project with its own torch backbone. Requirements on the ArrayRecord:
the navigator and covariance arrays are named by `navigator_keys` / `covariance_keys`
(default: `head.mu`, `head.b`, `head.A`, the names of `pfedgm_app.gaussian.GaussianHead`
mounted as `model.head`); every other array is the generator. The ClientApp trains with the
losses of `pfedgm_app.gaussian` and answers `train` and `train.personalize` messages.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from flwr.app import ArrayRecord, RecordDict

from .personalized import PersonalizedFedAvg


class PFedGM(PersonalizedFedAvg):
    """pFedGM: FedAvg over (phi, psi, nu) weighted by `num-examples`, with nu kept positive.

    Parameters
    ----------
    navigator_keys, covariance_keys : names of psi's and nu's arrays in the ArrayRecord.
    **kwargs : any argument of `PersonalizedFedAvg` / `flwr.serverapp.strategy.FedAvg`
        (`fraction_train` is the paper's participation rate q).
    """

    def __init__(
        self,
        *,
        navigator_keys: Sequence[str] = ("head.mu", "head.b"),
        covariance_keys: Sequence[str] = ("head.A",),
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        self.navigator_keys = tuple(navigator_keys)
        self.covariance_keys = tuple(covariance_keys)

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
        record = content.array_records.get(self.arrayrecord_key, {})
        return self._covariance_problem(record)

    def aggregate_problem(self, arrays: ArrayRecord) -> str | None:
        return super().aggregate_problem(arrays) or self._covariance_problem(arrays)

    def _covariance_problem(self, record: ArrayRecord) -> str | None:
        """nu (the diagonal precision A) must stay positive."""
        for key in self.covariance_keys:
            if key in record and not (np.asarray(record[key].numpy()) > 0).all():
                return f"covariance '{key}' has non-positive entries"
        return None

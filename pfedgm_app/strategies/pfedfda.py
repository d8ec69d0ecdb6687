"""Server side of pFedFDA (McLaughlin et al., NeurIPS 2024): FedAvg of the generator and of the
clients' interpolated Gaussian statistics.

Usable by any Flower project whose clients send, in the usual "arrays" record, their generator and
their interpolated class means and shared covariance (names given by `means_key` and
`covariance_key`); all are averaged by `num-examples`, which is pFedFDA's server rule
(global mu = sum_i n_i/N mu_i, global Sigma = sum_i n_i/N Sigma_i).
"""

from __future__ import annotations

import numpy as np
from flwr.app import RecordDict

from .personalized_fedavg import PersonalizedFedAvg


class PFedFDA(PersonalizedFedAvg):
    """pFedFDA: FedAvg over (generator, mu, Sigma); a reply whose covariance is not symmetric
    positive definite is dropped (its LDA classifier would not exist).

    Parameters
    ----------
    means_key, covariance_key : names of the statistics in the ArrayRecord.
    **kwargs : any argument of `PersonalizedFedAvg` / `flwr.serverapp.strategy.FedAvg`.
    """

    def __init__(
        self, *, means_key: str = "head.mu", covariance_key: str = "head.cov", **kwargs
    ) -> None:
        super().__init__(**kwargs)
        self.means_key = means_key
        self.covariance_key = covariance_key

    def privatized(self, update: dict, sent: dict) -> dict:
        """Under DP the noise breaks Sigma's symmetry and may its positivity: it is made
        symmetric and its eigenvalues kept at least half the smallest of the Sigma sent
        (post-processing: no privacy spent)."""
        key = self.covariance_key
        if key in update and key in sent:
            cov = np.asarray(update[key], dtype=float)
            values, vectors = np.linalg.eigh((cov + cov.T) / 2)
            floor = np.linalg.eigvalsh(np.asarray(sent[key], dtype=float)).min() / 2
            cov = (vectors * np.maximum(values, floor)) @ vectors.T
            update[key] = cov.astype(update[key].dtype)
        return update

    def reject_reason(self, content: RecordDict) -> str | None:
        for record in content.array_records.values():
            if self.covariance_key not in record:
                continue
            cov = np.asarray(record[self.covariance_key].numpy(), dtype=float)
            if not np.allclose(cov, cov.T, atol=1e-5) or np.linalg.eigvalsh(cov).min() <= 0:
                return f"covariance '{self.covariance_key}' is not symmetric positive definite"
        return None

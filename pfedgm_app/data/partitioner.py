"""`ResamplingDirichletPartitioner`: the app's label partition as a flwr-datasets Partitioner,
for Flower projects that load their data with `FederatedDataset`:

    from flwr_datasets import FederatedDataset
    from pfedgm_app.data.partitioner import ResamplingDirichletPartitioner

    partitioner = ResamplingDirichletPartitioner(100, alpha=0.1, partition_by="label", min_size=63)
    fds = FederatedDataset(dataset="uoft-cs/cifar10", partitioners={"train": partitioner})

The app itself calls `data.dirichlet_partition` on the pooled labels directly (the same
indices), so that a ClientApp never imports flwr-datasets.
"""

from __future__ import annotations

import datasets
import numpy as np
from flwr_datasets.partitioner import Partitioner

from pfedgm_app.runconfig.settings import ConfigError

from .partition import dirichlet_partition


class ResamplingDirichletPartitioner(Partitioner):
    """Dirichlet(alpha) label partition that resamples until every client has `min_size`
    (`data.dirichlet_partition`, the rule of the pFedFDA / PFLlib code the paper follows).

    `num_partitions` clients; per class of the column `partition_by`, proportions drawn from
    Dir(`alpha`) (0.1: strong label skew, 0.5: moderate), a client already above N /
    num_partitions samples getting no more; the whole draw repeated, up to `max_attempts`
    times, until the smallest client has `min_size` samples (else ConfigError, as for more
    clients times `min_size` than samples). `seed` fixes the partition: the same seed and
    labels give the same indices in every process. The partition is drawn once, at the first
    `load_partition`, on the whole dataset given (e.g. train and test splits concatenated, as
    the paper's protocol pools them)."""

    def __init__(
        self,
        num_partitions: int,
        alpha: float,
        partition_by: str = "label",
        min_size: int = 10,
        seed: int = 0,
        max_attempts: int = 100_000,
    ) -> None:
        super().__init__()
        if num_partitions < 1:
            raise ConfigError(f"num-partitions must be >= 1, got {num_partitions}")
        self._num_partitions = num_partitions
        self.alpha = alpha
        """The Dirichlet concentration: smaller, more skewed."""
        self.partition_by = partition_by
        """The label column."""
        self.min_size = min_size
        """The fewest samples a client may have."""
        self.seed = seed
        """The seed of the draws."""
        self.max_attempts = max_attempts
        """Draws before giving up (flwr-datasets' DirichletPartitioner: 10)."""
        self._indices: list[np.ndarray] | None = None

    @property
    def num_partitions(self) -> int:
        """The number of clients."""
        return self._num_partitions

    def load_partition(self, partition_id: int) -> datasets.Dataset:
        """The rows of client `partition_id` (0 .. num_partitions - 1) of `dataset`."""
        return self.dataset.select(self.partition_indices()[partition_id])

    def partition_indices(self) -> list[np.ndarray]:
        """Every client's row indices into `dataset` (sorted), drawn at the first call."""
        if self._indices is None:
            labels = np.asarray(self.dataset[self.partition_by], dtype=np.int64)
            self._indices = dirichlet_partition(
                labels,
                self._num_partitions,
                self.alpha,
                self.min_size,
                self.seed,
                self.max_attempts,
            )
        return self._indices

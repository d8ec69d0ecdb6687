"""The clients of a protocol: a Dirichlet label partition of the pool (the same for a
simulation and a deployment with the same settings), then a seeded 80/20 split per client.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from pfedgm_app.runconfig.settings import ConfigError

from .sources import load_pool

if TYPE_CHECKING:
    from .roles import Protocol


def min_partition_size(min_train: int, test_fraction: float) -> int:
    """Smallest client size whose train split (after `split_train_test`) has `min_train`.

    Computed, then corrected by a step or two for the rounding of `split_train_test`'s own
    arithmetic: a search from `min_train` up would take hours for a test-fraction near 1."""

    def fits(n: int) -> bool:
        return n - math.ceil(test_fraction * n) >= min_train

    n = max(min_train, math.ceil(min_train / (1 - test_fraction)))
    while n > min_train and fits(n - 1):
        n -= 1
    while not fits(n):
        n += 1
    return n


def dirichlet_partition(
    labels: np.ndarray,
    num_partitions: int,
    alpha: float,
    min_size: int,
    seed: int,
    max_attempts: int = 100_000,
) -> list[np.ndarray]:
    """Index lists (sorted) of a Dirichlet(alpha) label partition that resamples until every
    client has `min_size`.

    The rule of the pFedFDA / PFLlib partition code the paper follows: per class, draw client
    proportions from Dir(alpha), give nothing more to a client already holding more than
    N / num_partitions samples, and repeat the whole draw until the smallest client reaches
    `min_size`. flwr-datasets' DirichletPartitioner stops after 10 attempts, which Dir(0.1)
    with 100 clients and 63 samples each does not meet (`partitioner.py` wraps this function as
    a flwr-datasets Partitioner for other Flower projects).
    """
    n = len(labels)
    if num_partitions * min_size > n:
        raise ConfigError(
            f"{num_partitions} clients x {min_size} samples each exceeds the {n} samples pooled"
        )
    rng = np.random.default_rng(seed)
    by_class = [np.flatnonzero(labels == k) for k in np.unique(labels)]
    for _ in range(max_attempts):
        # Sizes first: only a draw that meets min_size pays for shuffling and splitting.
        sizes = np.zeros(num_partitions, dtype=np.int64)
        cuts = []
        for idx in by_class:
            p = rng.dirichlet(np.full(num_partitions, alpha)) * (sizes < n / num_partitions)
            cut = (np.cumsum(p / p.sum()) * len(idx)).astype(int)[:-1]
            sizes += np.diff(cut, prepend=0, append=len(idx))
            cuts.append(cut)
        if sizes.min() >= min_size:
            chunks = [np.split(rng.permutation(i), c) for i, c in zip(by_class, cuts, strict=True)]
            return [np.sort(np.concatenate(p)) for p in zip(*chunks, strict=True)]
    raise ConfigError(
        f"no Dir({alpha}) partition into {num_partitions} clients with >= {min_size} samples "
        f"each after {max_attempts} draws; raise dirichlet-alpha or lower min-train-samples"
    )


def split_train_test(
    indices: np.ndarray, test_fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Seeded per-client split: ceil(test_fraction * n) test samples, the rest train."""
    perm = np.random.default_rng(seed).permutation(indices)
    n_test = math.ceil(test_fraction * len(perm))
    return np.sort(perm[n_test:]), np.sort(perm[:n_test])


def hold_out_validation(
    train: np.ndarray, test: np.ndarray, validation_fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """(train, evaluated): with `validation_fraction` v > 0, ceil(v * len(train)) of the training
    indices (seeded by `seed`, apart from the test split's) become the evaluated set and the
    test set is left out, unread; with v = 0, (train, test) as given. For studies that choose
    a reading of the paper without looking at the test sets (run-config `validation-fraction`).
    """
    if not validation_fraction:
        return train, test
    return split_train_test(train, validation_fraction, 2 * seed + 1)


_PARTITIONS: dict[tuple, list[np.ndarray]] = {}


def client_indices(protocol: Protocol) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train, test) pool indices of every client."""
    return [client_split(protocol, pid) for pid in range(protocol.num_partitions)]


def client_split(protocol: Protocol, partition_id: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, test) pool indices of one client; the partition is computed once per process,
    and a client's split alone (loading one client costs the same with 100 or 1000 clients).
    With `validation_fraction`, test is the validation split (`hold_out_validation`)."""
    idx = _partition(protocol)[partition_id]
    train, test = client_train_test(idx, protocol, partition_id)
    return hold_out_validation(
        train, test, protocol.validation_fraction, split_seed(protocol.seed, partition_id)
    )


def label_partition(labels: np.ndarray, protocol: Protocol) -> list[np.ndarray]:
    """Index lists into `labels` of every client of `protocol`: its Dirichlet partition, with
    the smallest client large enough for `min_train` training samples."""
    min_size = min_partition_size(protocol.min_train, protocol.test_fraction)
    return dirichlet_partition(
        labels, protocol.num_partitions, protocol.alpha, min_size, protocol.seed
    )


def client_train_test(
    idx: np.ndarray, protocol: Protocol, partition_id: int
) -> tuple[np.ndarray, np.ndarray]:
    """(train, test) of client `partition_id`'s partition `idx`: the seeded 80/20 split."""
    return split_train_test(idx, protocol.test_fraction, split_seed(protocol.seed, partition_id))


def split_seed(seed: int, client_id: int) -> int:
    """The seed of a client's 80/20 split: a device holding exactly a partition's samples (in
    pool order) under that partition's id gets the partition's train and test sets."""
    return seed * 100_003 + client_id


def _partition(protocol: Protocol) -> list[np.ndarray]:
    """Pool indices of every client, cached per process."""
    pool = load_pool(protocol.dataset)
    p = protocol  # the partition depends on these, not on the corruption or the roles
    key = (
        pool.source,
        p.num_partitions,
        p.alpha,
        p.seed,
        p.min_train,
        p.test_fraction,
        p.pool_size,
    )
    if key not in _PARTITIONS:
        subset = np.arange(len(pool.dataset))
        if 0 < protocol.pool_size < len(subset):
            rng = np.random.default_rng(protocol.seed)
            subset = np.sort(rng.choice(subset, protocol.pool_size, replace=False))
        if (present := len(np.unique(pool.labels[subset]))) < 2:  # a device may hold one
            raise ConfigError(
                f"dataset {pool.source!r} holds {present} class(es) to partition: a classifier "
                "needs at least 2; give a dataset with 2 or more"
            )
        parts = label_partition(pool.labels[subset], protocol)
        _PARTITIONS[key] = [subset[idx] for idx in parts]
    return _PARTITIONS[key]

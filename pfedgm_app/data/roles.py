"""What fixes the clients (`Protocol`) and the role of each: whether it trains in Phase 1,
whether its accuracy enters the headline, which (corruption, severity) pair its images get.
"""

from __future__ import annotations

from dataclasses import dataclass

from pfedgm_app.runconfig.common import CORRUPTION_ASSIGNMENTS, RunConfig, parse_classes
from pfedgm_app.runconfig.settings import ConfigError

from .corruptions import corruption_pairs


@dataclass(frozen=True)
class Protocol:
    """What fixes the clients: the same Protocol gives the same partition everywhere.

    `pool_size` > 0 keeps a seeded random subset of that many pooled samples (quick runs and
    tests); 0 keeps all of them, as the paper does. `classes` (run-config `classes`) maps the
    dataset's labels by name onto that class list; () keeps the dataset's own.
    """

    dataset: str
    num_partitions: int
    alpha: float
    seed: int = 0
    min_train: int = 50
    test_fraction: float = 0.2
    pool_size: int = 0
    corruption: str = "none"  # CIFAR-10S / 100S assignment: none, 50C, 100C
    frost_dir: str = ""
    kind: str = "standard"  # run-config `protocol`: or "generalization" (`trains`, `pair`)
    classes: tuple[str, ...] = ()
    validation_fraction: float = 0.0  # > 0: the evaluated split is carved from train

    @classmethod
    def of(cls, cfg: RunConfig, num_partitions: int, dataset: str | None = None) -> Protocol:
        """The protocol of run `cfg` for `num_partitions` clients (`dataset` overrides the run's,
        e.g. a SuperNode's own copy)."""
        return cls(
            dataset or cfg.dataset,
            num_partitions,
            cfg.dirichlet_alpha,
            cfg.seed,
            cfg.min_train_samples,
            cfg.test_fraction,
            cfg.pool_size,
            cfg.corruption,
            cfg.frost_dir,
            cfg.protocol,
            parse_classes(cfg.classes),
            cfg.validation_fraction,
        )

    # The paper's new-client generalization protocol (100 clients, Dir(0.5)): clients 0..49
    # clean, 50..99 corrupted as CIFAR-10S (one of the 50 corruption-severity pairs each); Phase 1
    # trains on clients 0..44 only; Phase 2 personalizes every client and reports the new ones,
    # 45..99 (5 clean clients and 5 per corruption), by type, beside the original clients 0..44
    # (the paper's table rows). For N clients: the halves of N, the first 90% of the clean half
    # train.
    def trains(self, partition_id: int) -> bool:
        """Whether the client takes part in Phase 1 (under `generalization`, only seen ones)."""
        if self.kind == "generalization":
            return partition_id < (self.num_partitions // 2) * 9 // 10
        return True

    def headline(self, partition_id: int) -> bool:
        """Whether the client's accuracy enters `mean_accuracy` (under `generalization`, only
        the new clients'; every client is personalized and evaluated)."""
        return self.kind != "generalization" or not self.trains(partition_id)

    def pair(self, partition_id: int) -> tuple[str, int] | None:
        """The client's (corruption, severity), or None for a clean client."""
        if self.kind == "generalization":
            half = self.num_partitions // 2
            pairs = corruption_pairs()
            return None if partition_id < half else pairs[(partition_id - half) % len(pairs)]
        return corruption_pair(self.corruption, partition_id)

    def client_type(self, partition_id: int) -> str:
        """'original' (a client Phase 1 trained, under `generalization`), 'clean' or the
        client's corruption: the groups of `accuracy_by_type`."""
        if not self.headline(partition_id):
            return "original"
        pair = self.pair(partition_id)
        return "clean" if pair is None else pair[0]


# -- CIFAR-10S / CIFAR-100S: environmental heterogeneity (the paper, after pFedFDA) -------------
def corruption_pair(assignment: str, partition_id: int) -> tuple[str, int] | None:
    """The (corruption, severity) of a client, or None for a clean one. `50C`: client i < 50
    gets the i-th of the 50 pairs (`corruptions.corruption_pairs`: each corruption at severities
    1..5 in turn), the others stay clean; `100C`: clients 2j and 2j + 1 share pair j (clients
    from 100 on stay clean)."""
    if assignment not in CORRUPTION_ASSIGNMENTS:
        raise ConfigError(f"corruption must be one of {CORRUPTION_ASSIGNMENTS}, got {assignment!r}")
    if assignment == "none":
        return None
    pairs = corruption_pairs()
    j = partition_id if assignment == "50C" else partition_id // 2
    return pairs[j] if j < len(pairs) else None

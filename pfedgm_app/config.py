"""Typed run-config and its validation.

Every run-config key of `pyproject.toml` maps to one field here. `RunConfig.from_run_config`
turns Flower's flat `key-with-dashes` dict into this dataclass and raises one `ConfigError`
naming the key and how to fix it, before any data is loaded or any round runs.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, fields
from typing import Any

METHODS = (
    "pfedgm",
    "fedavg",
    "fedavgft",
    "local",
    "ditto",
    "fedbabu",
    "fedper",
    "fedrep",
    "lgfedavg",
    "fedpac",
    "pfedme",
    "pfedfda",
)


class ConfigError(ValueError):
    """A run-config value that cannot work; the message says which key and what to do."""


@dataclass(frozen=True)
class RunConfig:
    """The run-config of one experiment, with the paper's defaults (Sec. Training Setup)."""

    method: str = "pfedgm"
    dataset: str = "uoft-cs/cifar10"
    dirichlet_alpha: float = 0.5
    num_server_rounds: int = 200
    fraction_train: float = 0.3
    local_epochs: int = 5
    batch_size: int = 50
    learning_rate: float = 0.01
    momentum: float = 0.5
    weight_decay: float = 5e-4
    lambda_: float = 1.0  # run-config key `lambda` (a Python keyword)
    personal_epochs: int = 5
    personal_learning_rate: float = 0.05
    lbfgs_learning_rate: float = 0.05
    lbfgs_max_iter: int = 10
    lbfgs_cycles: int = 5
    finetune_epochs: int = 5
    ditto_mu: float = 1.0
    fedrep_body_epochs: int = 1
    fedpac_lambda: float = 1.0
    fedpac_head_epochs: int = 1
    fedpac_head_learning_rate: float = 0.1
    pfedme_lambda: float = 5.0
    pfedme_inner_steps: int = 5
    pfedme_personal_learning_rate: float = 0.01
    pfedme_tolerance: float = 0.0
    pfedfda_cv_folds: int = 2
    min_train_samples: int = 50
    test_fraction: float = 0.2
    pool_size: int = 0
    seed: int = 0
    device: str = "auto"
    client_threads: int = 0
    node_wait_timeout: float = 120.0
    round_timeout: float = 3600.0
    output_dir: str = ""

    @classmethod
    def from_run_config(cls, run_config: dict[str, Any]) -> RunConfig:
        """Build from Flower's run-config (keys with dashes); unknown keys are an error."""
        known = {_key(f.name): f for f in fields(cls)}
        unknown = sorted(set(run_config) - set(known))
        if unknown:
            raise ConfigError(f"unknown run-config key(s) {unknown}; known keys: {sorted(known)}")
        values: dict[str, Any] = {}
        for key, value in run_config.items():
            f = known[key]
            values[f.name] = _coerce(key, value, type(getattr(cls(), f.name)))
        cfg = cls(**values)
        cfg.validate()
        return cfg

    def protocol(self, num_partitions: int, dataset: str | None = None):
        """The data protocol (`data.Protocol`) of this run for `num_partitions` clients."""
        from .data import Protocol  # data imports torch and datasets: keep config light

        return Protocol(
            dataset or self.dataset,
            num_partitions,
            self.dirichlet_alpha,
            self.seed,
            self.min_train_samples,
            self.test_fraction,
            self.pool_size,
        )

    def to_run_config(self) -> dict[str, Any]:
        """The flat dict form (keys with dashes), e.g. to send in a ConfigRecord."""
        return {_key(k): v for k, v in dataclasses.asdict(self).items()}

    def validate(self) -> None:
        """Raise ConfigError for any value that cannot work."""
        if self.method not in METHODS:
            raise ConfigError(f"unknown method {self.method!r}; choose one of {list(METHODS)}")
        if not self.dataset:
            raise ConfigError("dataset is empty; give a hub id or a local path")
        if not (self.dirichlet_alpha > 0 and math.isfinite(self.dirichlet_alpha)):
            raise ConfigError(f"dirichlet-alpha must be > 0, got {self.dirichlet_alpha}")
        if not 0 < self.fraction_train <= 1:
            raise ConfigError(f"fraction-train (q) must lie in (0, 1], got {self.fraction_train}")
        if not 0 < self.test_fraction < 1:
            raise ConfigError(f"test-fraction must lie in (0, 1), got {self.test_fraction}")
        positive_ints = ("num_server_rounds", "local_epochs", "batch_size", "min_train_samples")
        for name in positive_ints + ("lbfgs_max_iter", "fedpac_head_epochs", "pfedme_inner_steps"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{_key(name)} must be >= 1, got {getattr(self, name)}")
        for name in (
            "personal_epochs",
            "lbfgs_cycles",
            "finetune_epochs",
            "client_threads",
            "pool_size",
        ):
            if getattr(self, name) < 0:
                raise ConfigError(f"{_key(name)} must be >= 0, got {getattr(self, name)}")
        for name in (
            "learning_rate",
            "personal_learning_rate",
            "lbfgs_learning_rate",
            "fedpac_head_learning_rate",
            "pfedme_personal_learning_rate",
        ):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{_key(name)} must be > 0, got {getattr(self, name)}")
        for name in (
            "momentum",
            "weight_decay",
            "lambda_",
            "ditto_mu",
            "fedpac_lambda",
            "pfedme_lambda",
            "pfedme_tolerance",
        ):
            if not getattr(self, name) >= 0:
                raise ConfigError(f"{_key(name)} must be >= 0, got {getattr(self, name)}")
        if not 1 <= self.fedrep_body_epochs <= self.local_epochs:
            raise ConfigError(
                f"fedrep-body-epochs must lie in [1, local-epochs={self.local_epochs}], "
                f"got {self.fedrep_body_epochs}"
            )
        if self.pfedfda_cv_folds < 2:
            raise ConfigError(f"pfedfda-cv-folds must be >= 2, got {self.pfedfda_cv_folds}")
        if not (self.device == "auto" or self.device == "cpu" or self.device.startswith("cuda")):
            raise ConfigError(f"device must be 'auto', 'cpu' or 'cuda[:N]', got {self.device!r}")


def _key(name: str) -> str:
    return name.rstrip("_").replace("_", "-")


def _coerce(key: str, value: Any, kind: type) -> Any:
    """Accept TOML's natural spellings (1 for 1.0) but reject a wrong kind with the key named."""
    if kind is bool or isinstance(value, bool):
        raise ConfigError(f"{key}: booleans are not accepted here, got {value!r}")
    try:
        if kind is int:
            if isinstance(value, float) and not value.is_integer():
                raise ValueError
            return int(value)
        if kind is float:
            return float(value)
        return str(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{key} must be {kind.__name__}, got {value!r}") from None

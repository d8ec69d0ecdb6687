"""Typed run-config and its validation.

A run-config is Flower's flat `key-with-dashes` dict. Its keys come in groups, each a small
frozen dataclass of `Settings`: `RunConfig` holds the keys every method uses (data protocol,
rounds, optimizer, device, outputs); each method declares its own hyperparameters in a
`Settings` subclass of its module (`methods/`). A field's bounds are declared beside its default
(`at_least`, `above`, each with an optional `at_most` or `below`), so one loop checks every key
and names it in the error; every number must also be finite. Upper bounds are generous: they
keep a typo (an extra zero, `inf`) from starting a run that overflows or never ends.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Self

CORRUPTION_ASSIGNMENTS = ("none", "50C", "100C")  # CIFAR-10S / 100S (data.corruption_pair)
AGGREGATIONS = ("mean", "trimmed-mean", "median")  # strategies.robust (flwr-free here)
PROTOCOLS = ("standard", "generalization")  # who trains and who is evaluated (data.Protocol)


class ConfigError(ValueError):
    """A run-config value that cannot work; the message says which key and what to do."""


def at_least(
    low: float, default: Any, *, at_most: float | None = None, below: float | None = None
) -> Any:
    """A dataclass field whose value must be >= `low` (and <= `at_most`, or < `below`)."""
    return field(default=default, metadata=_bounds(min=low, max=at_most, lt=below))


def above(
    low: float, default: Any, *, at_most: float | None = None, below: float | None = None
) -> Any:
    """A dataclass field whose value must be > `low` (and <= `at_most`, or < `below`)."""
    return field(default=default, metadata=_bounds(gt=low, max=at_most, lt=below))


def _bounds(**bounds: float | None) -> dict[str, float]:
    return {name: value for name, value in bounds.items() if value is not None}


BOUNDS = {"min": (operator.ge, ">="), "gt": (operator.gt, ">"), "max": (operator.le, "<="),
          "lt": (operator.lt, "<")}  # fmt: skip


@dataclass(frozen=True)
class Settings:
    """A group of run-config keys: field `name` is key `<prefix>-name` (`lambda_` is `lambda`).

    Subclasses add fields (with `at_least` / `above` bounds where a bound applies) and override
    `validate` for checks a bound cannot say.
    """

    prefix: ClassVar[str] = ""

    @classmethod
    def key(cls, name: str) -> str:
        base = name.rstrip("_").replace("_", "-")
        return f"{cls.prefix}-{base}" if cls.prefix else base

    @classmethod
    def keys(cls) -> dict[str, Any]:
        """{run-config key: default} of this group."""
        return {cls.key(f.name): f.default for f in fields(cls)}

    @classmethod
    def from_run_config(cls, run_config: Mapping[str, Any]) -> Self:
        """This group's keys from `run_config` (other keys are ignored; missing ones default),
        coerced to the fields' types. Not validated: see `validate`.
        """
        values = {}
        for f in fields(cls):
            key = cls.key(f.name)
            if key in run_config:
                values[f.name] = _coerce(key, run_config[key], type(f.default))
        return cls(**values)

    def to_run_config(self) -> dict[str, Any]:
        return {self.key(k): v for k, v in dataclasses.asdict(self).items()}

    def strategy_options(self) -> dict[str, Any]:
        """Keyword arguments of the method's strategy that these settings fix (none here)."""
        return {}

    def validate(self, run: RunConfig) -> None:
        """Raise ConfigError for a value out of its declared bound; `run` is the run's common
        settings, for checks that relate both (e.g. FedRep's body epochs <= local epochs).
        """
        for f in fields(self):
            value, key = getattr(self, f.name), self.key(f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ConfigError(f"{key} must be a finite number, got {value}")
            for name, (holds, words) in BOUNDS.items():
                if name in f.metadata and not holds(value, f.metadata[name]):
                    raise ConfigError(f"{key} must be {words} {f.metadata[name]}, got {value}")


@dataclass(frozen=True)
class RunConfig(Settings):
    """The keys every method shares, with the paper's defaults (Sec. Training Setup)."""

    preset: str = ""  # presets.py: a paper table's keys in place of the defaults
    method: str = "pfedgm"
    dataset: str = "uoft-cs/cifar10"
    classes: str = ""  # the model's classes in order, 'a,b,...'; empty: the dataset's (data/labels)
    dirichlet_alpha: float = above(0, 0.5, at_most=1e6)  # beyond: IID within sampling noise
    num_server_rounds: int = at_least(0, 200, at_most=100_000)  # 0: personalize initial-model
    initial_model: str = ""  # a run's output-dir or global_model.pt to start from
    fraction_train: float = above(0, 0.3, at_most=1)  # q: a share of the clients
    local_epochs: int = at_least(1, 5, at_most=10_000)  # the paper: 5; 10^4 is a typo
    batch_size: int = at_least(1, 50, at_most=10**6)  # more than a client holds: one batch
    learning_rate: float = above(0, 0.01, at_most=100)  # SGD diverges long before 100
    momentum: float = at_least(0, 0.5, below=1)  # at 1 the velocity never decays
    weight_decay: float = at_least(0, 5e-4, at_most=1)  # the paper 5e-4; > 1 outweighs any loss
    min_train_samples: int = at_least(1, 50, at_most=10**7)  # more than any dataset holds
    test_fraction: float = above(0, 0.2, at_most=0.9)  # a client keeps >= 10% to train on
    validation_fraction: float = at_least(0, 0.0, at_most=0.9)  # > 0: evaluate on a split of
    # the train set; at most 0.9, so that >= 10% of it remains to train on
    pool_size: int = at_least(0, 0, at_most=10**9)  # beyond any dataset: all samples
    corruption: str = "none"  # one of CORRUPTION_ASSIGNMENTS
    frost_dir: str = ""  # frost textures; empty: the first <ancestor>/shared/data/frost
    protocol: str = "standard"  # one of PROTOCOLS
    eval_every: int = at_least(0, 0, at_most=100_000)  # every N rounds; 0: at the end; as rounds
    seed: int = at_least(0, 0, at_most=2**32 - 1)  # numpy's seeding limit
    device: str = "auto"
    client_threads: int = at_least(0, 0, at_most=4096)  # more than any machine's cores
    # seconds, finite: a wait without end is a stall (10^7 s: four months)
    node_wait_timeout: float = above(0, 120.0, at_most=1e7)
    round_timeout: float = above(0, 3600.0, at_most=1e7)
    messages_in_flight: int = at_least(-1, 0, at_most=10**6)  # WindowedGrid's; 0: all; -1: auto
    resume: bool = False  # continue the run in output-dir from its last checkpoint
    min_nodes: int = at_least(0, 0, at_most=10**6)  # N > 0: start with N SuperNodes, take in
    # later ones; at most a million, far beyond any federation
    client_state_dir: str = ""  # clients also keep their arrays in files here (resume)
    output_dir: str = ""
    # what the server trusts of a reply (docs/robustness.md, strategies/robust.py)
    aggregation: str = "mean"  # one of AGGREGATIONS: FedAvg, or Flower's trimmed mean / median
    trim_fraction: float = at_least(0, 0.2, below=0.5)  # trimmed-mean's cut at each end
    clip_ratio: float = at_least(0, 10.0, at_most=1e6)  # updates beyond x median norm: clipped
    weight_ratio: float = above(0, 20.0, at_most=1e6)  # a weight at most x the median report

    def validate(self, run: RunConfig | None = None) -> None:
        super().validate(self)
        if not self.dataset:
            raise ConfigError("dataset is empty; give a hub id or a local path")
        if self.num_server_rounds == 0 and not self.initial_model:
            raise ConfigError(
                "num-server-rounds=0 trains nothing: give initial-model (a finished run's "
                "output-dir or its global_model.pt) to personalize it, or num-server-rounds >= 1"
            )
        parse_classes(self.classes)
        if self.corruption not in CORRUPTION_ASSIGNMENTS:
            raise ConfigError(
                f"corruption must be one of {CORRUPTION_ASSIGNMENTS}, got {self.corruption!r}"
            )
        if self.protocol not in PROTOCOLS:
            raise ConfigError(f"protocol must be one of {PROTOCOLS}, got {self.protocol!r}")
        if self.min_nodes and self.protocol != "standard":
            raise ConfigError("min-nodes (a changing federation) needs protocol='standard'")
        if self.protocol == "generalization" and self.corruption != "none":
            raise ConfigError(
                "protocol='generalization' corrupts the second half of the clients itself; "
                f"leave corruption='none' (got {self.corruption!r})"
            )
        if self.aggregation not in AGGREGATIONS:
            raise ConfigError(
                f"aggregation must be one of {AGGREGATIONS}, got {self.aggregation!r}"
            )
        if not (self.device == "auto" or self.device == "cpu" or self.device.startswith("cuda")):
            raise ConfigError(f"device must be 'auto', 'cpu' or 'cuda[:N]', got {self.device!r}")


def parse_classes(classes: str) -> tuple[str, ...]:
    """Run-config `classes` ('cat,dog,...', the model's classes in order) as a tuple; '' gives
    () (the dataset's own classes)."""
    if not classes.strip():
        return ()
    names = tuple(c.strip() for c in classes.split(","))
    if "" in names or len(set(names)) < len(names):
        raise ConfigError(f"classes must be distinct non-empty names, comma-separated: {classes!r}")
    return names


def _coerce(key: str, value: Any, kind: type) -> Any:
    """Accept TOML's natural spellings (1 for 1.0) but reject a wrong kind with the key named."""
    if kind is bool:  # TOML's true/false; the strings "true"/"false" as a CLI may give them
        if isinstance(value, bool) or str(value).lower() in ("true", "false"):
            return value if isinstance(value, bool) else str(value).lower() == "true"
        raise ConfigError(f"{key} must be true or false, got {value!r}")
    if isinstance(value, bool):
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

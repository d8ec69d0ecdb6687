"""The machinery of run-config keys: a group of keys is a frozen dataclass of `Settings`.

A run-config is Flower's flat `key-with-dashes` dict. A field's bounds and meaning are declared
beside its default (`at_least`, `above`, each with an optional `at_most` or `below`; `setting`
for a field without bounds; each with `doc`, the key's meaning in docs/run-config.md), so one
loop checks every key and names it in the error; every number must also be finite. Upper
bounds are generous: they keep a typo (an extra zero, `inf`) from starting a run that
overflows or never ends. The groups: `common.RunConfig` (every method's keys) and each
method's own (`method_settings`).
"""

from __future__ import annotations

import dataclasses
import math
import operator
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Protocol, Self


class RunView(Protocol):
    """What a method's settings check against the run's common settings (`common.RunConfig`)."""

    @property
    def private(self) -> bool: ...


class ConfigError(ValueError):
    """A run-config value that cannot work; the message says which key and what to do."""


def setting(default: Any, *, doc: str) -> Any:
    """A dataclass field without bounds; `doc` is its key's meaning (docs/run-config.md)."""
    return field(default=default, metadata={"doc": doc})


def at_least(
    low: float,
    default: Any,
    *,
    at_most: float | None = None,
    below: float | None = None,
    doc: str = "",
) -> Any:
    """A dataclass field whose value must be >= `low` (and <= `at_most`, or < `below`); `doc`
    is its key's meaning."""
    return field(default=default, metadata=_metadata(doc, min=low, max=at_most, lt=below))


def above(
    low: float,
    default: Any,
    *,
    at_most: float | None = None,
    below: float | None = None,
    doc: str = "",
) -> Any:
    """A dataclass field whose value must be > `low` (and <= `at_most`, or < `below`); `doc`
    is its key's meaning."""
    return field(default=default, metadata=_metadata(doc, gt=low, max=at_most, lt=below))


def _metadata(doc: str, **bounds: float | None) -> dict[str, Any]:
    return {"doc": doc, **{name: value for name, value in bounds.items() if value is not None}}


BOUNDS = {
    "min": (operator.ge, ">="),
    "gt": (operator.gt, ">"),
    "max": (operator.le, "<="),
    "lt": (operator.lt, "<"),
}


@dataclass(frozen=True)
class Settings:
    """A group of run-config keys: field `name` is key `<prefix>-name` (`lambda_` is `lambda`).

    Subclasses add fields (`at_least` / `above` where a bound applies, else `setting`, each with
    its key's meaning as `doc`) and override `validate` for checks a bound cannot say.
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
    def meanings(cls) -> dict[str, str]:
        """{run-config key: its meaning, the field's `doc` ('' where it declares none)}."""
        return {cls.key(f.name): f.metadata.get("doc", "") for f in fields(cls)}

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

    def validate(self, run: RunView) -> None:
        """Raise ConfigError for a value out of its declared bound; `run` is the run's common
        settings (`common.RunConfig`), for checks that relate both (e.g. pFedGM's readings
        under DP).
        """
        for f in fields(self):
            value, key = getattr(self, f.name), self.key(f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ConfigError(f"{key} must be a finite number, got {value}")
            for name, (holds, words) in BOUNDS.items():
                if name in f.metadata and not holds(value, f.metadata[name]):
                    raise ConfigError(f"{key} must be {words} {f.metadata[name]}, got {value}")


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

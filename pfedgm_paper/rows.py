"""A table's rows and columns: what each row runs (its run-config keys) and reads (a metric of
`clients.csv`). The paper's tables (`grid.py`) and the validation studies (`studies.py`) are
made of these."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pfedgm_app.methods import METHODS


@dataclass(frozen=True)
class Row:
    """A row of a table: `run` names the run it reads (its folder, and the run-config `keys`
    that make it), `metric` the per-client value it shows (`clients.csv`'s column), `label`
    the paper's name for it."""

    name: str
    label: str
    run: str
    keys: dict[str, Any] = field(default_factory=dict, hash=False)
    metric: str = "accuracy"


@dataclass(frozen=True)
class Table:
    name: str
    caption: str
    columns: tuple[str, ...]  # preset names
    rows: tuple[Row, ...]
    kind: str = "accuracy"  # "accuracy", "runtime" (minutes), "curve" (accuracy per round)


def method_row(method: str) -> Row:
    """A registered method's row, named as the paper's tables name it (`Method.label`)."""
    return Row(method, METHODS[method].label, method, {"method": method})


def method_rows(*methods: str) -> tuple[Row, ...]:
    """The rows of registered methods, in the order given."""
    return tuple(method_row(m) for m in methods)


def variant(name: str, label: str, **keys: Any) -> Row:
    """A pFedGM variant's row: run `pfedgm-<name>` with `keys` over the method's defaults."""
    return Row(name, label, f"pfedgm-{name}", {"method": "pfedgm", **keys})

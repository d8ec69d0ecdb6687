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


# FedAvg trains as FedAvgFT does, step for step (the same rounds, the same replies), and a
# FedAvgFT run records that global model's accuracy before its fine-tuning (`acc-global`;
# tests/test_methods.py): a FedAvg row of final accuracies reads it, as the adaptation table
# reads NA and FA, and runs nothing of its own. Curves and wall times need FedAvg's own run.
RUNS_AS = {"fedavg": ("fedavgft", "acc-global")}


def read_as(method: str) -> tuple[str, str]:
    """(the method whose runs give `method`'s final accuracy, the metric read there)."""
    return RUNS_AS.get(method, (method, "accuracy"))


def method_row(method: str, own_run: bool = False) -> Row:
    """A registered method's row, named as the paper's tables name it (`Method.label`): the
    run it reads (`read_as`, or its own with `own_run`)."""
    runner, metric = (method, "accuracy") if own_run else read_as(method)
    return Row(method, METHODS[method].label, runner, {"method": runner}, metric)


def method_rows(*methods: str, own_run: bool = False) -> tuple[Row, ...]:
    """The rows of registered methods, in the order given."""
    return tuple(method_row(m, own_run) for m in methods)


def variant(name: str, label: str, **keys: Any) -> Row:
    """A pFedGM variant's row: run `pfedgm-<name>` with `keys` over the method's defaults."""
    return Row(name, label, f"pfedgm-{name}", {"method": "pfedgm", **keys})

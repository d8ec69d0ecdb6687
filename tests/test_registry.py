"""The recipe of docs/methods.md ("Adding a method"), followed for a toy method: a plug-in in its
module, `Settings` with bounds and meanings, and one `Method` with its label in the registry,
it is known everywhere (run-config parsing, the reference pages, the paper's
rows) and runs through the real ServerApp and ClientApp. pyproject.toml's keys are Flower's
concern: the in-process driver takes the registry's."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from devtools.reference.registry_pages import pages
from devtools.same_numbers import TINY
from pfedgm_app.learning.models import Model
from pfedgm_app.learning.training import supervised_step
from pfedgm_app.methods import METHODS, Method, markdown_table, parse_run_config, run_config_keys
from pfedgm_app.methods.base import ClientPlugin, ClientTask, Reply
from pfedgm_app.runconfig.settings import ConfigError, Settings, at_least
from pfedgm_engine.inprocess import run_inprocess
from pfedgm_paper.rows import method_row

TRAINED: list[int] = []  # the epochs of every round a toy client trained, in this process


@dataclass(frozen=True)
class ToySettings(Settings):
    prefix = "toy"
    epochs: int = at_least(1, 1, at_most=100, doc="local epochs per round, under a toy's name")


class ToyClient(ClientPlugin):
    """FedAvg whose local epochs are its own key, `toy-epochs`."""

    def train(self, model: Model, task: ClientTask) -> Reply:
        TRAINED.append(self.settings.epochs)
        metrics = task.epochs(supervised_step(model), model.parameters(), self.settings.epochs)
        return self.send(model, task, metrics)


TOY = Method("toy", "Toy", ToyClient, "FedAvg, its local epochs `toy-epochs`", settings=ToySettings)


@pytest.fixture
def toy(monkeypatch) -> Method:
    """The toy in the registry for one test (`REGISTERED` gives `METHODS`, read everywhere)."""
    monkeypatch.setitem(METHODS, TOY.name, TOY)
    TRAINED.clear()
    return TOY


def test_a_registered_method_is_parsed_documented_and_labelled(toy):
    assert run_config_keys()["toy-epochs"] == 1
    cfg, method, settings = parse_run_config({"method": "toy", "toy-epochs": 3})
    assert (cfg.method, method, settings) == ("toy", toy, ToySettings(epochs=3))
    with pytest.raises(ConfigError, match="toy-epochs must be <= 100, got 101"):
        parse_run_config({"method": "fedavg", "toy-epochs": 101})
    written = pages()
    assert (
        "| `toy-epochs` | `1` | [1, 100] | local epochs per round, under a toy's name |"
        in (written["run-config.md"])
    )
    assert (
        "| `toy` | generator, head | `PersonalizedFedAvg` | FedAvg, its local epochs "
        "`toy-epochs` (1) |" in (written["methods.md"])
    )
    assert method_row("toy").label == "Toy"


def test_a_summary_names_keys_and_their_defaults_come_from_the_registry():
    """No summary types a default after a key: the method table adds each from the registry,
    so a changed default cannot leave a stale number behind."""
    for method in METHODS.values():
        assert not re.search(r"`[\w-]+`,? \(?[\d.]+\)?", method.summary), method.name
    fedpac = next(line for line in markdown_table().splitlines() if line.startswith("| `fedpac`"))
    assert "`fedpac-head-learning-rate` (0.1)" in fedpac and "`local-epochs` (5)" in fedpac


@pytest.mark.slow
def test_a_registered_method_runs_through_the_real_apps(toy, mnist, tmp_path):
    cfg = {**TINY, "method": "toy", "toy-epochs": 2, "dataset": str(mnist),
           "output-dir": str(tmp_path / "toy")}  # fmt: skip
    summary, _ = run_inprocess(cfg, 4)
    assert summary["method"] == "toy" and summary["num-clients-evaluated"] == 4
    assert TRAINED and set(TRAINED) == {2}  # its clients trained with its own key's value

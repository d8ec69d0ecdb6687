"""A run that starts from a saved global model (`initial-model`): a finished run's output-dir,
or its `global_model.pt` with the run's `config.json` beside it.

With `num-server-rounds=0` the run is the personalize round alone, on the SuperNodes connected
now: a device that joined after training gets its personalized model (saved on it, as every
run's clients do) from the trained phi, psi and nu without any client training again.

What cannot work is refused before any message is sent (`read`: the files, the stored run's
method and classes), and before any train or personalize message (`fit`: every array of the
model the server builds from the clients' query replies, by name, shape and dtype).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from flwr.app import ArrayRecord

from .config import ConfigError, RunConfig
from .data import run_classes
from .run_folder import RunFolder


@dataclass(frozen=True)
class InitialModel:
    """A stored run's global model (`arrays`) and its `config.json` (`config`)."""

    path: Path
    arrays: dict[str, torch.Tensor]
    config: dict[str, Any]

    def describe(self) -> str:
        """'a pfedgm model of /x (20 rounds on /data/mnist)'."""
        c = self.config
        return (
            f"a {c.get('method')} model of {self.path} ({c.get('num-server-rounds')} "
            f"rounds on {c.get('dataset')})"
        )


def read(cfg: RunConfig) -> InitialModel:
    """The run's `initial-model`, or one ConfigError naming the file and what to do: a missing
    or unreadable file, no `config.json` beside it, another method, other classes."""
    given = Path(cfg.initial_model).expanduser()
    model = RunFolder(given).global_model
    path = model if given.is_dir() else given
    key = f"initial-model {cfg.initial_model!r}"
    if not path.is_file():
        raise ConfigError(
            f"{key}: no file {path}; give a finished run's output-dir or its {model.name}"
        )
    stored = RunFolder(path.parent)  # the run's config.json is beside its model
    try:
        config = stored.read_config()
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"{key}: no readable {stored.config.name} beside {path.name} ({exc}); give the "
            "run's whole output-dir: its config.json says which method and classes the model has"
        ) from None
    if config.get("method") != cfg.method:
        raise ConfigError(
            f"{key} is a {config.get('method')} model and this run's method is {cfg.method}: "
            f"set method='{config.get('method')}' or give a {cfg.method} run's output-dir"
        )
    theirs = _classes(str(config.get("classes", "")), str(config.get("dataset", "")))
    ours = _classes(cfg.classes, cfg.dataset)
    if theirs and ours and theirs != ours:
        raise ConfigError(
            f"{key} was trained on the classes of {config.get('dataset')} ({_shown(theirs)}), "
            f"this run's are {_shown(ours)}: give a run of the same classes (run-config "
            "dataset or classes)"
        )
    try:  # tensors only: weights_only refuses anything else a pickle could hold
        arrays = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 (any unreadable file: one clear message)
        why = str(exc).split(".")[0].strip()  # torch's messages run to many lines
        raise ConfigError(f"{key}: {path} is not a readable model ({why})") from None
    if not isinstance(arrays, dict) or not all(
        isinstance(v, torch.Tensor) for v in arrays.values()
    ):
        raise ConfigError(f"{key}: {path} holds no state dict of tensors")
    return InitialModel(path, arrays, config)


def fit(initial: InitialModel, built: ArrayRecord) -> ArrayRecord:
    """The initial model's arrays, in the order of `built` (the model this run's clients'
    images and classes give), once each of them has its name, shape and dtype; else one
    ConfigError naming the first that differs and both runs' data."""
    ours = {k: (tuple(v.shape), v.dtype) for k, v in built.items()}
    theirs = {
        k: (tuple(v.shape), str(v.dtype).removeprefix("torch.")) for k, v in initial.arrays.items()
    }
    differ = [k for k in ours if k in theirs and ours[k] != theirs[k]]
    differ = differ or sorted(set(ours) ^ set(theirs))
    if differ:
        k = differ[0]
        raise ConfigError(
            f"initial-model: {initial.describe()} does not fit this run's model: {k} is "
            f"{theirs.get(k, 'absent')} there, {ours.get(k, 'absent')} here (another image size, "
            "class count or method); give a run of the same data and method"
        )
    return ArrayRecord({k: initial.arrays[k] for k in built})


def _classes(classes: str, dataset: str) -> tuple[str, ...] | None:
    """A run's class list, None where it cannot be read here (a path on another machine)."""
    try:
        return run_classes(classes, dataset)
    except ConfigError:
        return None


def _shown(names: tuple[str, ...]) -> str:
    return ", ".join(names) if len(names) <= 6 else f"{', '.join(names[:5])}, ... ({len(names)})"

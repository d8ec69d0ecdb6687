"""A run's global model on disk, and a run that starts from it (`initial-model`).

`save_state` writes a run's final global model as `global_model.safetensors` (no pickle; the
state dict's key order in its metadata, as safetensors keeps tensors by name) and `load_state`
reads it back. `initial-model` names a finished run's output-dir, a folder `pfedgm-paper
collect` made of one, or that file, with the run's `config.json` beside it. Earlier versions
wrote `global_model.pt`, a torch pickle: a file a user names is never unpickled, so it is
refused, and `collect` converts a finished run's (the app's own output, tensors only).

With `num-server-rounds=0` the run is the personalize round alone, on the SuperNodes connected
now: a device that joined after training gets its personalized model (saved on it, as every
run's clients do) from the trained phi, psi and nu without any client training again.

What cannot work is refused before any message is sent (`read`: the files, the stored run's
method and classes, arrays holding NaN, Inf or values beyond the wire contract's bound), and
before any train or personalize message (`fit`: every array of the model the server builds
from the clients' query replies, by name, shape and dtype).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from flwr.app import ArrayRecord

from pfedgm_app.data import run_classes
from pfedgm_app.runconfig.common import RunConfig
from pfedgm_app.runconfig.settings import ConfigError

from .checkpoint import values_problem
from .run_folder import RunFolder

# The metadata entry of a global model file holding its state dict's key order (JSON list):
# safetensors keeps tensors by name, and a model's order is its modules'
ORDER = "key-order"


@dataclass(frozen=True)
class InitialModel:
    """A stored run's global model (`arrays`) and its `config.json` (`config`)."""

    path: Path
    arrays: dict[str, torch.Tensor]
    config: dict[str, Any]

    @property
    def rounds(self) -> int:
        """The rounds that trained the stored model (its run's `num-server-rounds`)."""
        return int(self.config.get("num-server-rounds", 0) or 0)

    def describe(self) -> str:
        """'a pfedgm model of /x (20 rounds on /data/mnist)'."""
        c = self.config
        return (
            f"a {c.get('method')} model of {self.path} ({c.get('num-server-rounds')} "
            f"rounds on {c.get('dataset')})"
        )


def save_state(state: Mapping[str, torch.Tensor], path: Path) -> Path:
    """`state` as safetensors at `path`: no pickle, each tensor contiguous (safetensors writes
    no strided views), the key order in the metadata (`ORDER`); returns `path`."""
    from safetensors.torch import save_file  # where used: server-side only, a lean import

    tensors = {k: v.contiguous() for k, v in state.items()}
    save_file(tensors, path, metadata={ORDER: json.dumps(list(tensors))})
    return path


def load_state(path: Path) -> dict[str, torch.Tensor]:
    """A `save_state` file's tensors, on the cpu, in their saved order (names the metadata
    does not list follow by name); safetensors' error when the file is not safetensors."""
    from safetensors import safe_open  # where used, as save_state
    from safetensors.torch import load_file

    tensors = load_file(path, device="cpu")
    with safe_open(path, framework="pt") as f:
        order = json.loads((f.metadata() or {}).get(ORDER, "[]"))
    return {k: tensors[k] for k in [*(k for k in order if k in tensors), *tensors]}


def read(cfg: RunConfig) -> InitialModel:
    """The run's `initial-model`, or one ConfigError naming the file and what to do: a missing
    or unreadable file, a legacy torch pickle, no `config.json` beside it, another method,
    other classes, values no round could send (`checkpoint.values_problem`)."""
    given = Path(cfg.initial_model).expanduser()
    folder = RunFolder(given)
    model, legacy = folder.global_model, folder.legacy_global_model
    if given.is_dir() and not model.is_file() and legacy.is_file():
        given = legacy  # an earlier version's run: refused below, by its file
    path = model if given.is_dir() else given
    key = f"initial-model {cfg.initial_model!r}"
    if path.suffix == ".pt" and path.is_file():  # never torch.load: a pickle can run code
        raise ConfigError(
            f"{key}: {path} is a torch pickle (earlier versions wrote {legacy.name}), which is "
            f"not loaded; `pfedgm-paper collect --out <the results folder> --to <folder>` "
            f"converts a finished run's model to {model.name}: give its folder under <folder>"
        )
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
    try:  # safetensors: tensors only, nothing in the file is run
        arrays = load_state(path)
    except Exception as exc:  # any unreadable file: one clear message
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ConfigError(f"{key}: {path} is not a readable model ({why})") from None
    if problem := values_problem(arrays):  # every client would fail on it, rounds later
        raise ConfigError(
            f"{key}: {path} is not used: {problem} (a diverged run, or an altered file); "
            "give a run that trained to finite weights"
        )
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

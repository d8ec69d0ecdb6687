"""What a stopped run resumes from, and who may write a run's folder.

`checkpoint.pt` after every round holds the global arrays and the strategy's state, as tensors
and plain values only (dicts, lists, tuples, str, int, float, bool, None): it is read with
`torch.load(weights_only=True)`, so a file handed over with the folder cannot run code, and one
holding anything else is refused, as is one whose arrays hold NaN or Inf or whose global arrays
exceed the wire contract's `MAX_ABS_VALUE` (a diverged run: every client would fail on it). A
resume (`resume=true`) continues the same experiment only: `check_resume` refuses, before
anything in the folder is touched, a run-config that differs from the stopped run's
`config.json` in any key that changes the computation, and `check_clients` another number of
clients. `FolderLock` keeps a second live run out of an `output-dir`; the operating system
releases it when its process ends, so a killed run leaves nothing stuck.
"""

from __future__ import annotations

import fcntl
import os
import pickle
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from flwr.app import Array, ArrayRecord

from pfedgm_app.runconfig.settings import ConfigError
from pfedgm_app.strategies.contract import MAX_ABS_VALUE

from .run_folder import RunFolder

# Run-config keys a resumed run may change: where and how fast it runs, how long it waits, how
# often it evaluates on the side, and more rounds. Every other key is the experiment itself.
RESUMABLE = frozenset(
    {
        "resume",
        "output-dir",
        "num-server-rounds",
        "round-timeout",
        "node-wait-timeout",
        "client-threads",
        "device",
        "messages-in-flight",
        "eval-every",
        "tracker",
        "tracker-name",
        "commit",
        "tracker-group",
    }
)

# Keys added since some runs stopped: the value that does what a run without the key did, so
# that such a run resumes with it (pull-bound 0: no pull bound) and a change is named.
ABSENT_BEFORE = {"pull-bound": 0.0, "dp-epsilon": 0.0, "dp-noise": 0.0, "dp-clip": 1.0,
                 "dp-clip-quantile": 0.0, "dp-delta": 1e-5}  # fmt: skip


def save(run_dir: Path, server_round: int, arrays: ArrayRecord, strategy: dict) -> Path:
    """`checkpoint.pt` after `server_round`: the global arrays and the strategy's state (numpy
    arrays and plain values; the arrays stored as tensors), written to a temporary file and
    renamed, so a kill leaves the previous one whole."""
    path = RunFolder(run_dir).checkpoint
    tmp = path.with_name(path.name + ".tmp")
    payload = {
        "round": server_round,
        "strategy": _stored(strategy),
        "arrays": {k: _stored(v.numpy()) for k, v in arrays.items()},
    }
    torch.save(payload, tmp)
    os.replace(tmp, path)
    return path


def load(run_dir: Path) -> tuple[int, ArrayRecord, dict]:
    """(rounds done, global arrays, strategy state) of the last checkpoint in `run_dir`, as
    `save` was given them. Raises ConfigError, having run nothing in it, for a file that holds
    more than tensors and plain values, is not a checkpoint of this app, or holds values no
    round could have sent (`values_problem`)."""
    path = RunFolder(run_dir).checkpoint
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:  # an object to build, or no pickle: nothing of it ran
        raise ConfigError(
            f"{path} is not loaded: it holds objects other than tensors and plain values (which "
            "could run code), or is no checkpoint; resume only a run this version of the app "
            "wrote, or start a new run in another output-dir"
        ) from None
    except Exception as exc:  # any unreadable file: one clear message
        reason = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise ConfigError(f"cannot read {path}: {reason}") from exc
    arrays = payload.get("arrays") if isinstance(payload, dict) else None
    if not (
        isinstance(arrays, dict)
        and type(payload.get("round")) is int
        and payload["round"] >= 0
        and isinstance(payload.get("strategy"), dict)
        and all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in arrays.items())
    ):
        raise ConfigError(
            f"{path} is not a checkpoint of this app (round, arrays, strategy state): resume "
            "only a run this app wrote, or start a new run in another output-dir"
        )
    # The global arrays are what clients get: the contract's bound holds for them as for every
    # reply. The strategy's state (counts, say) has no such bound, but a NaN in it is no state.
    problem = values_problem(arrays) or values_problem(
        dict(_tensors(payload["strategy"], "strategy")), bound=None
    )
    if problem:
        raise ConfigError(
            f"{path} is not resumed: {problem} (the run diverged, or the file was altered); "
            "start a new run in another output-dir, or resume from an intact copy"
        )
    arrays = ArrayRecord({k: Array(v.numpy()) for k, v in arrays.items()})
    return payload["round"], arrays, _restored(payload["strategy"])


def values_problem(
    arrays: Mapping[str, torch.Tensor], bound: float | None = MAX_ABS_VALUE
) -> str | None:
    """Why the first of `arrays` that no model or round could hold is unusable (NaN or Inf
    values; beyond `bound` in magnitude, the wire contract's by default), or None."""
    for name, t in arrays.items():
        if t.dtype == torch.bool or t.numel() == 0:
            continue
        if not torch.isfinite(t).all():
            return f"array {name!r} holds NaN or Inf"
        if bound is None:
            continue
        # torch has no abs or max of uint16..64: integers are compared as float64
        values = t if t.is_floating_point() or t.is_complex() else t.double()
        if values.abs().max() > bound:
            return f"array {name!r} holds values beyond {bound:g} in magnitude"
    return None


def _tensors(value: Any, name: str) -> Iterator[tuple[str, torch.Tensor]]:
    """(where, tensor) of every tensor in a stored value, through dicts, lists and tuples."""
    if isinstance(value, torch.Tensor):
        yield name, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _tensors(v, f"{name}/{k}")
    elif type(value) in (list, tuple):
        for i, v in enumerate(value):
            yield from _tensors(v, f"{name}/{i}")


def _stored(value: Any) -> Any:
    """`value` with its numpy arrays as tensors: what `weights_only` loading reads back.
    Exact types only: a numpy scalar (a float subclass) would be pickled as an object."""
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.array(value, order="C"))  # a copy: the caller's may change
    if isinstance(value, dict):
        if bad := [k for k in value if type(k) not in (str, int)]:
            raise TypeError(f"a checkpoint's dict keys are str or int, got {bad[0]!r}")
        return {k: _stored(v) for k, v in value.items()}
    if type(value) in (list, tuple):
        return type(value)(_stored(v) for v in value)
    if value is None or type(value) in (bool, int, float, str):
        return value
    raise TypeError(f"a checkpoint holds numpy arrays and plain values, not {type(value).__name__}")


def _restored(value: Any) -> Any:
    """The inverse of `_stored`: tensors back to numpy arrays."""
    if isinstance(value, torch.Tensor):
        return value.numpy()
    if isinstance(value, dict):
        return {k: _restored(v) for k, v in value.items()}
    if type(value) in (list, tuple):
        return type(value)(_restored(v) for v in value)
    return value


def check_resume(run_dir: Path, config: dict[str, Any]) -> None:
    """Refuse to resume the run in `run_dir` with `config` (its run-config keys) where it would
    mix two experiments: a key outside `RESUMABLE` changed, or fewer rounds than are done."""
    folder = RunFolder(run_dir)
    if not folder.checkpoint.exists():
        raise ConfigError(
            f"resume=true but {run_dir} holds no {folder.checkpoint.name}: give the output-dir "
            "of a stopped run (it writes one after every round), or drop resume"
        )
    if folder.finished:
        raise ConfigError(f"resume=true but the run in {run_dir} finished ({folder.summary.name})")
    before = {**ABSENT_BEFORE, **_stopped_config(run_dir)}
    changed = sorted(k for k in config if k not in RESUMABLE and before.get(k) != config[k])
    if changed:
        diffs = ", ".join(f"{k}: {before.get(k)!r} -> {config[k]!r}" for k in changed)
        raise ConfigError(
            f"resume=true would mix two experiments in {run_dir} ({diffs}); resume with the "
            "stopped run's values, or start a new run in another output-dir"
        )
    if (done := load(run_dir)[0]) > config["num-server-rounds"]:
        raise ConfigError(
            f"num-server-rounds={config['num-server-rounds']} but the run in {run_dir} has "
            f"done {done} rounds: give at least {done}"
        )


def check_clients(run_dir: Path, num_clients: int, min_nodes: int = 0) -> None:
    """Refuse to resume the run in `run_dir` with another number of clients than it had: the
    partition and the sampling depend on it. A federation of devices that come and go
    (`min-nodes`) starts with those connected, any number."""
    before = _stopped_config(run_dir).get("num-clients")
    if not min_nodes and before != num_clients:
        raise ConfigError(
            f"resume=true with {num_clients} clients (SuperNodes) but the run in {run_dir} had "
            f"{before} (num-clients in its config.json): resume with {before}, or start a new "
            "run in another output-dir"
        )


def _stopped_config(run_dir: Path) -> dict[str, Any]:
    try:
        config = RunFolder(run_dir).read_config()
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"cannot resume {run_dir}: its config.json is unreadable ({exc})"
        ) from exc
    if not isinstance(config, dict):
        raise ConfigError(f"cannot resume {run_dir}: its config.json holds no run-config")
    return config


class FolderLock:
    """An exclusive lock on a run's folder, held while its run is alive (`flock` on
    `<folder>/.lock`): a second run into the same `output-dir` is refused."""

    def __init__(self, run_dir: Path) -> None:
        self.path = RunFolder(run_dir).lock
        self.file = open(self.path, "a")  # held open for the run's lifetime
        try:
            fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.file.close()
            raise ConfigError(
                f"output-dir {run_dir} is in use by a live run; wait for it to end, stop it "
                "(flwr stop RUN_ID), or give another output-dir"
            ) from None

    def release(self) -> None:
        if not self.file.closed:
            fcntl.flock(self.file, fcntl.LOCK_UN)
            self.file.close()

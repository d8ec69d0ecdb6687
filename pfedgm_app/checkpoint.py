"""What a stopped run resumes from, and who may write a run's folder.

`checkpoint.pt` after every round holds the global arrays and the strategy's state. A resume
(`resume=true`) continues the same experiment only: `check_resume` refuses, before anything in
the folder is touched, a run-config that differs from the stopped run's `config.json` in any key
that changes the computation. `FolderLock` keeps a second live run out of an `output-dir`; the
operating system releases it when its process ends, so a killed run leaves nothing stuck.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import Any

import torch
from flwr.app import Array, ArrayRecord

from .config import ConfigError

CHECKPOINT = "checkpoint.pt"

# Run-config keys a resumed run may change: where and how fast it runs, how long it waits, how
# often it evaluates on the side, and more rounds. Every other key is the experiment itself.
RESUMABLE = frozenset({"resume", "output-dir", "num-server-rounds", "round-timeout",
                       "node-wait-timeout", "client-threads", "device", "messages-in-flight",
                       "eval-every"})  # fmt: skip


def save(run_dir: Path, server_round: int, arrays: ArrayRecord, strategy: dict) -> Path:
    """`checkpoint.pt` after `server_round`: the global arrays and the strategy's state,
    written to a temporary file and renamed, so a kill leaves the previous one whole."""
    path, tmp = run_dir / CHECKPOINT, run_dir / (CHECKPOINT + ".tmp")
    payload = {"round": server_round, "strategy": strategy,
               "arrays": {k: v.numpy() for k, v in arrays.items()}}  # fmt: skip
    torch.save(payload, tmp)
    os.replace(tmp, path)
    return path


def load(run_dir: Path) -> tuple[int, ArrayRecord, dict]:
    """(rounds done, global arrays, strategy state) of the last checkpoint in `run_dir`."""
    try:  # our own file: numpy arrays and the RNG state are pickled
        payload = torch.load(run_dir / CHECKPOINT, weights_only=False)
        done = int(payload["round"])
    except Exception as exc:  # noqa: BLE001 (any unreadable file: one clear message)
        raise ConfigError(f"cannot read {run_dir / CHECKPOINT}: {exc}") from exc
    arrays = ArrayRecord({k: Array(v) for k, v in payload["arrays"].items()})
    return done, arrays, payload["strategy"]


def check_resume(run_dir: Path, config: dict[str, Any]) -> None:
    """Refuse to resume the run in `run_dir` with `config` (its run-config keys) where it would
    mix two experiments: a key outside `RESUMABLE` changed, or fewer rounds than are done."""
    if not (run_dir / CHECKPOINT).exists():
        raise ConfigError(
            f"resume=true but {run_dir} holds no {CHECKPOINT}: give the output-dir of a "
            "stopped run (it writes one after every round), or drop resume"
        )
    if (run_dir / "summary.json").exists():
        raise ConfigError(f"resume=true but the run in {run_dir} finished (summary.json)")
    try:
        before = json.loads((run_dir / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"cannot resume {run_dir}: its config.json is unreadable ({exc})"
        ) from exc
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


class FolderLock:
    """An exclusive lock on a run's folder, held while its run is alive (`flock` on
    `<folder>/.lock`): a second run into the same `output-dir` is refused."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / ".lock"
        self.file = open(self.path, "a")  # noqa: SIM115 (held open for the run's lifetime)
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

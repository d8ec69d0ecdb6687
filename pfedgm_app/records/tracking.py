"""Experiment tracking, Flower's way: as examples/advanced-pytorch logs each round to Weights &
Biases from the strategy's loop, the ServerApp writes every round's figures, the run's config
and the final per-client accuracies to TensorBoard or W&B (run-config `tracker`, off by
default; `pip install -e ".[track]"`). The run's own files stay the record: a tracker that
fails is named in one warning and left, and the run goes on.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping
from logging import WARNING
from pathlib import Path
from typing import Any, Literal, Protocol

from flwr.common import log

from pfedgm_app.protocol import wire


class Tracker(Protocol):
    def log_round(self, server_round: int, figures: Mapping[str, float]) -> None: ...

    def finish(self, last_round: int, summary: Mapping[str, Any], clients: list[dict]) -> None: ...


def figures(row: Mapping[str, Any]) -> dict[str, float]:
    """The finite numbers of a `rounds.jsonl` line, by key (not its round): what a tracker
    plots."""
    return {
        k: float(v)
        for k, v in row.items()
        if k != "round" and isinstance(v, int | float) and not isinstance(v, bool)
        and math.isfinite(v)
    }  # fmt: skip


class TensorBoard:
    """Event files in `<output-dir>/tensorboard` (`tensorboard --logdir <output-dir>`): each
    figure a scalar by round, the config as text, each client's final accuracy a scalar."""

    def __init__(self, folder: Path, config: Mapping[str, Any]) -> None:
        from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package

        self.writer = SummaryWriter(str(folder))
        self.writer.add_text("config", f"```\n{json.dumps(dict(config), indent=1)}\n```")

    def log_round(self, server_round: int, figures: Mapping[str, float]) -> None:
        for key, value in figures.items():
            self.writer.add_scalar(key, value, server_round)
        self.writer.flush()

    def finish(self, last_round: int, summary: Mapping[str, Any], clients: list[dict]) -> None:
        for key, value in figures(summary).items():
            self.writer.add_scalar(f"final/{key}", value, last_round)
        for row in clients:
            tag = f"client-accuracy/{int(row[wire.PARTITION_ID])}"
            self.writer.add_scalar(tag, 100 * float(row[wire.ACCURACY]), last_round)
        self.writer.close()


class WandB:
    """A W&B run in `<output-dir>/wandb`, offline unless the environment says otherwise
    (`WANDB_MODE`, or `WANDB_API_KEY` set: online); `wandb sync` uploads an offline one."""

    def __init__(self, folder: Path, config: Mapping[str, Any], name: str, group: str) -> None:
        try:
            import wandb
        except ImportError as exc:  # the `track` extra; `pfedgm check` names it before this
            raise RuntimeError("tracker='wandb' needs wandb: pip install -e '.[track]'") from exc
        mode: Literal["online", "offline"] | None = None  # None: wandb reads WANDB_MODE
        if not os.environ.get("WANDB_MODE"):
            mode = "online" if os.environ.get("WANDB_API_KEY") else "offline"
        self.wandb = wandb
        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "pfedgm"), name=name or None,
            group=group or None, dir=str(folder), config=dict(config), mode=mode,
        )  # fmt: skip

    def log_round(self, server_round: int, figures: Mapping[str, float]) -> None:
        self.run.log(dict(figures), step=server_round)

    def finish(self, last_round: int, summary: Mapping[str, Any], clients: list[dict]) -> None:
        self.run.summary.update(figures(summary))
        columns: list[str | int] = [wire.PARTITION_ID, wire.ACCURACY, wire.NUM_TEST]  # W&B's
        rows = [[int(r[k]) if k != wire.ACCURACY else 100 * float(r[k]) for k in columns]
                for r in clients]  # fmt: skip
        self.run.log({"clients": self.wandb.Table(columns=columns, data=rows)}, step=last_round)
        self.run.finish()


class Tracking:
    """The run's tracker, or none: every call guarded, so that a tracker's failure costs the
    tracking only (one warning), never the run."""

    def __init__(self, kind: str, run_dir: Path, config: Mapping[str, Any], name: str, group: str):
        self.tracker: Tracker | None = None
        opened = {
            "tensorboard": lambda: TensorBoard(run_dir / "tensorboard", config),
            "wandb": lambda: WandB(run_dir, config, name, group),
        }.get(kind)
        if opened is not None:
            self._guard(lambda: setattr(self, "tracker", opened()))

    def _guard(self, call: Callable[[], object]) -> None:
        try:
            call()
        except Exception as exc:
            log(
                WARNING,
                "pFedGM app: tracking stopped (%s: %s); the run's files go on",
                type(exc).__name__,
                exc,
            )
            self.tracker = None

    def log_round(self, server_round: int, row: Mapping[str, Any]) -> None:
        if (tracker := self.tracker) is not None:
            self._guard(lambda: tracker.log_round(server_round, figures(row)))

    def finish(self, last_round: int, summary: Mapping[str, Any], clients: list[dict]) -> None:
        if (tracker := self.tracker) is not None:
            self._guard(lambda: tracker.finish(last_round, summary, clients))
            self.tracker = None

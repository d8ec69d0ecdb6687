"""What a run writes to `output-dir`: config, per-round metrics, per-client accuracies, the final
global weights and `summary.json`. Files are written as the run goes, so nothing already
written is lost if a later step fails.
"""

from __future__ import annotations

import csv
import json
import tempfile
import time
from logging import WARNING
from pathlib import Path
from typing import Any

import torch
from flwr.app import ArrayRecord, MetricRecord
from flwr.common import log

from .config import ConfigError, RunConfig


class RunWriter:
    """Writes one run's outputs into `run_dir`."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir

    @classmethod
    def create(cls, cfg: RunConfig) -> RunWriter:
        """`output-dir` as given, or `outputs/<time>-<method>` when empty; refuses to overwrite
        a finished run. Files of an unfinished run there (one that was stopped) move to
        `unfinished-<time>-<random>/`, so the new run's `rounds.jsonl` does not continue the
        old one's.
        """
        stamp = time.strftime("%Y%m%d-%H%M%S")
        run_dir = Path(cfg.output_dir or f"outputs/{stamp}-{cfg.method}").expanduser().resolve()
        if (run_dir / "summary.json").exists():
            raise ConfigError(
                f"output-dir {run_dir} already holds a finished run (summary.json); "
                "choose another output-dir or leave it empty for a fresh timestamped folder"
            )
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            leftovers = [p for p in run_dir.iterdir() if p.is_file()]
            if leftovers:  # mkdtemp: two runs stopped in the same second get distinct folders
                kept = Path(tempfile.mkdtemp(prefix=f"unfinished-{stamp}-", dir=run_dir))
                for path in leftovers:
                    path.rename(kept / path.name)
                log(WARNING, "output-dir held an unfinished run: its files moved to %s", kept)
        except OSError as exc:
            raise ConfigError(f"cannot prepare output-dir {run_dir}: {exc}") from exc
        return cls(run_dir)

    def write_json(self, name: str, payload: Any) -> Path:
        path = self.run_dir / name
        path.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")
        return path

    def append_round(self, server_round: int, metrics: MetricRecord | None, **extra) -> None:
        row = {"round": server_round, **dict(metrics or {}), **extra}
        with open(self.run_dir / "rounds.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")

    def save_weights(self, arrays: ArrayRecord) -> Path:
        path = self.run_dir / "global_model.pt"
        torch.save(arrays.to_torch_state_dict(), path)
        return path

    def write_clients(self, rows: list[dict[str, float]]) -> Path:
        path = self.run_dir / "clients.csv"
        keys = sorted({k for r in rows for k in r}, key=lambda k: (k != "partition-id", k))
        rows = sorted(rows, key=lambda r: r.get("partition-id", 0))
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=keys)
            writer.writeheader()
            writer.writerows(rows)
        return path

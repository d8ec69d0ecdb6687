"""The files of a run's folder (its `output-dir`), named in one place (docs/outputs.md): what
`results.RunWriter` writes, and what a resume, `initial-model`, the paper's grid, the devtools
and the benchmarks read back. Standard library only (and `config`, which is too): the
ClientApp imports it for the `models/` folder.
"""

from __future__ import annotations

import json
import logging
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .config import ConfigError

# flwr's own logger (`flwr.common.log` writes to it), without importing flwr here
LOG = logging.getLogger("flwr")


@dataclass(frozen=True)
class RunFolder:
    """A run's folder: where each of its files is, whether the run finished or stopped, and
    the readers of what it wrote."""

    path: Path

    @property
    def config(self) -> Path:
        """The resolved run-config, number of clients, Flower version."""
        return self.path / "config.json"

    @property
    def rounds(self) -> Path:
        """One line of strict JSON per round."""
        return self.path / "rounds.jsonl"

    @property
    def summary(self) -> Path:
        """Written last, only by a run that finished."""
        return self.path / "summary.json"

    @property
    def clients(self) -> Path:
        """Per client: partition id, accuracies, train/test sizes."""
        return self.path / "clients.csv"

    @property
    def global_model(self) -> Path:
        """The final global weights (torch state dict)."""
        return self.path / "global_model.pt"

    @property
    def checkpoint(self) -> Path:
        """What a stopped run resumes from, rewritten after every round."""
        return self.path / "checkpoint.pt"

    @property
    def plot(self) -> Path:
        """Loss and personalized accuracy per round."""
        return self.path / "accuracy.png"

    @property
    def models(self) -> Path:
        """The clients' personalized models, where their devices have no `model-dir`."""
        return self.path / "models"

    @property
    def lock(self) -> Path:
        """Held (`flock`) by the live run writing here."""
        return self.path / ".lock"

    @property
    def finished(self) -> bool:
        return self.summary.exists()

    @property
    def stopped(self) -> bool:
        """Stopped after some round: a checkpoint, no summary."""
        return self.checkpoint.exists() and not self.finished

    def new_unfinished(self) -> Path:
        """A new `unfinished-<time>-<random>/` inside the folder, for the files of a stopped
        run a new one replaces (mkdtemp: two runs stopped in the same second get two)."""
        stamp = time.strftime("%Y%m%d-%H%M%S")
        return Path(tempfile.mkdtemp(prefix=f"unfinished-{stamp}-", dir=self.path))

    def read_config(self) -> dict[str, Any]:
        """`config.json` as written; OSError or ValueError as reading and parsing raise them."""
        return json.loads(self.config.read_text())

    def read_summary(self) -> dict[str, Any]:
        """`summary.json` as written; OSError or ValueError as reading and parsing raise them."""
        return json.loads(self.summary.read_text())

    def read_rounds(self) -> list[dict]:
        """The lines of `rounds.jsonl` ([] without one; blank lines skipped). A torn last line
        (a kill mid-write) is dropped with a warning; any other line that is not JSON raises
        ConfigError naming it."""
        path = self.rounds
        lines = path.read_text().splitlines() if path.exists() else []
        rows = []
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                if i < len(lines) - 1:
                    raise ConfigError(f"{path}: line {i + 1} is not JSON; repair it") from None
                LOG.warning("%s: its last line was cut short (a stopped run); dropped", path)
        return rows

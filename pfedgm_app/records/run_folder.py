"""The files of a run's folder (its `output-dir`), named, written and read in one place
(docs/outputs.md): `results.RunWriter` writes through it, and a resume, `initial-model`, the
paper's grid, the devtools and the benchmarks read back through it. Standard library only (and
`config`, which is too): the ClientApp imports it for the `models/` folder.

Format version 2 spells every key of `summary.json`, `clients.csv` and `rounds.jsonl` in
kebab-case (as Flower's run-config and metric names) and every accuracy in percent (as the
paper's tables); `summary.json` and `config.json` carry `format-version`. A folder without it is
version 1 (snake_case keys, accuracies as fractions): the readers refuse it in one line, and
`python -m devtools.migrate_records FOLDER` rewrites it in version 2.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pfedgm_app.runconfig.settings import ConfigError

# flwr's own logger (`flwr.common.log` writes to it), without importing flwr here
LOG = logging.getLogger("flwr")

FORMAT_VERSION = 2
"""The format version this code writes (and the readers return)."""
VERSION = "format-version"
"""The key of the format version in summary.json and config.json; config.json, written first,
versions the folder's other files."""


def is_accuracy(column: str) -> bool:
    """An accuracy of clients.csv (`accuracy`, `acc-global`, ...: the personalize replies'
    `acc*` metrics, `strategies.personalization_result.summarize`): a fraction in a reply,
    percent in the file."""
    return column.startswith("acc")


def in_percent(row: dict[str, Any]) -> dict[str, Any]:
    """A clients.csv row with its accuracies, fractions as the clients reply, in percent."""
    return {
        k: 100 * v if is_accuracy(k) and isinstance(v, int | float) else v for k, v in row.items()
    }


def strict_json(value: Any, **kwargs) -> str:
    """JSON that every reader accepts: NaN and infinities written as null."""

    def finite(v: Any) -> Any:
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, dict):
            return {k: finite(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [finite(x) for x in v]
        return v

    return json.dumps(finite(value), allow_nan=False, **kwargs)


def _number(text: str) -> int | float | str:
    """A clients.csv cell: an int as written (node ids exceed a float's 53 bits), else a float,
    else the text."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


@dataclass(frozen=True)
class RunFolder:
    """A run's folder (its `output-dir`): where each of its files is (the properties below,
    paths that may not exist yet), whether the run finished or stopped, the readers of what it
    wrote (`read_*`, any format version, returned as version 2) and the writers the app's
    `results.RunWriter` and `run_outputs.RunOutputs` write through (`write_*`, `append_round`).

        folder = RunFolder(Path("/abs/outputs/smoke"))
        if folder.finished:
            print(folder.read_summary()["mean-accuracy"], len(folder.read_clients()))
    """

    path: Path
    """The folder itself; nothing is created by naming it."""

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
        """The final global weights: a state dict as safetensors (no pickle), the key order in
        its metadata (`initial_model.save_state`)."""
        return self.path / "global_model.safetensors"

    @property
    def legacy_global_model(self) -> Path:
        """Earlier versions' `global_model`, a torch pickle: only `pfedgm-paper collect` reads
        it (tensors only), converting it; anything else refuses it."""
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
        """The run finished: its `summary.json` is there (written last)."""
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

    @property
    def format_version(self) -> int:
        """The version the folder's files were written in: config.json's (written first), else
        summary.json's (a copy without its config); 1 for either without a version (written
        before versions); this code's when neither is there."""
        for path in (self.config, self.summary):
            try:
                record = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(record, dict):
                return int(record.get(VERSION, 1))
        return FORMAT_VERSION

    def read_config(self) -> dict[str, Any]:
        """`config.json` as written (run-config keys, kebab-case in every version); OSError or
        ValueError as reading and parsing raise them."""
        return json.loads(self.config.read_text())

    def read_summary(self) -> dict[str, Any]:
        """`summary.json` as written; OSError or ValueError as reading and parsing raise them,
        ConfigError for a folder of format version 1 (`check_version`)."""
        self.check_version()
        return json.loads(self.summary.read_text())

    def read_clients(self) -> list[dict[str, Any]]:
        """The rows of `clients.csv`, each cell a number (an empty one, a metric its client did
        not report, left out), accuracies in percent; OSError as reading raises it, ConfigError
        for a folder of format version 1 (`check_version`)."""
        self.check_version()
        with self.clients.open(newline="") as f:
            return [
                {k: _number(v) for k, v in r.items() if v not in ("", None)}
                for r in csv.DictReader(f)
            ]

    def check_version(self) -> None:
        """ConfigError, in one line saying how to rewrite it, for a folder written before
        format versions (version 1: snake_case summary keys, accuracies as fractions)."""
        if self.format_version < FORMAT_VERSION:
            raise ConfigError(
                f"{self.path}: written in format version {self.format_version}, read in "
                f"{FORMAT_VERSION}; rewrite it with `python -m devtools.migrate_records "
                f"{self.path}` (a checkout of the app)"
            )

    def read_rounds(self) -> list[dict]:
        """The lines of `rounds.jsonl` ([] without one; blank lines skipped), kebab-case keys,
        accuracies in percent (the same in version 1). A torn last line (a kill mid-write)
        is dropped with a warning; any other line that is not JSON raises ConfigError naming
        it."""
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

    def write_config(self, config: dict[str, Any]) -> None:
        """`config.json`, the first file of a run: its run-config and the format version."""
        self._write_json(self.config, config)

    def write_summary(self, summary: dict[str, Any]) -> None:
        """`summary.json`, the last file of a finished run, in this format version."""
        self._write_json(self.summary, summary)

    def write_clients(self, rows: list[dict[str, float]]) -> None:
        """`clients.csv` from `rows` as the personalize replies carry them (accuracies as
        fractions, `wire.ACCURACY`), accuracies written in percent; partition-id first."""
        keys = sorted({k for r in rows for k in r}, key=lambda k: (k != "partition-id", k))
        rows = sorted(rows, key=lambda r: r.get("partition-id", 0))
        with self.clients.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=keys)
            writer.writeheader()
            writer.writerows(in_percent(r) for r in rows)

    def append_round(self, row: dict[str, Any]) -> None:
        """One line of `rounds.jsonl`, strict JSON (a non-finite number is null)."""
        with self.rounds.open("a") as f:
            f.write(strict_json(row) + "\n")

    def write_rounds(self, rows: list[dict[str, Any]]) -> None:
        """`rounds.jsonl` rewritten whole and renamed: a kill leaves the old file."""
        tmp = self.rounds.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(strict_json(r) + "\n" for r in rows))
        os.replace(tmp, self.rounds)

    def _write_json(self, path: Path, record: dict[str, Any]) -> None:
        path.write_text(
            strict_json({**record, VERSION: FORMAT_VERSION}, indent=2, sort_keys=True) + "\n"
        )

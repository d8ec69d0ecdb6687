"""A finished run's folder as the paper's tables read it, for the `pfedgm_paper` tests."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from pfedgm_app.records.run_folder import RunFolder


def _fake_run(out: Path, column: str, run: str, seed: int, accuracies: list[float],
              rounds: int = 3, minutes: float = 1.0, version: int = 2,
              per_round: float = 10.0) -> RunFolder:  # fmt: skip
    """A finished run's folder: clients.csv (partition i has test size 10 + i; `accuracies` as
    the clients reply them, fractions) and summary, in format `version` (1: as records were
    written before format versions, fractions and snake_case, no format-version)."""
    folder = RunFolder(out / column / run / f"seed{seed}")
    folder.path.mkdir(parents=True)
    rows = [{"partition-id": i, "accuracy": acc, "acc-finetune": acc / 2, "num-test": 10 + i}
            for i, acc in enumerate(accuracies)]  # fmt: skip
    if version == 2:
        folder.write_clients(rows)
        folder.write_summary(
            {"rounds": rounds, "seconds-total": 60 * minutes, "seconds-per-round": per_round}
        )
        return folder
    with folder.clients.open("w", newline="") as f:
        writer = csv.DictWriter(f, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    folder.summary.write_text(
        json.dumps(
            {"rounds": rounds, "seconds_total": 60 * minutes, "seconds_per_round": per_round}
        )
    )
    return folder

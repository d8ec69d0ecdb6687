"""Run folders of format version 1 rewritten in version 2, in place (docs/outputs.md):

    python -m devtools.migrate_records FOLDER...

Version 1 (no `format-version` in `summary.json` and `config.json`) named `summary.json`'s keys
in snake_case and wrote `clients.csv`'s accuracies as fractions; version 2 spells them in
kebab-case and in percent. Every run folder below each FOLDER is rewritten: the two JSON files
under version 2's keys with `format-version`, `clients.csv`'s accuracy columns (`acc*`) times
100; `rounds.jsonl` is the same in both. Each folder is read back after its rewrite and
compared with its version-1 reading; a folder already in version 2 is left as it is.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Any

from pfedgm_app.records.run_folder import (
    FORMAT_VERSION,
    VERSION,
    RunFolder,
    in_percent,
    is_accuracy,
)

# Version 1's summary.json keys (top level and `accuracy_by_type`'s entries); the other keys
# (`method`, `rounds`, `failures`, ...) and the names of client types are the same in both.
SNAKE = (
    "ablation_mean_accuracy", "accuracy_by_type", "accuracy_note", "dirichlet_alpha",
    "dropped_replies", "fraction_train", "mean_accuracy", "num_clients",
    "num_clients_evaluated", "output_dir", "resumed_after_round", "rounds_without_update",
    "seconds_per_round", "seconds_personalize", "seconds_total", "seconds_training",
    "std_accuracy", "unweighted_mean_accuracy",
)  # fmt: skip
KEYS_V2 = {k: k.replace("_", "-") for k in SNAKE}


def summary_v2(record: dict[str, Any]) -> dict[str, Any]:
    """A version-1 summary.json record under version 2's keys; its numbers unchanged."""
    out = {KEYS_V2.get(k, k): v for k, v in record.items()}
    if isinstance(by_type := out.get("accuracy-by-type"), dict):
        out["accuracy-by-type"] = {
            kind: {KEYS_V2.get(k, k): v for k, v in stats.items()}
            for kind, stats in by_type.items()
        }
    return {**out, VERSION: FORMAT_VERSION}


def clients_v2(path: Path) -> None:
    """clients.csv's accuracy columns (`acc*`), fractions in version 1, in percent."""
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        fields, rows = reader.fieldnames or [], list(reader)
    for row in rows:
        for k, v in row.items():
            if is_accuracy(k) and v not in ("", None):
                row[k] = repr(100 * float(v))
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)


def migrate(folder: Path) -> bool:
    """Rewrite the run folder `folder` in version 2; False when it already is."""
    run = RunFolder(folder)
    if run.format_version >= 2:
        return False
    summary = json.loads(run.summary.read_text()) if run.summary.exists() else None
    before = [in_percent(row) for row in (_rows(run.clients) if run.clients.exists() else [])]
    if run.config.exists():
        run.write_config(json.loads(run.config.read_text()))
    if summary is not None:
        run.write_summary(summary_v2(summary))
        assert run.read_summary() == summary_v2(summary), folder
    if run.clients.exists():
        clients_v2(run.clients)
        after = run.read_clients()
        assert [r.keys() for r in after] == [r.keys() for r in before], folder
        assert all(
            abs(a[k] - b[k]) < 1e-9 for a, b in zip(after, before, strict=True) for k in a
        ), folder
    return True


def _rows(path: Path) -> list[dict[str, float]]:
    with path.open(newline="") as f:
        return [{k: float(v) for k, v in r.items() if v} for r in csv.DictReader(f)]


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.split("\n\n")[1].strip(), file=sys.stderr)
        return 2
    folders = {p.parent for root in map(Path, argv) for p in root.rglob("*.json")}
    done = [f for f in sorted(folders) if (f / "summary.json").exists() and migrate(f)]
    print(f"{len(done)} run folders rewritten in format {FORMAT_VERSION}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

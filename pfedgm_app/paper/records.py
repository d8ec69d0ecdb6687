"""Run records that travel: a committed config.json or summary.json names no absolute path of
the machine that ran it.

A dataset under a `shared/data/<name>` folder becomes `shared:<name>` (the form `dataset`
itself accepts, `data/sources.py`); an output folder becomes the run's folder below the results
folder it was collected into (`<preset>/<run>/seed<seed>`); any other absolute path keeps its
last part only. `pfedgm-paper collect` writes records this way;

    python -m pfedgm_app.paper.records FOLDER...

rewrites the config.json and summary.json files below each FOLDER in place.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path, PurePosixPath
from typing import Any

from ..run_folder import RunFolder

# Keys whose values are paths: config.json's run-config keys and summary.json's, in kebab-case
# (format version 2) or snake_case (version 1: records are rewritten in the version they have)
PATH_KEYS = (
    "dataset",
    "output-dir",
    "output_dir",
    "frost-dir",
    "initial-model",
    "client-state-dir",
)
OUTPUT_KEYS = ("output-dir", "output_dir")


def portable(value: Any, run_name: str) -> Any:
    """A path value as a record that travels carries it (module docstring)."""
    if not isinstance(value, str) or not value.startswith("/"):
        return value
    parts = PurePosixPath(value).parts
    for i in range(len(parts) - 2):
        if parts[i : i + 2] == ("shared", "data"):
            rest = "/".join(parts[i + 2 :])
            return f"shared:{rest}" if rest else value
    return parts[-1] if len(parts) > 1 else value


def portable_record(record: dict[str, Any], run_name: str) -> dict[str, Any]:
    """`record` (config.json's or summary.json's) with every path value made portable; the
    output folder becomes `run_name`."""
    out = dict(record)
    for key in PATH_KEYS:
        if key in out and isinstance(out[key], str) and out[key].startswith("/"):
            out[key] = run_name if key in OUTPUT_KEYS else portable(out[key], run_name)
    return out


def rewrite(folder: RunFolder, run_name: str) -> None:
    """Make `folder`'s config.json and summary.json portable, in place."""
    for path in (folder.config, folder.summary):
        if path.exists():
            record = json.loads(path.read_text())
            path.write_text(
                json.dumps(portable_record(record, run_name), indent=2, sort_keys=True) + "\n"
            )


def main(argv: list[str]) -> int:
    count = 0
    names = (RunFolder(Path()).config.name, RunFolder(Path()).summary.name)
    for root in map(Path, argv):
        runs = sorted({p.parent for name in names for p in root.rglob(name)})
        for folder in map(RunFolder, runs):
            rewrite(folder, str(folder.path.relative_to(root)))
            count += 1
    print(f"{count} run records made portable")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

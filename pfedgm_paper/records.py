"""Run records that travel: a committed config.json or summary.json names no absolute path of
the machine that ran it.

A dataset under a `shared/data/<name>` folder becomes `shared:<name>` (the form `dataset`
itself accepts, `data/sources.py`); an output folder becomes the run's folder below the results
folder it was collected into (`<preset>/<run>/seed<seed>`); any other absolute path keeps its
last part only. `pfedgm-paper collect` writes records this way (`copy_results`: the records
and the run's final global model);

    python -m pfedgm_paper.records FOLDER...

rewrites the config.json and summary.json files below each FOLDER in place.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path, PurePosixPath
from typing import Any

from pfedgm_app.records.run_folder import RunFolder

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


MAX_KEPT_MODEL = 1 << 20  # a collected model is committed beside its records: small ones only


def copy_results(source: RunFolder, to: Path, run_name: str | None = None) -> bool:
    """What the tables and figures read of a finished run (summary, clients, rounds, config)
    and its final global model, copied into `to` with no absolute path of this machine
    (`records.rewrite`: the output folder becomes `run_name`, default `to`'s name); no
    checkpoint. The model, safetensors, lets a later study start from `to` (`initial-model`,
    `num-server-rounds=0`): an earlier version's `global_model.pt` is converted
    (`convert_legacy`); one over `MAX_KEPT_MODEL` (TinyImageNet's CNN) stays in the run's own
    folder only, and a run of no round keeps none (it is its initial-model's). Returns whether
    `to` holds the model."""
    to.mkdir(parents=True, exist_ok=True)
    kept = RunFolder(to)
    for path in (source.summary, source.clients, source.rounds, source.config, source.global_model):
        if path.exists():
            shutil.copy2(path, to / path.name)
    if not source.global_model.exists() and source.legacy_global_model.exists():
        convert_legacy(source.legacy_global_model, kept.global_model)
    trained = int(source.read_config().get("num-server-rounds", 1)) if source.config.exists() else 1
    if kept.global_model.exists() and not trained:  # its model is its initial-model's
        kept.global_model.unlink()
    elif kept.global_model.exists() and kept.global_model.stat().st_size > MAX_KEPT_MODEL:
        kept.global_model.unlink()  # a results folder is committed: the run's own copy stays
        print(f"{source.global_model}: over {MAX_KEPT_MODEL >> 20} MiB, not collected")
    rewrite(kept, run_name or to.name)
    return kept.global_model.exists()


def convert_legacy(pt: Path, to: Path) -> bool:
    """An earlier version's `global_model.pt` (the app's own output on this machine, unpickled
    as tensors only: `weights_only`) saved as safetensors at `to`; else False, with one line
    naming the file (the run's records are copied all the same)."""
    import torch

    from pfedgm_app.records.initial_model import save_state

    try:
        state = torch.load(pt, map_location="cpu", weights_only=True)
        if not isinstance(state, dict) or not all(
            isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
        ):
            raise ValueError("not a state dict of tensors")
        save_state(state, to)
    except Exception as exc:  # whatever the file holds: one line, the next run
        to.unlink(missing_ok=True)
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        print(f"{pt}: model not collected ({why})", file=sys.stderr)
        return False
    return True


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

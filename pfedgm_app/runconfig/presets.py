"""The paper's experiments as named presets: one per cell group of its tables.

`PRESETS` is the one source, applied by name through the run-config key `preset`, so that a
preset combines with key=value overrides:

    flwr run . --run-config "preset='cifar100-dir01' method='fedpac'" \\
        --federation-config "num-supernodes=100"

A preset's keys replace the defaults; a key given on the command line with a value other than
its default wins over the preset (a key set back to its default is indistinguishable from one
not given, so the preset's value stays). Every preset has an `-offline` variant reading the
local copies under `<ancestor>/shared/data` (`dataset='shared:<folder>'`); EMNIST's reads real
EMNIST ByClass (62 classes), of which only the official test split is there (116,323 images:
about 116 per client at 1000 clients, the paper's about 814; see that folder's README).
"""

from __future__ import annotations

import difflib
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .settings import ConfigError


@dataclass(frozen=True)
class Preset:
    """A run-config (`keys`), the table of the paper it reproduces and its SuperNode count."""

    name: str
    table: str
    num_supernodes: int
    keys: dict[str, Any] = field(default_factory=dict)


def toml_value(value: Any) -> str:
    """A value as it is written in TOML (`pyproject.toml`, `--run-config`)."""
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, bool):
        return str(value).lower()
    return repr(value)


# hub id, local folder under shared/data, clients, q, batch size (the paper's Experimental setup)
DATASETS = {
    "emnist": ("flwrlabs/femnist", "emnist", 1000, 0.03, 16),
    "cifar10": ("uoft-cs/cifar10", "cifar10", 100, 0.3, 50),
    "cifar100": ("uoft-cs/cifar100", "cifar100", 100, 0.3, 50),
    "tinyimagenet": ("zh-plus/tiny-imagenet", "tinyimagenet", 100, 0.3, 50),
}
ALPHAS = {"dir01": 0.1, "dir05": 0.5}


def _papers() -> list[Preset]:
    smoke = {"num-server-rounds": 2, "fraction-train": 0.5, "local-epochs": 1, "pool-size": 4000}
    presets = [Preset("smoke", "A two-minute check that the app works end to end", 4, smoke)]

    def base(data: str, alpha: float, **keys) -> dict[str, Any]:
        hub, _, _, q, batch = DATASETS[data]
        common = {"dataset": hub, "dirichlet-alpha": alpha, "fraction-train": q}
        return {**common, **({"batch-size": batch} if batch != 50 else {}), **keys}

    for data, (_, _, clients, _, _) in DATASETS.items():
        for tag, alpha in ALPHAS.items():
            table = f"Table 'standard': {data} Dir({alpha}), {clients} clients"
            presets.append(Preset(f"{data}-{tag}", table, clients, base(data, alpha)))
    for data in ("cifar10", "cifar100"):
        for tag, alpha in ALPHAS.items():
            for assignment in ("50C", "100C"):
                name = f"{data}s-{tag}-{assignment.lower()}"
                table = f"Table 'corruption': {data.upper()}S Dir({alpha}) {assignment}"
                presets.append(Preset(name, table, 100, base(data, alpha, corruption=assignment)))
    for data in ("cifar10", "cifar100"):  # q = 0.1 figure; the paper leaves alpha open: 0.5
        for suffix, extra in (("", {}), ("s", {"corruption": "100C"})):
            table = f"Figure 'q = 0.1': {data.upper()}{suffix.upper()} Dir(0.5), accuracy per round"
            keys = base(data, 0.5, **extra, **{"fraction-train": 0.1, "eval-every": 10})
            presets.append(Preset(f"{data}{suffix}-q01", table, 100, keys))
    for data in DATASETS:  # 20 clients (EMNIST 200), 2 local epochs
        moderate = 200 if data == "emnist" else 20
        for tag, alpha in ALPHAS.items():
            table = f"Table 'moderate': {data} Dir({alpha}), {moderate} clients, 2 local epochs"
            keys = base(data, alpha, **{"local-epochs": 2})
            presets.append(Preset(f"moderate-{data}-{tag}", table, moderate, keys))
    table = (
        "Table 'generalize': new clients, CIFAR-10 Dir(0.5); trains on clients 0..44 (q = 0.6), "
        "evaluates the unseen 45..99 per type"
    )
    keys = base("cifar10", 0.5, **{"fraction-train": 0.6, "protocol": "generalization"})
    presets.append(Preset("generalization", table, 100, keys))
    return presets + [_offline(p) for p in presets]


def _offline(preset: Preset) -> Preset:
    """The same preset reading `<ancestor>/shared/data/<folder>`."""
    hub = preset.keys.get("dataset", "uoft-cs/cifar10")
    folder = next(local for h, local, *_ in DATASETS.values() if h == hub)
    keys = {**preset.keys, "dataset": f"shared:{folder}"}
    note = f"offline: shared/data/{folder}"
    if folder == "emnist" and preset.num_supernodes >= 1000 and keys["dirichlet-alpha"] < 0.5:
        # 116 images a client on average: no Dir(0.1) draw gives each of 1000 clients 50
        # training samples (the default floor); 20 leaves the smallest client 22.
        keys["min-train-samples"] = 20
        note += ", min-train-samples 20: 116 images per client"
    name, table = f"{preset.name}-offline", f"{preset.table} ({note})"
    return Preset(name, table, preset.num_supernodes, keys)


PRESETS: dict[str, Preset] = {p.name: p for p in _papers()}


def preset_keys(name: str) -> dict[str, Any]:
    """The keys of preset `name` (a name of `PRESETS`, or the path of a TOML file)."""
    if name in PRESETS:
        return dict(PRESETS[name].keys)
    path = Path(name).expanduser()
    if name.endswith(".toml") and path.is_file():
        return tomllib.loads(path.read_text())
    nearest = difflib.get_close_matches(name, list(PRESETS), n=3)
    hint = f"did you mean {', '.join(nearest)}?" if nearest else "docs/presets.md lists them"
    raise ConfigError(
        f"unknown preset {name!r}: {hint} (a preset's name, or the path of a TOML file; "
        f"{len(PRESETS)} presets)"
    )


def apply_preset(run_config: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """`run_config` with its `preset`'s keys in place of the keys left at their defaults."""
    name = run_config.get("preset", "")
    if not name:
        return dict(run_config)
    merged = dict(run_config)
    for key, value in preset_keys(str(name)).items():
        if key == "preset":
            raise ConfigError(f"preset {name!r} names another preset: presets do not nest")
        if key not in run_config or run_config[key] == defaults.get(key):
            merged[key] = value
    return merged


def dropped_by_preset(run_config: dict[str, Any], defaults: dict[str, Any]) -> list[str]:
    """One line per key of `run_config` that `apply_preset` replaces by the preset's value:
    given at its default, it cannot be told from a key not given."""
    name = str(run_config.get("preset", ""))
    if not name:
        return []
    keys = preset_keys(name)
    return [
        f"{key}={toml_value(value)} is its default, so preset {name!r} keeps its "
        f"{toml_value(keys[key])}; to run with {toml_value(value)}, give a copy of "
        f"conf/{name}.toml with it as --run-config"
        for key, value in run_config.items()
        if key in keys and key != "preset" and value == defaults.get(key) != keys[key]
    ]


def conf_file(preset: Preset) -> str:
    """`conf/<name>.toml`: the preset's keys as a run-config file, which `flwr run .
    --run-config conf/<name>.toml` takes as it is: every key in it wins (no `preset` key, no
    default-value ambiguity); a copy with keys changed is a new experiment."""
    head = [
        f"# {preset.name}: {preset.table}",
        f'# flwr run . --run-config conf/{preset.name}.toml --federation-config "num-supernodes='
        f'{preset.num_supernodes}"',
        "# Written from pfedgm_app/runconfig/presets.py by `python -m devtools.reference`.",
    ]
    return "\n".join([*head, *(f"{k} = {toml_value(v)}" for k, v in preset.keys.items())]) + "\n"


def markdown_table() -> str:
    """The table of docs/presets.md (hub variants; each has an -offline twin)."""
    rows = ["| preset | reproduces | num-supernodes |", "|---|---|---|"]
    for p in PRESETS.values():
        if not p.name.endswith("-offline"):
            rows.append(f"| `{p.name}` | {p.table} | {p.num_supernodes} |")
    return "\n".join(rows)

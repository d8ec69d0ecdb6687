"""`pfedgm check`: a run-config checked on this machine, before any simulation: its keys
against the app's (a misspelt one named with the nearest valid key), then the parse every run
does first (types, bounds, presets: the registry's `methods.parse_run_config`, torch-free), then
what the parse cannot see from here: a local dataset path that does not exist, an `output-dir`
a run would refuse.

Without torch or flwr (seconds of imports on a small machine), so it answers in a fraction of
a second. The app repeats every check where it runs; this one only answers sooner.
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pfedgm_app.methods import parse_run_config, run_config_keys
from pfedgm_app.records.run_folder import RunFolder
from pfedgm_app.runconfig.common import RunConfig
from pfedgm_app.runconfig.presets import dropped_by_preset
from pfedgm_app.runconfig.settings import ConfigError
from pfedgm_app.runconfig.shared_data import shared_parquet

# Flower's reading of `--run-config 'k1=v1 k2="v 2"'` (flwr.common.config.parse_config_args):
# key=value pairs separated by spaces, each value TOML.
PAIR = re.compile(r"(\S+?)=('[^']*'|\"[^\"]*\"|\S+)")


def read_run_config(values: Sequence[str]) -> dict[str, Any]:
    """The `--run-config` values as Flower reads them: one TOML file, or key=value pairs (TOML
    values, strings quoted). Raises ConfigError naming what it cannot read; unlike Flower, text
    that is no key=value pair (`rounds = 5`) is refused rather than dropped.
    """
    values = [v for v in values if v.strip()]
    if len(values) == 1 and values[0].endswith(".toml"):
        path = Path(values[0]).expanduser()
        try:
            return _flatten(tomllib.loads(path.read_text()))
        except OSError as exc:
            raise ConfigError(f"--run-config {path}: cannot read it ({exc.strerror})") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"--run-config {path}: not TOML ({exc})") from None
    keys: dict[str, Any] = {}
    for value in values:
        if value.endswith(".toml"):
            raise ConfigError(f"--run-config {value}: a TOML file goes alone, without key=value")
        if rest := PAIR.sub(" ", value).split():
            raise ConfigError(
                f"--run-config: {rest[0]!r} is no key=value pair (no spaces "
                "around '=', strings quoted: method='fedavg')"
            )
        for key, text in PAIR.findall(value):
            try:
                keys.update(_flatten(tomllib.loads(f"{key} = {text}")))
            except tomllib.TOMLDecodeError:
                raise ConfigError(
                    f"{key}={text}: not a TOML value; quote a string: {key}='{text}'"
                ) from None
    return keys


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested TOML tables as Flower flattens them: {"a": {"b": 1}} -> {"a.b": 1}."""
    flat: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def check(run_config: Mapping[str, Any]) -> tuple[list[str], RunConfig | None]:
    """(problems, one line each; the run's common settings when the parse passed).

    Problems are collected where they are independent: every unknown key, then the parse of
    the known ones (its first error), then, once it passed, the dataset and the output-dir.
    """
    known = run_config_keys()
    found = [unknown_key(key, known) for key in run_config if key not in known]
    try:
        cfg, _, _ = parse_run_config({k: v for k, v in run_config.items() if k in known})
    except ConfigError as exc:
        return [*found, str(exc)], None
    return [*found, *dataset_problems(cfg.dataset), *output_dir_problems(cfg)], cfg


def preset_notices(run_config: Mapping[str, Any]) -> list[str]:
    """The keys given that the preset's values replace (`presets.dropped_by_preset`)."""
    try:
        return dropped_by_preset(dict(run_config), run_config_keys())
    except ConfigError:  # an unknown preset: `check` says so
        return []


def unknown_key(key: str, known: Mapping[str, Any]) -> str:
    """A key the app does not declare (Flower refuses the run, naming it only in the
    SuperLink's log), with the nearest key that it does."""
    if close := difflib.get_close_matches(key, list(known), n=1):
        return f"{key}: not a key of this app; did you mean {close[0]}?"
    return f"{key}: not a key of this app; its keys are in docs/run-config.md"


def dataset_problems(dataset: str) -> list[str]:
    """What the run would not find here: a local path (as `data.resolve_dataset` tells one:
    it starts with /, . or ~) that does not exist; `shared:<folder>` with no such copy above
    this folder or the app; a hub id with `HF_HUB_OFFLINE` set and no copy in the local
    Hugging Face cache. (A run on another machine looks again there.)"""
    path = Path(dataset).expanduser()
    if dataset.startswith("shared:"):
        if shared_parquet(name := dataset.removeprefix("shared:")) is None:
            return [
                f"dataset {dataset!r}: no <ancestor>/shared/data/{name} with parquet files above "
                f"{Path.cwd()} or the app; give the absolute path of a local copy"
            ]
        return []
    if dataset.startswith(("/", ".", "~")):
        if path.exists():
            return []
        return [
            f"dataset: no such path {path}; give the absolute path of a local copy (parquet "
            "splits or an image folder) or a hub id"
        ]
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true") and not hub_cached(dataset):
        return [
            f"dataset {dataset!r}: HF_HUB_OFFLINE is set and the local Hugging Face cache has no "
            "copy of it; unset HF_HUB_OFFLINE, or give a local copy (e.g. dataset='shared:"
            f"{dataset.rsplit('/', 1)[-1]}' or an absolute path)"
        ]
    return []


def hub_cached(dataset: str) -> bool:
    """Whether the local Hugging Face caches (`HF_HOME`, `HF_DATASETS_CACHE`,
    `HF_HUB_CACHE`) hold anything of hub dataset `dataset` ("org/name")."""
    home = Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface")).expanduser()
    datasets_cache = Path(os.environ.get("HF_DATASETS_CACHE", home / "datasets")).expanduser()
    hub_cache = Path(os.environ.get("HF_HUB_CACHE", home / "hub")).expanduser()
    org_name = dataset.replace("/", "___")
    return (datasets_cache / org_name).is_dir() or any(
        hub_cache.glob(f"datasets--{dataset.replace('/', '--')}")
    )


def output_dir_problems(cfg: RunConfig) -> list[str]:
    """What the run would refuse or misplace of `output-dir` before its first round: a
    relative path (resolved in the SuperLink's folder, not here), a finished run's
    folder (`results.RunWriter.create`); with resume=true, a folder with no run to continue
    (`checkpoint.check_resume`)."""
    if not cfg.output_dir:
        return []
    if not Path(cfg.output_dir).expanduser().is_absolute():
        return [
            f"output-dir {cfg.output_dir!r} is relative: the ServerApp runs in the managed "
            f"SuperLink's folder, not here; give an absolute path, e.g. "
            f"output-dir='{Path(cfg.output_dir).expanduser().resolve()}'"
        ]
    folder = RunFolder(Path(cfg.output_dir).expanduser().resolve())
    if cfg.resume and folder.finished:
        return [
            f"output-dir {folder.path}: resume=true but its run finished ({folder.summary.name}); "
            "drop resume, and choose another output-dir"
        ]
    if cfg.resume and not folder.checkpoint.exists():
        return [
            f"output-dir {folder.path}: resume=true but it holds no {folder.checkpoint.name}; "
            "give the output-dir of a stopped run, or drop resume"
        ]
    if folder.finished:
        return [
            f"output-dir {folder.path} already holds a finished run ({folder.summary.name}); "
            "choose another output-dir or leave it empty for a fresh timestamped folder"
        ]
    return []

"""Where a run's images come from: a hub id, a local copy of parquet splits with the hub
schema, or an image folder, resolved to one source and pooled (every split concatenated, as the
paper's protocol partitions) with its image and label columns, cached per process.
"""

from __future__ import annotations

import importlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pfedgm_app.learning.models import GENERATORS
from pfedgm_app.runconfig.settings import ConfigError
from pfedgm_app.runconfig.shared_data import shared_parquet

if TYPE_CHECKING:
    import datasets
    import pyarrow.parquet as pq
else:

    class _Lazy:
        """A module imported on its first use: `datasets` and pyarrow take seconds to import,
        and a ClientApp whose client is in the disk cache never needs them (a deployment
        starts a fresh process for every message)."""

        def __init__(self, name: str) -> None:
            self._name = name

        def __getattr__(self, attr: str) -> Any:
            return getattr(importlib.import_module(self._name), attr)

    datasets, pq = _Lazy("datasets"), _Lazy("pyarrow.parquet")

log = logging.getLogger(__name__)

# Hub ids the app knows: (image column, label column). Local copies with the same schema work too.
HUB_DATASETS: dict[str, tuple[str, str]] = {
    "uoft-cs/cifar10": ("img", "label"),
    "uoft-cs/cifar100": ("img", "fine_label"),
    "ylecun/mnist": ("image", "label"),
    "flwrlabs/femnist": ("image", "character"),
    "zh-plus/tiny-imagenet": ("image", "label"),
}
GRAY_MODES = ("1", "L", "LA", "I", "I;16", "F")  # PIL modes without color
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff")
SPLIT_NAMES = ("train", "test", "valid", "validation")  # an image folder's split subfolders


@dataclass(frozen=True)
class PoolInfo:
    """The pooled dataset (all splits concatenated, as the paper's protocol partitions)."""

    source: str
    dataset: datasets.Dataset
    image_column: str
    label_column: str
    num_classes: int
    image_shape: tuple[int, int, int]
    labels: np.ndarray  # int64, every row's label as the dataset stores it


SHARED = "shared:"  # dataset='shared:cifar100': the offline copy in <ancestor>/shared/data


def resolve_dataset(dataset: str) -> str:
    """Return a canonical source: an absolute local path or a known hub id.

    `shared:<folder>` names the first `<ancestor>/shared/data/<folder>` above the working
    directory or the app (the offline presets' spelling). Raises ConfigError for a missing
    local path or an unknown dataset name.
    """
    if dataset.startswith(SHARED):
        if (found := shared_parquet(name := dataset[len(SHARED) :])) is None:
            raise ConfigError(
                f"dataset {dataset!r}: no <ancestor>/shared/data/{name} with parquet files above "
                f"{Path.cwd()} or the app; give the absolute path of a local copy instead"
            )
        return str(found)
    looks_local = dataset.startswith(("/", ".", "~")) or os.sep + os.sep in dataset
    path = Path(dataset).expanduser()
    if path.exists():
        return str(path.resolve())
    if looks_local:
        raise ConfigError(
            f"dataset path {dataset!r} does not exist. Give an absolute path to a folder of "
            "parquet splits with the hub schema (e.g. ../shared/data/cifar10) or an image folder."
        )
    if dataset in HUB_DATASETS:
        return dataset
    raise ConfigError(
        f"unknown dataset {dataset!r}: neither an existing local path nor a supported hub id "
        f"({sorted(HUB_DATASETS)})"
    )


_POOLS: dict[str, PoolInfo] = {}


def load_pool(dataset: str) -> PoolInfo:
    """Load every split of `dataset` and concatenate them (cached per process)."""
    source = resolve_dataset(dataset)
    if source not in _POOLS:
        _POOLS[source] = _load_pool(source)
    return _POOLS[source]


def _load_pool(source: str) -> PoolInfo:
    splits = _load_splits(source)
    order = [s for s in ("train", "test") if s in splits] + sorted(set(splits) - {"train", "test"})
    pool = datasets.concatenate_datasets([splits[s] for s in order])
    if len(pool) == 0:
        raise ConfigError(f"{source!r} holds no samples")
    image_col, label_col = _columns(source, pool.features)
    label_feature = pool.features[label_col]
    labels = np.asarray(pool[label_col], dtype=np.int64)
    if isinstance(label_feature, datasets.ClassLabel):
        num_classes = label_feature.num_classes
    else:
        num_classes = int(labels.max()) + 1
    if labels.min() < 0 or labels.max() >= num_classes:
        raise ConfigError(
            f"dataset {source!r}: labels in column {label_col!r} span [{labels.min()}, "
            f"{labels.max()}], outside the {num_classes} classes its schema declares "
            "(unlabeled rows, e.g. -1, must be removed from the copy)"
        )
    shape = _image_shape(pool, image_col)
    if shape not in GENERATORS:
        raise ConfigError(
            f"dataset {source!r} has images of shape {shape} (C, H, W); the generators take "
            f"{list(GENERATORS)} (CIFAR 32x32 color, EMNIST/MNIST 28x28 grayscale, "
            "TinyImageNet 64x64 color)"
        )
    log.info("Loaded %s: %d images, %d classes, shape %s", source, len(pool), num_classes, shape)
    return PoolInfo(source, pool, image_col, label_col, num_classes, shape, labels)


def _image_shape(pool: datasets.Dataset, image_col: str) -> tuple[int, int, int]:
    """(C, H, W): the first image's size; 3 channels if any of the first 256 images is in
    color (TinyImageNet holds some grayscale images among color ones: all are read as RGB).
    """
    head = pool.select(range(min(len(pool), 256)))[image_col]
    color = any(im.mode not in GRAY_MODES for im in head)
    width, height = head[0].size
    return (3 if color else 1, height, width)


def _load_splits(source: str) -> datasets.DatasetDict:
    path = Path(source)
    if not path.exists():  # a hub id
        try:
            return datasets.load_dataset(source)
        except Exception as exc:  # the hub raises many kinds; all mean the same
            raise ConfigError(
                f"could not load hub dataset {source!r} ({type(exc).__name__}: {exc}). Without "
                "access to the Hugging Face hub, download a copy elsewhere and pass its local "
                "path, e.g. --run-config \"dataset='/abs/path/to/cifar10'\" (a folder of "
                "train/test parquet files with the hub schema)."
            ) from exc
    files = sorted(path.glob("*.parquet")) if path.is_dir() else [path]
    if files and all(f.suffix == ".parquet" for f in files):
        for f in files:  # the footer names a truncated or foreign file before `datasets` fails
            try:
                pq.read_metadata(f)
            except Exception as exc:  # pyarrow raises several kinds
                raise ConfigError(f"{f}: not a readable parquet file ({exc})") from exc
        try:
            return datasets.load_dataset("parquet", data_files={f.stem: str(f) for f in files})
        except Exception as exc:  # a bad row group surfaces as many kinds
            raise ConfigError(f"{source}: could not read its parquet files ({exc})") from exc
    if path.is_dir() and any(p.is_dir() for p in path.iterdir()):
        return _image_folder(path)
    raise ConfigError(
        f"{source!r} holds neither parquet splits (*.parquet) nor an image folder "
        "(one subfolder per class, optionally inside split subfolders train/, test/)"
    )


def _image_folder(path: Path) -> datasets.DatasetDict:
    """An image folder as splits of (`image`, `label`): one subfolder per class, named as the
    class, optionally inside split subfolders (`SPLIT_NAMES`). Read here rather than by
    `datasets`' imagefolder, which drops the labels of a folder holding a single class (a device
    under strong label skew does)."""
    subfolders = sorted(p for p in path.iterdir() if p.is_dir())
    split = bool(subfolders) and all(p.name in SPLIT_NAMES for p in subfolders)
    roots = {p.name: p for p in subfolders} if split else {"train": path}
    classes = sorted({c.name for r in roots.values() for c in r.iterdir() if c.is_dir()})
    features = datasets.Features(
        {"image": datasets.Image(), "label": datasets.ClassLabel(names=classes)}
    )
    splits = {}
    for name, root in roots.items():
        stray = [f.name for f in root.iterdir() if f.suffix.lower() in IMAGE_SUFFIXES]
        if stray:
            raise ConfigError(f"{root}: images outside a class subfolder ({stray[:3]})")
        files = [
            (str(f), classes.index(c.name))
            for c in sorted(root.iterdir())
            if c.is_dir()
            for f in sorted(c.iterdir())
            if f.suffix.lower() in IMAGE_SUFFIXES
        ]
        images, labels = zip(*files, strict=True) if files else ((), ())
        splits[name] = datasets.Dataset.from_dict(
            {"image": list(images), "label": list(labels)}, features=features
        )
    return datasets.DatasetDict(splits)


def _columns(source: str, features: datasets.Features) -> tuple[str, str]:
    if source in HUB_DATASETS:
        return HUB_DATASETS[source]
    picked = pick_columns({k: type(v).__name__ for k, v in features.items()})
    if picked is None:
        raise ConfigError(
            f"{source!r}: need an Image column and a ClassLabel column, found {dict(features)}"
        )
    return picked


def pick_columns(kinds: dict[str, str]) -> tuple[str, str] | None:
    """(image, label) column of features given by kind ("Image", "ClassLabel", ...): the first
    image column, the label column preferred by name ("fine_label", then "label", whatever
    their kind: the caller checks it); None without both."""
    images = [k for k, kind in kinds.items() if kind == "Image"]
    labels = [k for k, kind in kinds.items() if kind == "ClassLabel"]
    for preferred in ("label", "fine_label"):
        if preferred in kinds:
            labels.insert(0, preferred)
    return (images[0], labels[0]) if images and labels else None

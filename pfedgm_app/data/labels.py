"""The run's class list and every dataset's labels mapped onto it by name: devices holding only
some of the classes, or a copy whose ClassLabel order differs, still agree with the model on
every label.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from pfedgm_app.runconfig.common import parse_classes
from pfedgm_app.runconfig.settings import ConfigError

from .sources import PoolInfo, _columns, _image_folder, load_pool, pick_columns, resolve_dataset

if TYPE_CHECKING:
    import datasets
    import pyarrow.parquet as pq
else:
    from .sources import datasets, pq  # imported on first use


# The class lists of the hub datasets whose ClassLabel order is checked against a local copy
# with the hub schema (../shared/data): devices with their own data agree with the model on
# these by the dataset's name alone, without a copy of it.
KNOWN_CLASSES: dict[str, tuple[str, ...]] = {
    "uoft-cs/cifar10": tuple("airplane automobile bird cat deer dog frog horse ship truck".split()),
    "ylecun/mnist": tuple("0123456789"),
    "uoft-cs/cifar100": tuple(
        "apple aquarium_fish baby bear beaver bed bee beetle bicycle bottle bowl boy bridge bus "
        "butterfly camel can castle caterpillar cattle chair chimpanzee clock cloud cockroach "
        "couch crab crocodile cup dinosaur dolphin elephant flatfish forest fox girl hamster "
        "house kangaroo keyboard lamp lawn_mower leopard lion lizard lobster man maple_tree "
        "motorcycle mountain mouse mushroom oak_tree orange orchid otter palm_tree pear "
        "pickup_truck pine_tree plain plate poppy porcupine possum rabbit raccoon ray road "
        "rocket rose sea seal shark shrew skunk skyscraper snail snake spider squirrel "
        "streetcar sunflower sweet_pepper table tank telephone television tiger tractor train "
        "trout tulip turtle wardrobe whale willow_tree wolf woman worm".split()
    ),
}


def run_classes(classes: str, dataset: str) -> tuple[str, ...]:
    """The run's label set, in the model's order: run-config `classes` when given, else the
    class names of `dataset` (a hub id of `KNOWN_CLASSES`, or a local copy's schema or class
    subfolders, read without decoding any image). Devices map their labels onto it by name."""
    names = parse_classes(classes) or _dataset_classes(dataset)
    if len(names) < 2:
        raise ConfigError(
            f"the run's class list is {list(names)}: a classifier needs at least 2 classes; "
            "set run-config classes='name0,name1,...' to the model's classes"
        )
    return names


def class_names(classes: str, dataset: str) -> tuple[str, ...]:
    """The names of a client's classes, in the model's order: `run_classes`, or where the
    dataset declares none without being read (a hub id outside `KNOWN_CLASSES`, labels stored
    as integers) the names its pool gives ('0', '1', ... for integers)."""
    try:
        return run_classes(classes, dataset)
    except ConfigError:
        return _names(load_pool(dataset))


def _dataset_classes(dataset: str) -> tuple[str, ...]:
    """The class names `dataset` declares (see `run_classes`)."""
    hint = (
        f"give run-config classes='name0,name1,...' (the model's classes, in order) or a "
        f"dataset whose class list is known ({sorted(KNOWN_CLASSES)})"
    )
    try:
        source = resolve_dataset(dataset)
    except ConfigError as exc:
        raise ConfigError(f"the run's class list comes from dataset: {exc}; or {hint}") from exc
    if source in KNOWN_CLASSES:
        return KNOWN_CLASSES[source]
    path = Path(source)
    files = sorted(path.glob("*.parquet")) if path.is_dir() else [path]
    if path.exists() and files and all(f.suffix == ".parquet" for f in files):
        try:
            schema = pq.read_schema(files[0])
            if declared := _declared_classes(schema.metadata or {}):
                return declared
            features = datasets.Features.from_arrow_schema(schema)
        except Exception as exc:  # pyarrow raises several kinds
            raise ConfigError(f"{files[0]}: not a readable parquet file ({exc})") from exc
        label = features[_columns(source, features)[1]]
        if isinstance(label, datasets.ClassLabel):
            return tuple(label.names)
    elif path.is_dir():  # an image folder: its class subfolders (every split has them all)
        return tuple(next(iter(_image_folder(path).values())).features["label"].names)
    raise ConfigError(f"dataset {dataset!r} names no class list: {hint}")


def _declared_classes(metadata: dict[bytes, bytes]) -> tuple[str, ...] | None:
    """The label column's class names from the features a hub parquet file declares in its
    schema's metadata, the column chosen by `sources.pick_columns` as for a pool; None where
    it declares none in this form (then `datasets` reads the schema). Every message of a
    deployment asks: this reads them without importing `datasets` (seconds, in a fresh
    ClientApp process)."""
    try:
        features = json.loads(metadata[b"huggingface"])["info"]["features"]
        kinds = {k: v.get("_type") for k, v in features.items()}
    except (KeyError, TypeError, AttributeError, ValueError):
        return None
    picked = pick_columns(kinds)
    if picked is None or kinds[picked[1]] != "ClassLabel":
        return None
    names = features[picked[1]].get("names")
    return (
        tuple(names) if isinstance(names, list) and all(isinstance(n, str) for n in names) else None
    )


def _names(pool: PoolInfo) -> tuple[str, ...]:
    feature = pool.dataset.features[pool.label_column]
    if isinstance(feature, datasets.ClassLabel):
        return tuple(feature.names)
    return tuple(str(k) for k in range(pool.num_classes))


def map_labels(pool: PoolInfo, classes: tuple[str, ...], what: str = "") -> np.ndarray:
    """Every row's label as an index into `classes`: by name when the dataset's label column is
    a ClassLabel, else the stored integer, which must lie in [0, len(classes))."""
    what = what or f"dataset {pool.source!r}"
    feature = pool.dataset.features[pool.label_column]
    used = np.unique(pool.labels)
    if isinstance(feature, datasets.ClassLabel):
        index = {name: i for i, name in enumerate(classes)}
        unknown = sorted({feature.names[k] for k in used} - set(index))
        if unknown:
            raise ConfigError(
                f"{what}: labels {unknown} are not among the run's {len(classes)} classes "
                f"({_shown(classes)}); set run-config classes (or dataset) to the class list "
                "every device shares, or remove them from this device's data"
            )
        return np.array([index.get(name, -1) for name in feature.names], np.int64)[pool.labels]
    outside = used[(used < 0) | (used >= len(classes))]
    if len(outside):
        raise ConfigError(
            f"{what}: labels {outside.tolist()} lie outside the run's {len(classes)} classes "
            f"(0..{len(classes) - 1}); set run-config classes to the class list every device "
            "shares, or remove them from this device's data"
        )
    return pool.labels


def _shown(names: tuple[str, ...]) -> str:
    return ", ".join(names) if len(names) <= 12 else f"{', '.join(names[:10])}, ..., {names[-1]}"

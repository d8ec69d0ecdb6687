"""One data pipeline for every method: hub id or local path -> pooled dataset -> Dirichlet
label partition -> seeded 80/20 split per client -> decoded tensors, cached once per client.

The partition depends only on (dataset, number of clients, alpha, seed, minimum size), so a
simulation and a deployment with the same settings see the same clients. A device that holds
its own data (`DeviceData`, a SuperNode's `data-path`) enters the same pipeline after the
partition: its samples are pooled, split 80/20 with the client's seed and decoded the same way.

Decoded clients are also kept on disk (`cache_dir()/clients`), keyed by the data's files and
every setting they depend on: a deployment starts a fresh ClientApp process per message, which
then reads its client's tensors instead of decoding the images again.
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import math
import os
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from .config import CORRUPTION_ASSIGNMENTS, ConfigError, RunConfig, parse_classes
from .corruptions import corrupt, corruption_pairs, find_shared
from .models import BACKBONES

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

# The class lists of the hub datasets whose ClassLabel order is checked against a local copy
# with the hub schema (../shared/data): devices with their own data agree with the model on
# these by the dataset's name alone, without a copy of it.
KNOWN_CLASSES: dict[str, tuple[str, ...]] = {
    "uoft-cs/cifar10": ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog",
                        "horse", "ship", "truck"),
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
}  # fmt: skip


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


@dataclass
class ClientData:
    """One client's decoded, normalized tensors (train/test), ready for batching."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int

    def to(self, device: torch.device) -> ClientData:
        move = [t.to(device) for t in (self.x_train, self.y_train, self.x_test, self.y_test)]
        return ClientData(*move, num_classes=self.num_classes)


SHARED = "shared:"  # dataset='shared:cifar100': the offline copy in <ancestor>/shared/data


def resolve_dataset(dataset: str) -> str:
    """Return a canonical source: an absolute local path or a known hub id.

    `shared:<folder>` names the first `<ancestor>/shared/data/<folder>` above the working
    directory or the app (the offline presets' spelling). Raises ConfigError for a missing
    local path or an unknown dataset name.
    """
    if dataset.startswith(SHARED):
        name = dataset[len(SHARED) :]
        starts = (Path.cwd(), Path(__file__).resolve().parent)
        found = find_shared(name, starts, lambda f: any(f.glob("*.parquet")))
        if found is None:
            raise ConfigError(
                f"dataset {dataset!r}: no <ancestor>/shared/data/{name} with parquet files above "
                f"{' or '.join(map(str, starts))}; give the absolute path of a local copy instead"
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
    if shape not in BACKBONES:
        raise ConfigError(
            f"dataset {source!r} has images of shape {shape} (C, H, W); the backbones take "
            f"{list(BACKBONES)} (CIFAR 32x32 color, EMNIST/MNIST 28x28 grayscale, "
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
        except Exception as exc:  # noqa: BLE001 - the hub raises many kinds; all mean the same
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
            except Exception as exc:  # noqa: BLE001 - pyarrow raises several kinds
                raise ConfigError(f"{f}: not a readable parquet file ({exc})") from exc
        try:
            return datasets.load_dataset("parquet", data_files={f.stem: str(f) for f in files})
        except Exception as exc:  # noqa: BLE001 - a bad row group surfaces as many kinds
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
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(
        names=classes)})  # fmt: skip
    splits = {}
    for name, root in roots.items():
        stray = [f.name for f in root.iterdir() if f.suffix.lower() in IMAGE_SUFFIXES]
        if stray:
            raise ConfigError(f"{root}: images outside a class subfolder ({stray[:3]})")
        files = [(str(f), classes.index(c.name)) for c in sorted(root.iterdir()) if c.is_dir()
                 for f in sorted(c.iterdir()) if f.suffix.lower() in IMAGE_SUFFIXES]  # fmt: skip
        images, labels = zip(*files, strict=True) if files else ((), ())
        splits[name] = datasets.Dataset.from_dict(
            {"image": list(images), "label": list(labels)}, features=features
        )
    return datasets.DatasetDict(splits)


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


def _dataset_classes(dataset: str) -> tuple[str, ...]:
    """The class names `dataset` declares (see `run_classes`)."""
    hint = (f"give run-config classes='name0,name1,...' (the model's classes, in order) or a "
            f"dataset whose class list is known ({sorted(KNOWN_CLASSES)})")  # fmt: skip
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
            features = datasets.Features.from_arrow_schema(pq.read_schema(files[0]))
        except Exception as exc:  # noqa: BLE001 - pyarrow raises several kinds
            raise ConfigError(f"{files[0]}: not a readable parquet file ({exc})") from exc
        label = features[_columns(source, features)[1]]
        if isinstance(label, datasets.ClassLabel):
            return tuple(label.names)
    elif path.is_dir():  # an image folder: its class subfolders (every split has them all)
        return tuple(next(iter(_image_folder(path).values())).features["label"].names)
    raise ConfigError(f"dataset {dataset!r} names no class list: {hint}")


def _columns(source: str, features: datasets.Features) -> tuple[str, str]:
    if source in HUB_DATASETS:
        return HUB_DATASETS[source]
    images = [k for k, v in features.items() if isinstance(v, datasets.Image)]
    labels = [k for k, v in features.items() if isinstance(v, datasets.ClassLabel)]
    for preferred in ("label", "fine_label"):
        if preferred in features:
            labels.insert(0, preferred)
    if not images or not labels:
        raise ConfigError(
            f"{source!r}: need an Image column and a ClassLabel column, found {dict(features)}"
        )
    return images[0], labels[0]


def min_partition_size(min_train: int, test_fraction: float) -> int:
    """Smallest client size whose train split (after `split_train_test`) has `min_train`."""
    n = min_train
    while n - math.ceil(test_fraction * n) < min_train:
        n += 1
    return n


def dirichlet_partition(
    labels: np.ndarray,
    num_partitions: int,
    alpha: float,
    min_size: int,
    seed: int,
    max_attempts: int = 100_000,
) -> list[np.ndarray]:
    """Index lists (sorted) of a Dirichlet(alpha) label partition that resamples until every
    client has `min_size`.

    The rule of the pFedFDA / PFLlib partition code the paper follows: per class, draw client
    proportions from Dir(alpha), give nothing more to a client already holding more than
    N / num_partitions samples, and repeat the whole draw until the smallest client reaches
    `min_size`. flwr-datasets' DirichletPartitioner stops after 10 attempts, which Dir(0.1)
    with 100 clients and 63 samples each does not meet (`partition.py` wraps this function as
    a flwr-datasets Partitioner for other Flower projects).
    """
    n = len(labels)
    if num_partitions * min_size > n:
        raise ConfigError(
            f"{num_partitions} clients x {min_size} samples each exceeds the {n} samples pooled"
        )
    rng = np.random.default_rng(seed)
    by_class = [np.flatnonzero(labels == k) for k in np.unique(labels)]
    for _ in range(max_attempts):
        # Sizes first: only a draw that meets min_size pays for shuffling and splitting.
        sizes = np.zeros(num_partitions, dtype=np.int64)
        cuts = []
        for idx in by_class:
            p = rng.dirichlet(np.full(num_partitions, alpha)) * (sizes < n / num_partitions)
            cut = (np.cumsum(p / p.sum()) * len(idx)).astype(int)[:-1]
            sizes += np.diff(cut, prepend=0, append=len(idx))
            cuts.append(cut)
        if sizes.min() >= min_size:
            chunks = [np.split(rng.permutation(i), c) for i, c in zip(by_class, cuts, strict=True)]
            return [np.sort(np.concatenate(p)) for p in zip(*chunks, strict=True)]
    raise ConfigError(
        f"no Dir({alpha}) partition into {num_partitions} clients with >= {min_size} samples "
        f"each after {max_attempts} draws; raise dirichlet-alpha or lower min-train-samples"
    )


def split_train_test(
    indices: np.ndarray, test_fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Seeded per-client split: ceil(test_fraction * n) test samples, the rest train."""
    perm = np.random.default_rng(seed).permutation(indices)
    n_test = math.ceil(test_fraction * len(perm))
    return np.sort(perm[n_test:]), np.sort(perm[:n_test])


@dataclass(frozen=True)
class Protocol:
    """What fixes the clients: the same Protocol gives the same partition everywhere.

    `pool_size` > 0 keeps a seeded random subset of that many pooled samples (quick runs and
    tests); 0 keeps all of them, as the paper does. `classes` (run-config `classes`) maps the
    dataset's labels by name onto that class list; () keeps the dataset's own.
    """

    dataset: str
    num_partitions: int
    alpha: float
    seed: int = 0
    min_train: int = 50
    test_fraction: float = 0.2
    pool_size: int = 0
    corruption: str = "none"  # CIFAR-10S / 100S assignment: none, 50C, 100C
    frost_dir: str = ""
    protocol: str = "standard"  # or "generalization": see `trains`, `evaluated`, `pair`
    classes: tuple[str, ...] = ()

    @classmethod
    def of(cls, cfg: RunConfig, num_partitions: int, dataset: str | None = None) -> Protocol:
        """The protocol of run `cfg` for `num_partitions` clients (`dataset` overrides the run's,
        e.g. a SuperNode's own copy)."""
        return cls(
            dataset or cfg.dataset,
            num_partitions,
            cfg.dirichlet_alpha,
            cfg.seed,
            cfg.min_train_samples,
            cfg.test_fraction,
            cfg.pool_size,
            cfg.corruption,
            cfg.frost_dir,
            cfg.protocol,
            parse_classes(cfg.classes),
        )

    # The paper's new-client generalization protocol (100 clients, Dir(0.5)): clients 0..49
    # clean, 50..99 corrupted as CIFAR-10S (one of the 50 corruption-severity pairs each); Phase 1
    # trains on clients 0..44 only; Phase 2 personalizes every client and reports the new ones,
    # 45..99 (5 clean clients and 5 per corruption), by type, beside the original clients 0..44
    # (the paper's table rows). For N clients: the halves of N, the first 90% of the clean half
    # train.
    def trains(self, partition_id: int) -> bool:
        """Whether the client takes part in Phase 1 (under `generalization`, only seen ones)."""
        if self.protocol == "generalization":
            return partition_id < (self.num_partitions // 2) * 9 // 10
        return True

    def headline(self, partition_id: int) -> bool:
        """Whether the client's accuracy enters `mean_accuracy` (under `generalization`, only
        the new clients'; every client is personalized and evaluated)."""
        return self.protocol != "generalization" or not self.trains(partition_id)

    def pair(self, partition_id: int) -> tuple[str, int] | None:
        """The client's (corruption, severity), or None for a clean client."""
        if self.protocol == "generalization":
            half = self.num_partitions // 2
            pairs = corruption_pairs()
            return None if partition_id < half else pairs[(partition_id - half) % len(pairs)]
        return corruption_pair(self.corruption, partition_id)

    def client_type(self, partition_id: int) -> str:
        """'original' (a client Phase 1 trained, under `generalization`), 'clean' or the
        client's corruption: the groups of `accuracy_by_type`."""
        if not self.headline(partition_id):
            return "original"
        pair = self.pair(partition_id)
        return "clean" if pair is None else pair[0]


_PARTITIONS: dict[tuple, list[np.ndarray]] = {}
_CLIENTS: dict[tuple, ClientData] = {}


def client_indices(protocol: Protocol) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train, test) pool indices of every client."""
    return [client_split(protocol, pid) for pid in range(protocol.num_partitions)]


def client_split(protocol: Protocol, partition_id: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, test) pool indices of one client; the partition is computed once per process,
    and a client's split alone (loading one client costs the same with 100 or 1000 clients)."""
    idx = _partition(protocol)[partition_id]
    return split_train_test(idx, protocol.test_fraction, split_seed(protocol.seed, partition_id))


def split_seed(seed: int, client_id: int) -> int:
    """The seed of a client's 80/20 split: a device holding exactly a partition's samples (in
    pool order) under that partition's id gets the partition's train and test sets."""
    return seed * 100_003 + client_id


def _partition(protocol: Protocol) -> list[np.ndarray]:
    """Pool indices of every client, cached per process."""
    pool = load_pool(protocol.dataset)
    p = protocol  # the partition depends on these, not on the corruption or the roles
    key = (pool.source, p.num_partitions, p.alpha, p.seed, p.min_train, p.test_fraction,
           p.pool_size)  # fmt: skip
    if key not in _PARTITIONS:
        subset = np.arange(len(pool.dataset))
        if 0 < protocol.pool_size < len(subset):
            rng = np.random.default_rng(protocol.seed)
            subset = np.sort(rng.choice(subset, protocol.pool_size, replace=False))
        if (present := len(np.unique(pool.labels[subset]))) < 2:  # a device may hold one
            raise ConfigError(
                f"dataset {pool.source!r} holds {present} class(es) to partition: a classifier "
                "needs at least 2; give a dataset with 2 or more"
            )
        min_size = min_partition_size(protocol.min_train, protocol.test_fraction)
        parts = dirichlet_partition(
            pool.labels[subset], protocol.num_partitions, protocol.alpha, min_size, protocol.seed
        )
        _PARTITIONS[key] = [subset[idx] for idx in parts]
    return _PARTITIONS[key]


def load_client_data(protocol: Protocol, partition_id: int) -> ClientData:
    """Decoded tensors of one client, its images corrupted as the protocol assigns
    (`Protocol.pair`): decoded once, then served from memory in this process and from the disk
    cache in later ones."""
    if not 0 <= partition_id < protocol.num_partitions:
        raise ConfigError(f"partition-id {partition_id} outside [0, {protocol.num_partitions})")
    key = (protocol, partition_id)
    if key not in _CLIENTS:
        source = resolve_dataset(protocol.dataset)
        parts = ("partition", source, _fingerprint(source), protocol, partition_id)
        _CLIENTS[key] = _client_cache(parts, lambda: _decode_partition(protocol, partition_id))
    return _CLIENTS[key]


def _decode_partition(protocol: Protocol, partition_id: int) -> dict[str, np.ndarray]:
    pool = load_pool(protocol.dataset)
    pair = protocol.pair(partition_id)
    if pair is not None and pool.image_shape[0] != 3:
        what = "protocol='generalization'" if protocol.protocol != "standard" else (
            f"corruption={protocol.corruption!r}")  # fmt: skip
        raise ConfigError(f"{what} needs color images (it corrupts as CIFAR-10S does)")
    classes = protocol.classes or _names(pool)
    y = map_labels(pool, classes) if protocol.classes else pool.labels
    arrays = {"image_shape": np.array(pool.image_shape), "num_classes": np.array(len(classes))}
    for split, indices in zip(("train", "test"), client_split(protocol, partition_id), strict=True):
        if pair is None:
            x = pixels(pool, indices)
        else:  # a client's train and test images get the same pair
            seed = zlib.crc32(f"{protocol.seed}/{partition_id}/{split}".encode())
            x = corrupted(pool, indices, pair, seed, protocol.frost_dir)
        arrays[f"x_{split}"], arrays[f"y_{split}"] = x, y[indices]
    return arrays


@dataclass(frozen=True)
class DeviceData:
    """A device's own samples (a SuperNode's `data-path`): a parquet file or folder of parquet
    splits with the hub schema, or an image folder (one subfolder per class). No partition: all
    its samples are pooled (splits in the order train, test, others) and split 80/20 with the
    client's seed (`split_seed`), and their labels are mapped by name onto the run's `classes`,
    so that devices holding only some classes still agree with the model on every label.
    """

    path: str
    classes: tuple[str, ...]
    client_id: int
    seed: int = 0
    test_fraction: float = 0.2
    min_train: int = 50

    @classmethod
    def of(cls, cfg: RunConfig, path: str, client_id: int) -> DeviceData:
        """The device data of run `cfg` at `path` (the class list from `run_classes`)."""
        classes = run_classes(cfg.classes, cfg.dataset)
        return cls(path, classes, client_id, cfg.seed, cfg.test_fraction, cfg.min_train_samples)


def load_device_data(device: DeviceData) -> ClientData:
    """Decoded tensors of a device's own data (`DeviceData`), cached as partitions are. Errors
    name the data path and what to fix: missing, empty or unreadable data, labels outside the
    run's classes, fewer than `min_train` training samples."""
    key = ("device", device)
    if key not in _CLIENTS:
        path = Path(device.path).expanduser()
        if not path.exists():
            raise ConfigError(f"data-path {device.path!r} does not exist on this device")
        parts = ("device", str(path.resolve()), _fingerprint(str(path.resolve())), device)
        _CLIENTS[key] = _client_cache(parts, lambda: _decode_device(device, path.resolve()))
    return _CLIENTS[key]


def _decode_device(device: DeviceData, path: Path) -> dict[str, np.ndarray]:
    what = f"data-path {device.path!r}"
    try:
        pool = load_pool(str(path))  # reads the first images: an unreadable one raises here
    except (ConfigError, OSError) as exc:
        raise ConfigError(f"{what}: {exc}") from exc
    y = map_labels(pool, device.classes, what)
    order = np.arange(len(pool.dataset))
    train, test = split_train_test(
        order, device.test_fraction, split_seed(device.seed, device.client_id)
    )
    if len(train) < device.min_train:
        raise ConfigError(
            f"{what}: {len(train)} training samples after the {1 - device.test_fraction:.0%} "
            f"split, fewer than min-train-samples={device.min_train}; lower min-train-samples "
            "or give the device more data"
        )
    try:
        x_train, x_test = pixels(pool, train), pixels(pool, test)
    except ConfigError as exc:
        raise ConfigError(f"{what}: {exc}") from exc
    return {
        "image_shape": np.array(pool.image_shape),
        "num_classes": np.array(len(device.classes)),
        "x_train": x_train,
        "y_train": y[train],
        "x_test": x_test,
        "y_test": y[test],
    }


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


def _fingerprint(source: str) -> tuple:
    """(name, size, modification time) of every file of a local source, which a cached client
    must match; a hub id stands for itself."""
    path = Path(source)
    if not path.exists():
        return (source,)
    files = [path] if path.is_file() else sorted(f for f in path.rglob("*") if f.is_file())
    return tuple((str(f.relative_to(path.parent)), st.st_size, st.st_mtime_ns)
                 for f in files for st in [f.stat()])  # fmt: skip


def _client_cache(parts: tuple, decode: Callable[[], dict[str, np.ndarray]]) -> ClientData:
    """A client's data from `cache_dir()/clients/<hash of parts>.npz` (uint8 images, labels),
    or decoded by `decode` and written there atomically; `parts` holds everything the data
    depends on (the files' sizes and times, the protocol or device settings, the class list)."""
    digest = hashlib.sha256(repr((CACHE_VERSION, *parts)).encode()).hexdigest()[:32]
    path = cache_dir() / "clients" / f"{digest}.npz"
    arrays = None
    if path.exists():
        try:
            with np.load(path) as stored:
                arrays = {k: stored[k] for k in stored.files}
        except (OSError, ValueError, zipfile.BadZipFile) as exc:
            log.warning("unreadable cached client %s (%s): decoding again", path, exc)
    if arrays is None:
        arrays = decode()
        _write_atomically(path, lambda f: np.savez(f, **arrays))
    return _client_data(arrays)


def _write_atomically(path: Path, write: Callable[[Any], None]) -> None:
    """`write(file)` into a temporary file beside `path`, then renamed onto it: two ClientApps
    may fill the same cache entry at once, and a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        write(f)
    tmp.replace(path)


def _client_data(arrays: dict[str, np.ndarray]) -> ClientData:
    shape = tuple(int(d) for d in arrays["image_shape"])
    return ClientData(
        to_tensor(arrays["x_train"], shape),
        torch.from_numpy(arrays["y_train"].astype(np.int64)),
        to_tensor(arrays["x_test"], shape),
        torch.from_numpy(arrays["y_test"].astype(np.int64)),
        num_classes=int(arrays["num_classes"]),
    )


def pixels(pool: PoolInfo, indices: np.ndarray) -> np.ndarray:
    """uint8 images (N, H, W) or (N, H, W, 3) of the pool's rows `indices`, in its mode."""
    rows = pool.dataset.select(indices)
    mode = "L" if pool.image_shape[0] == 1 else "RGB"
    try:
        images = [np.asarray(im.convert(mode)) for im in rows[pool.image_column]]
    except OSError as exc:  # PIL's UnidentifiedImageError and truncated-image errors
        raise ConfigError(f"{pool.source!r}: an image could not be decoded ({exc})") from exc
    try:
        x = np.stack(images) if images else np.zeros((0, *pool.image_shape[1:]), np.uint8)
    except ValueError as exc:
        raise ConfigError(f"{pool.source!r}: images of different sizes ({exc})") from exc
    return x


def to_tensor(x: np.ndarray, image_shape: tuple[int, int, int]) -> torch.Tensor:
    """uint8 (N, H, W[, C]) -> float (N, C, H, W) in [-1, 1] (ToTensor + Normalize(0.5, 0.5))."""
    t = torch.from_numpy(x).float().div_(255.0)
    t = t.unsqueeze(1) if t.ndim == 3 else t.permute(0, 3, 1, 2).contiguous()
    if tuple(t.shape[1:]) != image_shape:
        raise ConfigError(
            f"found images of shape {tuple(t.shape[1:])}, expected {image_shape} like the first"
        )
    return t.sub_(0.5).div_(0.5)


# -- CIFAR-10S / CIFAR-100S: environmental heterogeneity (the paper, after pFedFDA) -------------
CACHE_VERSION = 1  # bump when `corruptions` or the decoding changes what they compute


def corruption_pair(assignment: str, partition_id: int) -> tuple[str, int] | None:
    """The (corruption, severity) of a client, or None for a clean one. `50C`: client i < 50
    gets the i-th of the 50 pairs (`corruptions.corruption_pairs`: each corruption at severities
    1..5 in turn), the others stay clean; `100C`: clients 2j and 2j + 1 share pair j (clients
    from 100 on stay clean)."""
    if assignment not in CORRUPTION_ASSIGNMENTS:
        raise ConfigError(f"corruption must be one of {CORRUPTION_ASSIGNMENTS}, got {assignment!r}")
    if assignment == "none":
        return None
    pairs = corruption_pairs()
    j = partition_id if assignment == "50C" else partition_id // 2
    return pairs[j] if j < len(pairs) else None


def cache_dir() -> Path:
    """Where decoded clients and corrupted images are kept: $PFEDGM_CACHE_DIR, else
    ~/.cache/pfedgm (delete it to reclaim the space; entries are rebuilt when needed)."""
    return Path(os.environ.get("PFEDGM_CACHE_DIR") or Path.home() / ".cache" / "pfedgm")


def corrupted(
    pool: PoolInfo,
    indices: np.ndarray,
    pair: tuple[str, int],
    seed: int,
    frost_dir: str = "",
) -> np.ndarray:
    """The pool's images `indices` through `corruptions.corrupt(..., *pair, seed)`, decoded and
    computed once and kept on disk under a key of everything they depend on (the data's
    fingerprint, the indices, the pair, the seed, the code's version), so that later runs and
    every SuperNode of this machine reuse them without decoding the images again."""
    digest = hashlib.sha256()
    for part in (pool.source, pool.dataset._fingerprint, pair, seed, CACHE_VERSION):
        digest.update(repr(part).encode())
    digest.update(np.ascontiguousarray(indices, dtype=np.int64).tobytes())
    path = cache_dir() / "corrupted" / f"{pair[0]}-{pair[1]}-{digest.hexdigest()[:24]}.npy"
    if path.exists():
        return np.load(path)
    try:
        out = corrupt(pixels(pool, indices), *pair, seed=seed, frost_dir=frost_dir or None)
    except ValueError as exc:  # missing frost textures
        raise ConfigError(f"{exc} (run-config key frost-dir)") from exc
    _write_atomically(path, lambda f: np.save(f, out))
    return out

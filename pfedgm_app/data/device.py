"""A device's own data (a SuperNode's node-config `data-path`): it enters the pipeline after
the partition; its samples are pooled, split 80/20 with the client's seed and decoded as a
partition's are.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pfedgm_app.runconfig.common import RunConfig
from pfedgm_app.runconfig.settings import ConfigError

from .cache import _CLIENTS, _client_cache, _fingerprint
from .labels import map_labels, run_classes
from .partition import hold_out_validation, split_seed, split_train_test
from .sources import load_pool
from .tensors import ClientData, pixels


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
    validation_fraction: float = 0.0  # > 0: the evaluated split is carved from train

    @classmethod
    def of(cls, cfg: RunConfig, path: str, client_id: int) -> DeviceData:
        """The device data of run `cfg` at `path` (the class list from `run_classes`)."""
        classes = run_classes(cfg.classes, cfg.dataset)
        return cls(
            path,
            classes,
            client_id,
            cfg.seed,
            cfg.test_fraction,
            cfg.min_train_samples,
            cfg.validation_fraction,
        )


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
    seed = split_seed(device.seed, device.client_id)
    train, test = split_train_test(order, device.test_fraction, seed)
    train, test = hold_out_validation(train, test, device.validation_fraction, seed)
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

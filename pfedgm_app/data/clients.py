"""One partitioned client's data: its pool indices decoded, corrupted as the protocol assigns
(CIFAR-10S / CIFAR-100S), labels mapped, then served from the caches.
"""

from __future__ import annotations

import hashlib
import zlib

import numpy as np

from pfedgm_app.runconfig.settings import ConfigError

from .cache import (
    _CLIENTS,
    CACHE_VERSION,
    ENTRY_FORMAT,
    _client_cache,
    _fingerprint,
    _read_array,
    _write_array,
    cache_dir,
)
from .corruptions import corrupt
from .labels import _names, map_labels
from .partition import client_split
from .roles import Protocol
from .sources import PoolInfo, load_pool, resolve_dataset
from .tensors import ClientData, pixels


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
        what = (
            "protocol='generalization'"
            if protocol.kind != "standard"
            else f"corruption={protocol.corruption!r}"
        )
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
    for part in (pool.source, pool.dataset._fingerprint, pair, seed, CACHE_VERSION, ENTRY_FORMAT):
        digest.update(repr(part).encode())
    digest.update(np.ascontiguousarray(indices, dtype=np.int64).tobytes())
    path = cache_dir() / "corrupted" / f"{pair[0]}-{pair[1]}-{digest.hexdigest()[:24]}.npy"
    if path.exists() and (out := _read_array(path)) is not None:
        return out
    try:
        out = corrupt(pixels(pool, indices), *pair, seed=seed, frost_dir=frost_dir or None)
    except ValueError as exc:  # missing frost textures
        raise ConfigError(f"{exc} (run-config key frost-dir)") from exc
    _write_array(path, out)
    return out

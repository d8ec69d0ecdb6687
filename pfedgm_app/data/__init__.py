"""One data pipeline for every method: hub id or local path -> pooled dataset -> Dirichlet
label partition -> seeded 80/20 split per client -> decoded tensors, cached once per client.

The partition depends only on (dataset, number of clients, alpha, seed, minimum size), so a
simulation and a deployment with the same settings see the same clients. A device that holds
its own data (`DeviceData`, a SuperNode's `data-path`) enters the same pipeline after the
partition: its samples are pooled, split 80/20 with the client's seed and decoded the same way.

Decoded clients are also kept on disk (`cache_dir()/clients`), keyed by the data's files and
every setting they depend on: a deployment starts a fresh ClientApp process per message, which
then reads its client's tensors instead of decoding the images again.

One module per step:

- `sources`: a dataset name resolved to a source, pooled, its image and label columns
- `labels`: the run's class list, labels mapped onto it by name
- `partition`: the Dirichlet partition and the per-client 80/20 split
- `roles`: `Protocol`, what fixes the clients, and each client's role and corruption
- `tensors`: pixels and normalized tensors (`ClientData`)
- `cache`: decoded clients in memory and on disk
- `clients`: one partitioned client's data, corrupted as assigned
- `device`: a device's own data (`DeviceData`)
- `corruptions`: the ten CIFAR-10-C corruptions (CIFAR-10S / CIFAR-100S)
- `partitioner`: the partition as a flwr-datasets Partitioner, for other Flower projects
  (not imported here: a ClientApp never imports flwr-datasets)
"""

from __future__ import annotations

from .cache import cache_dir
from .clients import load_client_data
from .device import DeviceData, load_device_data
from .labels import KNOWN_CLASSES, class_names, map_labels, run_classes
from .partition import (
    client_indices,
    client_split,
    client_train_test,
    dirichlet_partition,
    hold_out_validation,
    label_partition,
    min_partition_size,
    split_seed,
    split_train_test,
)
from .roles import Protocol, corruption_pair
from .sources import HUB_DATASETS, PoolInfo, load_pool, resolve_dataset
from .tensors import ClientData, pixels, to_tensor

__all__ = [
    "HUB_DATASETS",
    "KNOWN_CLASSES",
    "ClientData",
    "DeviceData",
    "PoolInfo",
    "Protocol",
    "cache_dir",
    "class_names",
    "client_indices",
    "client_split",
    "client_train_test",
    "corruption_pair",
    "dirichlet_partition",
    "hold_out_validation",
    "label_partition",
    "load_client_data",
    "load_device_data",
    "load_pool",
    "map_labels",
    "min_partition_size",
    "pixels",
    "resolve_dataset",
    "run_classes",
    "split_seed",
    "split_train_test",
    "to_tensor",
]

"""The model and the data of this project: a small CNN of its own with pFedGM's Gaussian head,
CIFAR-10 split across clients by flwr-datasets (Dirichlet label skew, 80/20 train/test)."""

from __future__ import annotations

import torch
from flwr_datasets import FederatedDataset
from flwr_datasets.partitioner import DirichletPartitioner
from torch import nn
from torch.utils.data import DataLoader
from torchvision.transforms import Compose, Normalize, ToTensor

from pfedgm_app.learning.gaussian import GaussianHead

NUM_CLASSES, FEATURES = 10, 64


class Net(nn.Module):
    """`backbone` (the generator phi: images to 64 features) and `head` (pFedGM's navigator and
    covariance: `head.mu`, `head.b`, `head.A`, the keys the strategy averages)."""

    def __init__(self) -> None:
        super().__init__()
        self.backbone = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(32 * 8 * 8, FEATURES), nn.ReLU(),
        )  # fmt: skip
        self.head = GaussianHead(NUM_CLASSES, FEATURES, navigator_std=1.0)  # or FEATURES**-0.5


_fds: FederatedDataset | None = None  # one per process: partitioning is done once
_to_tensor = Compose([ToTensor(), Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))])


def load_data(
    partition_id: int, num_partitions: int, data_dir: str = "", samples: int = 0
) -> tuple[DataLoader, DataLoader]:
    """This client's train and test loaders (batch 50), from the hub or from `data_dir`."""
    global _fds
    if _fds is None:
        source = {"dataset": "uoft-cs/cifar10"}
        if data_dir:
            files = {s: f"{data_dir}/{s}.parquet" for s in ("train", "test")}
            source = {"dataset": "parquet", "data_files": files}
        partitioner = DirichletPartitioner(num_partitions, "label", alpha=0.5, seed=42)
        _fds = FederatedDataset(**source, partitioners={"train": partitioner})
    partition = _fds.load_partition(partition_id)
    if samples:
        partition = partition.select(range(min(samples, len(partition))))
    split = partition.train_test_split(test_size=0.2, seed=42)

    def transform(batch: dict) -> dict:
        batch["img"] = [_to_tensor(img) for img in batch["img"]]
        return batch

    def collate(rows: list[dict]) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.stack([r["img"] for r in rows]), torch.tensor([r["label"] for r in rows])

    def loader(part, shuffle: bool) -> DataLoader:
        return DataLoader(part.with_transform(transform), 50, shuffle=shuffle, collate_fn=collate)

    return loader(split["train"], True), loader(split["test"], False)

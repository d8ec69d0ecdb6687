"""Images to tensors: a pool's rows as uint8 pixels, then normalized float tensors
(`ClientData`), the form every method trains on.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from pfedgm_app.runconfig.settings import ConfigError

from .sources import PoolInfo


@dataclass
class ClientData:
    """One client's decoded, normalized tensors (train/test), ready for batching."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int

    def to(self, device: torch.device) -> ClientData:
        x_train, y_train, x_test, y_test = (
            t.to(device) for t in (self.x_train, self.y_train, self.x_test, self.y_test)
        )
        return ClientData(x_train, y_train, x_test, y_test, self.num_classes)

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """(C, H, W) of the images, the model's input."""
        c, h, w = self.x_train.shape[1:]
        return c, h, w


def _client_data(arrays: dict[str, np.ndarray]) -> ClientData:
    c, h, w = (int(d) for d in arrays["image_shape"])
    shape = (c, h, w)
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

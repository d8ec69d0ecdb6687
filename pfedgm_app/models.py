"""Backbones (the generator phi) and the model that pairs one with a head.

Every model is `Model(generator, head)`: `generator(x)` is the representation z (128-d),
`head(z)` the logits. Methods pick the head: a linear classifier for the baselines, the
Gaussian classifier (navigator psi + covariance nu, `gaussian.GaussianHead`) for pFedGM.
"""

from __future__ import annotations

import torch
from torch import nn

FEATURE_DIM = 128


class CifarCNN(nn.Module):
    """5-layer CNN of FedPAC / pFedFDA for 3x32x32 images (3 conv + the fc giving z)."""

    def __init__(self, dim: int = FEATURE_DIM) -> None:
        super().__init__()
        act = nn.LeakyReLU
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 5),
            act(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 5, padding=1),
            act(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1),
            act(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(576, dim),
            act(),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.features(x)


class EmnistCNN(nn.Module):
    """4-layer CNN of FedPAC / pFedFDA for 1x28x28 images (2 conv + the fc giving z)."""

    def __init__(self, dim: int = FEATURE_DIM) -> None:
        super().__init__()
        act = nn.LeakyReLU
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 5),
            act(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 5, padding=1),
            act(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(800, dim),
            act(),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.features(x)


BACKBONES: dict[tuple[int, int, int], type[nn.Module]] = {
    (3, 32, 32): CifarCNN,
    (1, 28, 28): EmnistCNN,
}


class Model(nn.Module):
    """generator (phi) -> z -> head."""

    def __init__(self, generator: nn.Module, head: nn.Module) -> None:
        super().__init__()
        self.generator = generator
        self.head = head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.generator(x))


def build_generator(image_shape: tuple[int, int, int]) -> nn.Module:
    """The backbone for an image shape (C, H, W)."""
    try:
        return BACKBONES[tuple(image_shape)]()
    except KeyError:
        raise ValueError(
            f"no backbone for images of shape {image_shape}; supported: {list(BACKBONES)}"
        ) from None

"""Backbones (the generator phi) and the model that pairs one with a head.

Every model is `Model(generator, head)`: `generator(x)` is the representation z (128-d),
`head(z)` the logits. Methods pick the head: a linear classifier for the baselines, the
Gaussian classifier (navigator psi + covariance nu, `gaussian.GaussianHead`) for pFedGM.
"""

from __future__ import annotations

import torch
from torch import nn

FEATURE_DIM = 128


class ConvGenerator(nn.Module):
    """conv (k, padding) -> LeakyReLU -> 2x2 max-pool, per layer, then fc -> LeakyReLU = z."""

    def __init__(self, convs: list[tuple[int, int, int, int]], flat: int, dim: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for c_in, c_out, kernel, pad in convs:
            layers += [nn.Conv2d(c_in, c_out, kernel, padding=pad), nn.LeakyReLU(), nn.MaxPool2d(2)]
        self.features = nn.Sequential(*layers, nn.Flatten(), nn.Linear(flat, dim), nn.LeakyReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.features(x)


class CifarCNN(ConvGenerator):
    """5-layer CNN of FedPAC / pFedFDA for 3x32x32 images (3 conv + the fc giving z)."""

    def __init__(self, dim: int = FEATURE_DIM) -> None:
        super().__init__([(3, 16, 5, 0), (16, 32, 5, 1), (32, 64, 3, 1)], 576, dim)


class EmnistCNN(ConvGenerator):
    """4-layer CNN of FedPAC / pFedFDA for 1x28x28 images (2 conv + the fc giving z)."""

    def __init__(self, dim: int = FEATURE_DIM) -> None:
        super().__init__([(1, 16, 5, 0), (16, 32, 5, 1)], 800, dim)


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

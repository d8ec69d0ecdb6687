"""Three separable Gaussian blobs and a small generator + head, for the client API's tests."""

from __future__ import annotations

import torch
from torch import nn

from pfedgm_app.learning.gaussian import GaussianHead

K, D = 3, 4


def _problem(n: int = 60, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Three well separated Gaussian blobs in 5 dimensions."""
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % K
    centers = 4 * torch.eye(K, 5)
    return centers[y] + 0.5 * torch.randn(n, 5, generator=g), y


def _parts(seed: int = 0) -> tuple[nn.Module, GaussianHead]:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(5, D), nn.Tanh()), GaussianHead(K, D)


def _state(*modules: nn.Module) -> list[torch.Tensor]:
    return [t.detach().clone() for m in modules for t in m.state_dict().values()]

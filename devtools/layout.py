"""The backbones as usually written (conv -> act -> pool per layer, NCHW): the reference the
app's fast layout (`models.ConvGenerator`) is tested (`tests/test_models.py`) and benchmarked
(`benchmarks/bench_speed.py`) against. A helper of the repository, not of the app."""

from __future__ import annotations

import torch
from torch import nn


def plain_layout(model: nn.Module) -> nn.Module:
    """`model` (a `models.Model`) with each pool -> act pair put back in conv -> act -> pool
    order, torch's own pooling and every tensor contiguous (NCHW); the same parameters, in
    place."""
    layers = [
        nn.MaxPool2d(2) if isinstance(m, nn.MaxPool2d) else m for m in model.generator.features
    ]
    for i in range(len(layers) - 1):
        if isinstance(layers[i], nn.MaxPool2d) and isinstance(layers[i + 1], nn.LeakyReLU):
            layers[i], layers[i + 1] = layers[i + 1], layers[i]
    model.generator.features = nn.Sequential(*layers)
    # the instance's forward skips the channels-last conversion (not registered as a module)
    object.__setattr__(model.generator, "forward", model.generator.features)
    return model.to(memory_format=torch.contiguous_format)

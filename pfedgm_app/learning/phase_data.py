"""The data pFedGM's phases take (`phases`): a pair of tensors `(x, y)`, batched by the phases
themselves, or any re-iterable of `(x, y)` batches such as a `DataLoader`, used as it comes.
Torch only.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeGuard

import torch
from torch import nn

from .training import apply_batched, evaluating, run_batches, run_epochs

Data = tuple[torch.Tensor, torch.Tensor] | Iterable[tuple[torch.Tensor, torch.Tensor]]


def is_tensor_pair(data: Data) -> TypeGuard[tuple[torch.Tensor, torch.Tensor]]:
    """Whether `data` is a pair of tensors (x, y) rather than an iterable of batches."""
    return isinstance(data, tuple) and len(data) == 2 and isinstance(data[0], torch.Tensor)


@torch.no_grad()
def features(generator: nn.Module, data: Data) -> tuple[torch.Tensor, torch.Tensor]:
    """(z, y) of all of `data` under `generator` in eval mode (no dropout), on the device of
    `generator`'s parameters."""
    if is_tensor_pair(data):
        return apply_batched(generator, data[0]), data[1]
    device = next(generator.parameters()).device
    with evaluating(generator):
        pairs = [(generator(x.to(device)), y.to(device)) for x, y in map(as_pair, data)]
    if not pairs:
        raise ValueError("no batches in the data: a client needs at least one sample")
    return torch.cat([z for z, _ in pairs]), torch.cat([y for _, y in pairs])


def as_pair(batch) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch as (x, y), or one line that says what the API needs instead."""
    if isinstance(batch, (tuple, list)) and len(batch) == 2:
        if all(isinstance(t, torch.Tensor) for t in batch):
            return batch[0], batch[1]
    if isinstance(batch, dict):
        raise TypeError(
            f"batches must be (x, y) pairs of tensors, got a dict with keys {sorted(batch)}: "
            "map each batch to a pair, e.g. (batch['img'], batch['label'])"
        )
    raise TypeError(f"batches must be (x, y) pairs of tensors, got {type(batch).__name__}")


def run_data_epochs(
    data: Data, step, optimizer, epochs: int, batch_size: int, rng, after_step, device
) -> dict:
    """`epochs` passes of `step` over `data`: tensors batched by `batch_size` in an order drawn
    from `rng` (`training.run_epochs`), batches as they come (`training.run_batches`)."""
    if is_tensor_pair(data):
        x, y = data
        return run_epochs(step, x, y, optimizer, epochs, batch_size, rng, after_step)
    return run_batches(step, lambda: map(as_pair, data), optimizer, epochs, after_step, device)


def recording_first(data: Data, first: list) -> Iterable:
    """`data`'s batches as they come, the first one also appended to `first`."""
    for batch in data:
        if not first:
            first.append(as_pair(batch))
        yield batch

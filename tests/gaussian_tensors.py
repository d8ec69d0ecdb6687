"""Float64 tensors from seeded generators and a max-error check, for the Gaussian head's tests."""

from __future__ import annotations

import torch

F64 = torch.float64


def _assert_close(got: torch.Tensor, expected: torch.Tensor, atol: float) -> None:
    """Same shape and max |got - expected| <= atol (torch.testing imports torch.distributed)."""
    assert got.shape == expected.shape
    err = (got - expected).abs().max().item()
    assert err <= atol, f"max abs error {err:.3g} > {atol:.0e}"


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(*shape: int, g: torch.Generator) -> torch.Tensor:
    return torch.randn(*shape, generator=g, dtype=F64)

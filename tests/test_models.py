"""The generators' fast layout (pool before activation, channels-last) computes the plain
conv -> LeakyReLU -> max-pool network: same outputs, gradients and SGD trajectory."""

import pytest
import torch
from torch import nn

from devtools.layout import plain_layout
from pfedgm_app.learning.models import GENERATORS, MaxPool2x2, build_model
from pfedgm_app.learning.training import make_sgd, run_epochs, supervised_step


def _plain(fast: nn.Module) -> nn.Module:
    """A copy of `fast` with conv -> act -> pool per layer in contiguous (NCHW) format."""
    plain = plain_layout(build_model(fast.image_shape, lambda dim: nn.Linear(dim, 10)))
    plain.load_state_dict(fast.state_dict())
    assert all(p.is_contiguous() for p in plain.parameters())
    return plain


def _fast(shape: tuple[int, int, int]) -> nn.Module:
    torch.manual_seed(0)
    model = build_model(shape, lambda dim: nn.Linear(dim, 10))
    model.image_shape = shape
    return model


@pytest.mark.parametrize("shape", list(GENERATORS))
def test_fast_layout_gives_the_plain_networks_outputs_and_gradients(shape):
    fast = _fast(shape)
    plain = _plain(fast)
    convs = [m for m in fast.generator.modules() if isinstance(m, nn.Conv2d)]
    assert all(c.weight.is_contiguous(memory_format=torch.channels_last) for c in convs)
    fast.eval(), plain.eval()  # TinyImageNet's dropout off: same function
    x, y = torch.randn(8, *shape), torch.randint(0, 10, (8,))
    out_fast, out_plain = fast(x), plain(x)
    torch.testing.assert_close(out_fast, out_plain, rtol=1e-5, atol=1e-5)
    with torch.no_grad():  # the pools' path outside autograd
        torch.testing.assert_close(fast(x), out_plain, rtol=1e-5, atol=1e-5)
    nn.functional.cross_entropy(out_fast, y).backward()
    nn.functional.cross_entropy(out_plain, y).backward()
    for (name, a), b in zip(fast.named_parameters(), plain.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5, msg=name)


def test_fast_layout_follows_the_plain_sgd_trajectory():
    """Two epochs of the app's SGD loop (paper's settings) from the same start: every tensor
    moved, and the two trajectories differ by under 5% of how far it moved.

    Why relative to the move: each step's gradients agree to float tolerance (the test above),
    but over 8 steps the rounding of the two layouts' kernels compounds by an amount that
    depends on the CPU's oneDNN kernels (2e-5 in the fc weights on an AVX2 AMD EPYC, under 1e-5
    on an AVX-512 Xeon: 1% of the move here). A wrong gradient, a parameter left out of the
    optimizer or a lost momentum buffer differs by a large part of the move.
    """
    fast = _fast((3, 32, 32))
    plain = _plain(fast)
    start = {k: v.clone() for k, v in fast.state_dict().items()}
    x, y = torch.randn(200, 3, 32, 32), torch.randint(0, 10, (200,))
    for model in (fast, plain):
        opt = make_sgd(model.parameters(), 0.01, 0.5, 5e-4)
        run_epochs(supervised_step(model), x, y, opt, 2, rng=torch.Generator().manual_seed(1))
    for k, v in fast.state_dict().items():
        moved = (v - start[k]).norm()
        assert moved > 0, k
        assert (v - plain.state_dict()[k]).norm() < 0.05 * moved, k


@pytest.mark.parametrize("size", [(28, 28), (7, 6), (5, 9)])
@pytest.mark.parametrize("layout", [torch.channels_last, torch.contiguous_format])
def test_pool_outside_autograd_gives_torchs_values_and_inside_its_gradients(size, layout):
    """`MaxPool2x2` without autograd: torch's max-pool values (odd sizes floored, ties and NaN
    included); with autograd: torch's kernel, the whole gradient to the first maximum."""
    torch.manual_seed(0)
    x = torch.randn(3, 4, *size).round()  # rounding makes ties common
    x[0, 0, 0, 0] = float("nan")
    x = x.contiguous(memory_format=layout)
    with torch.no_grad():
        torch.testing.assert_close(MaxPool2x2()(x), nn.functional.max_pool2d(x, 2), equal_nan=True)
    flat = torch.zeros(1, 1, 4, 4, requires_grad=True)  # one tie of four per window
    MaxPool2x2()(flat).sum().backward()
    assert flat.grad.sum() == 4 and flat.grad[0, 0, ::2, ::2].eq(1).all()

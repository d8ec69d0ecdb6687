"""Generators (phi) and the model that pairs one with a head.

Every model is `Model(generator, head)`: `generator(x)` is the representation z,
`head(dropout(z))` the logits. Methods pick the head: a linear classifier for the baselines, the
Gaussian classifier (navigator psi + covariance nu, `gaussian.GaussianHead`) for pFedGM. The
generator is chosen by image shape (`GENERATORS`) and fixes z's dimension (`generator.dim`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


class MaxPool2x2(nn.MaxPool2d):
    """nn.MaxPool2d(2), cheaper outside autograd (prototypes, features, evaluation): there the
    maximum of the four strided views gives the same values without the indices that only the
    backward pass needs (no index tensor to write). For a tensor that requires grad it is
    torch's kernel, whose gradient goes to the first maximum of each window, where
    torch.maximum would split ties (constant image regions make them common).
    """

    def __init__(self) -> None:
        super().__init__(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.requires_grad:
            return super().forward(x)
        h, w = x.shape[-2:]
        x = x[..., : h - h % 2, : w - w % 2]  # floor mode: an odd last row or column is dropped
        x = torch.maximum(x[..., ::2], x[..., 1::2])
        return torch.maximum(x[..., ::2, :], x[..., 1::2, :])


class ConvGenerator(nn.Module):
    """conv (k, padding) -> LeakyReLU -> 2x2 max-pool, per layer, then [dropout ->] fc ->
    LeakyReLU = z (`dim`). `head_dropout` is the dropout its `Model` puts between z and the head.

    Two layout choices make the same function cheaper on a CPU (`benchmarks/bench_speed.py`):
    each layer pools before its activation (a max-pool commutes with the increasing LeakyReLU,
    so outputs and gradients are those of conv -> act -> pool, with the activation on a quarter
    of the elements, in place: the pool's backward needs only its indices), and the
    convolutions run in channels-last memory format (oneDNN's fast path; pooling too; each
    batch is converted on entry: storing the images channels-last instead gained nothing
    measurable). Outside autograd the pools skip their indices (`MaxPool2x2`). All are checked
    against the plain order and layout in `tests/test_models.py`. The state_dict keys and shapes
    are those of conv -> act -> pool.
    """

    head_dropout = 0.0

    def __init__(
        self, convs: list[tuple[int, int, int, int]], flat: int, dim: int, dropout: float = 0.0
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for c_in, c_out, kernel, pad in convs:
            conv = nn.Conv2d(c_in, c_out, kernel, padding=pad)
            layers += [conv, MaxPool2x2(), nn.LeakyReLU(inplace=True)]
        layers.append(nn.Flatten())
        if dropout:
            layers.append(nn.Dropout(dropout))
        self.features = nn.Sequential(*layers, nn.Linear(flat, dim), nn.LeakyReLU())
        self.dim = dim
        self.to(memory_format=torch.channels_last)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.features(x.contiguous(memory_format=torch.channels_last))


class CifarCNN(ConvGenerator):
    """5-layer CNN of FedPAC / pFedFDA for 3x32x32 images (3 conv + the fc giving z, 128-d)."""

    def __init__(self, dim: int = 128) -> None:
        super().__init__([(3, 16, 5, 0), (16, 32, 5, 1), (32, 64, 3, 1)], 576, dim)


class EmnistCNN(ConvGenerator):
    """4-layer CNN of FedPAC / pFedFDA for 1x28x28 images (2 conv + the fc giving z, 128-d)."""

    def __init__(self, dim: int = 128) -> None:
        super().__init__([(1, 16, 5, 0), (16, 32, 5, 1)], 800, dim)


class TinyImageNetCNN(ConvGenerator):
    """The CIFAR CNN "enhanced with two dropout layers" for 3x64x64 images (the paper, Model
    Setup): the same three conv layers (64 px leave 64 x 7 x 7 = 3,136 features), z scaled up to
    512-d for 200 classes (4x the pixels and 20x the classes of CIFAR-10's 128-d), and dropout
    p = 0.5 (the paper gives no rate; torch's default) before each of the last two fully
    connected layers: before the fc giving z (inside the generator) and between z and the head
    (`Model.dropout`: before the navigator for pFedGM). pFedGM's R_c (Eq. LossR), its prototypes
    and the baselines' feature statistics use z, before that second dropout. Dropout is on only
    in training passes: `training.apply_batched` and `accuracy` (prototypes, Phase 2 features,
    evaluation) run the model in eval mode.
    """

    head_dropout = 0.5

    def __init__(self, dim: int = 512) -> None:
        super().__init__([(3, 16, 5, 0), (16, 32, 5, 1), (32, 64, 3, 1)], 3136, dim, dropout=0.5)


GENERATORS: dict[tuple[int, ...], Callable[[], ConvGenerator]] = {
    (3, 32, 32): CifarCNN,
    (1, 28, 28): EmnistCNN,
    (3, 64, 64): TinyImageNetCNN,
}


class Model(nn.Module):
    """generator (phi) -> z -> dropout (identity but for TinyImageNet) -> head."""

    def __init__(self, generator: ConvGenerator, head: nn.Module) -> None:
        super().__init__()
        self.generator = generator
        self.head = head
        p = generator.head_dropout
        self.dropout = nn.Dropout(p) if p else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.dropout(self.generator(x)))

    def part_keys(self, part: str) -> list[str]:
        """state_dict keys of a part: `generator`, `head`, or `convolutions` (the generator's
        convolution layers): what a method's `sends` names."""
        if part == "convolutions":
            convs = {
                f"generator.{n}."
                for n, m in self.generator.named_modules()
                if isinstance(m, nn.Conv2d)
            }
            return [k for k in self.state_dict() if k[: k.rindex(".") + 1] in convs]
        if part not in ("generator", "head"):
            raise ValueError(f"unknown model part {part!r}")
        return [k for k in self.state_dict() if k.split(".")[0] == part]


def build_generator(image_shape: tuple[int, int, int]) -> ConvGenerator:
    """The generator for an image shape (C, H, W)."""
    try:
        return GENERATORS[tuple(image_shape)]()
    except KeyError:
        raise ValueError(
            f"no generator for images of shape {image_shape}; supported: {list(GENERATORS)}"
        ) from None


def build_model(image_shape: tuple[int, int, int], head: Callable[[int], nn.Module]) -> Model:
    """The generator for `image_shape` with `head(dim)` on its z."""
    generator = build_generator(image_shape)
    return Model(generator, head(generator.dim))

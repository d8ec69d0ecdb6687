"""The ten CIFAR-10-C corruptions at 32x32 scale, five severities each (CIFAR-10S / CIFAR-100S).

Hendrycks & Dietterich, "Benchmarking Neural Network Robustness to Common Corruptions and
Perturbations", ICLR 2019. Constants are those of the authors' CIFAR-10-C generator
(`make_cifar_c.py` in hendrycks/robustness), not the ImageNet-C ones; see
docs/corruptions.md. Everything is reimplemented in numpy and vectorized over the batch.

Conventions. Each per-corruption function takes float images in [0, 1] of shape (N, H, W, 3),
a severity in 1..5 and a `numpy.random.Generator`, and returns floats in [0, 1] of that shape.
`corrupt` wraps them for uint8 batches and rounds back to uint8 (the reference script truncates
with `np.uint8`, which biases every corrupted image down by half a level on average).
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import numpy as np

from .blur import defocus_blur, motion_blur
from .severities import (
    BRIGHTNESS,
    CONTRAST,
    GAUSSIAN_SIGMA,
    IMPULSE_AMOUNT,
    JPEG_QUALITY,
    SEVERITIES,
    SHOT_RATE,
    check_severity,
    level,
)
from .weather import fog, frost, resolve_frost_dir

CORRUPTIONS: tuple[str, ...] = (
    "motion_blur",
    "defocus_blur",
    "gaussian_noise",
    "shot_noise",
    "impulse_noise",
    "frost",
    "fog",
    "jpeg_compression",
    "brightness",
    "contrast",
)


# ---------------------------------------------------------------------------------------------
# Validation and conversion


def _check_images(images: np.ndarray) -> None:
    if not isinstance(images, np.ndarray):
        raise ValueError(f"images must be a numpy array, got {type(images).__name__}")
    if images.dtype != np.uint8:
        raise ValueError(f"images must be uint8 pixels in [0, 255], got dtype {images.dtype}")
    if images.ndim != 4 or images.shape[-1] != 3 or 0 in images.shape[1:3]:
        raise ValueError(
            f"images must have shape (N, H, W, 3): RGB, channels last; got {images.shape}"
        )


def _to_uint8(x: np.ndarray) -> np.ndarray:
    return np.clip(np.round(x * 255.0), 0, 255).astype(np.uint8)


# ---------------------------------------------------------------------------------------------
# Noise


def gaussian_noise(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Additive Gaussian noise: clip(x + N(0, sigma^2), 0, 1) per pixel and channel.

    sigma = 0.04, 0.06, 0.08, 0.09, 0.10 for severities 1..5 (CIFAR-10-C).
    """
    sigma = level(GAUSSIAN_SIGMA, severity)
    return np.clip(x + rng.normal(0.0, sigma, size=x.shape), 0.0, 1.0)


def shot_noise(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Poisson (shot) noise: clip(Poisson(x * c) / c, 0, 1), so Var = x / c.

    c = 500, 250, 100, 75, 50 for severities 1..5 (CIFAR-10-C).
    """
    c = level(SHOT_RATE, severity)
    return np.clip(rng.poisson(x * c) / c, 0.0, 1.0)


def impulse_noise(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Salt-and-pepper noise: each value (pixel and channel) is hit with probability `amount`
    and then set to 1 or 0 with equal odds (scikit-image `random_noise(mode='s&p')`).

    amount = 0.01, 0.02, 0.03, 0.05, 0.07 for severities 1..5 (CIFAR-10-C).
    """
    amount = level(IMPULSE_AMOUNT, severity)
    hit = rng.random(x.shape) < amount
    salt = rng.random(x.shape) < 0.5
    return np.where(hit, salt.astype(x.dtype), x)


# ---------------------------------------------------------------------------------------------
# Digital


def jpeg_compression(
    x: np.ndarray, severity: int, rng: np.random.Generator | None = None
) -> np.ndarray:
    """JPEG round trip through PIL's codec at quality q (PIL defaults otherwise, as the
    reference's `save(..., 'JPEG', quality=q)`). Deterministic (`rng` unused).

    q = 80, 65, 58, 50, 40 for severities 1..5 (CIFAR-10-C).
    """
    from PIL import Image  # where used: importing the data package stays lean

    quality = level(JPEG_QUALITY, severity)
    pixels = _to_uint8(x)
    out = np.empty_like(pixels)
    for i, image in enumerate(pixels):  # the codec takes one image at a time
        buffer = io.BytesIO()
        Image.fromarray(image).save(buffer, format="JPEG", quality=quality)
        with Image.open(buffer) as decoded:
            out[i] = np.asarray(decoded.convert("RGB"))
    return out / 255.0


def rgb_to_hsv(rgb: np.ndarray) -> np.ndarray:
    """RGB in [0, 1] -> HSV in [0, 1] (hue as a fraction of a turn), as
    skimage.color.rgb2hsv: V = max, S = (max - min) / max, H by the sector of the max channel;
    H = S = 0 where undefined (grey, black)."""
    r, g, b = np.moveaxis(rgb, -1, 0)
    v = rgb.max(axis=-1)
    delta = v - rgb.min(axis=-1)
    safe_delta = np.where(delta > 0, delta, 1.0)
    s = np.where(v > 0, delta / np.where(v > 0, v, 1.0), 0.0)
    sector = np.select(
        [r == v, g == v],
        [(g - b) / safe_delta, 2.0 + (b - r) / safe_delta],
        4.0 + (r - g) / safe_delta,
    )
    h = np.where(delta > 0, (sector / 6.0) % 1.0, 0.0)
    return np.stack([h, s, v], axis=-1)


def hsv_to_rgb(hsv: np.ndarray) -> np.ndarray:
    """HSV in [0, 1] -> RGB in [0, 1], the inverse of `rgb_to_hsv` (skimage.color.hsv2rgb)."""
    h, s, v = np.moveaxis(hsv, -1, 0)
    h6 = h * 6.0
    sector = np.floor(h6)
    f = h6 - sector
    sector = sector.astype(np.int64) % 6  # h = 1.0 (a full turn) is sector 0
    p = v * (1.0 - s)
    q = v * (1.0 - f * s)
    t = v * (1.0 - (1.0 - f) * s)
    r = np.choose(sector, [v, q, p, p, t, v])
    g = np.choose(sector, [t, v, v, q, p, p])
    b = np.choose(sector, [p, p, t, v, v, q])
    return np.stack([r, g, b], axis=-1)


def brightness(x: np.ndarray, severity: int, rng: np.random.Generator | None = None) -> np.ndarray:
    """Brightness: RGB -> HSV, V = clip(V + c, 0, 1), HSV -> RGB. Deterministic (`rng` unused).

    c = 0.05, 0.1, 0.15, 0.2, 0.3 for severities 1..5 (CIFAR-10-C).
    """
    c = level(BRIGHTNESS, severity)
    hsv = rgb_to_hsv(x)
    hsv[..., 2] = np.clip(hsv[..., 2] + c, 0.0, 1.0)
    return np.clip(hsv_to_rgb(hsv), 0.0, 1.0)


def contrast(x: np.ndarray, severity: int, rng: np.random.Generator | None = None) -> np.ndarray:
    """Contrast: clip((x - mean) * c + mean, 0, 1), mean per image and per channel (the
    reference's mean over axes (0, 1) of an H x W x 3 image). Deterministic (`rng` unused).

    c = 0.75, 0.5, 0.4, 0.3, 0.15 for severities 1..5 (CIFAR-10-C).
    """
    c = level(CONTRAST, severity)
    mean = x.mean(axis=(1, 2), keepdims=True)
    return np.clip((x - mean) * c + mean, 0.0, 1.0)


# ---------------------------------------------------------------------------------------------
# Entry points


_BY_NAME: dict[str, Callable[[np.ndarray, int, np.random.Generator], np.ndarray]] = {
    "motion_blur": motion_blur,
    "defocus_blur": defocus_blur,
    "gaussian_noise": gaussian_noise,
    "shot_noise": shot_noise,
    "impulse_noise": impulse_noise,
    "fog": fog,
    "jpeg_compression": jpeg_compression,
    "brightness": brightness,
    "contrast": contrast,
}


def corrupt(
    images: np.ndarray,
    corruption: str,
    severity: int,
    seed: int,
    frost_dir: str | Path | None = None,
) -> np.ndarray:
    """Apply one CIFAR-10-C corruption at one severity to a batch.

    images: uint8 array (N, H, W, 3) RGB. Returns uint8 (N, H, W, 3). All randomness comes from
    one `np.random.default_rng(seed)`, so the same seed gives the same output. `frost_dir` is
    only read for "frost" (default: see `resolve_frost_dir`). Raises ValueError on an unknown
    corruption, a severity outside 1..5, a non-uint8 or non-(N, H, W, 3) batch, or missing
    frost textures.
    """
    if corruption not in CORRUPTIONS:
        raise ValueError(f"unknown corruption {corruption!r}; valid ones: {', '.join(CORRUPTIONS)}")
    check_severity(severity)
    _check_images(images)
    rng = np.random.default_rng(seed)
    if corruption == "frost":
        frost_dir = resolve_frost_dir(frost_dir)  # fail on a missing folder even for N = 0
    if len(images) == 0:
        return images.copy()
    x = images.astype(np.float64) / 255.0
    if corruption == "frost":
        return _to_uint8(frost(x, severity, rng, frost_dir))
    return _to_uint8(_BY_NAME[corruption](x, severity, rng))


def corruption_pairs() -> list[tuple[str, int]]:
    """The 50 (corruption, severity) pairs: each corruption in CORRUPTIONS order, severities
    1..5."""
    return [(name, severity) for name in CORRUPTIONS for severity in SEVERITIES]

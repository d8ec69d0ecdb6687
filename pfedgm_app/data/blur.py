"""CIFAR-10-C's blurs: defocus (a disk kernel, as cv2.filter2D) and motion (ImageMagick's
one-sided line), vectorized over the batch; conventions as `corruptions`."""

from __future__ import annotations

import math

import numpy as np

from .severities import DEFOCUS, MOTION, level


def disk_kernel(radius: float, alias_blur: float) -> np.ndarray:
    """The defocus kernel of the reference: the disk X^2 + Y^2 <= radius^2 on the grid -8..8
    (17 x 17), normalized, then blurred by a 3x3 Gaussian of sigma `alias_blur` (as
    cv2.GaussianBlur, border reflect-101) to soften its aliased edge; renormalized.
    """
    grid = np.arange(-8, 9)
    yy, xx = np.meshgrid(grid, grid, indexing="ij")
    disk = (xx**2 + yy**2 <= radius**2).astype(np.float64)
    disk /= disk.sum()
    g = np.exp(-(np.arange(-1, 2) ** 2) / (2.0 * alias_blur**2))
    g /= g.sum()
    p = np.pad(disk, 1, mode="reflect")  # numpy 'reflect' is cv2's default BORDER_REFLECT_101
    p = g[0] * p[:-2] + g[1] * p[1:-1] + g[2] * p[2:]
    kernel = g[0] * p[:, :-2] + g[1] * p[:, 1:-1] + g[2] * p[:, 2:]
    return kernel / kernel.sum()


def _filter2d(x: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    """cv2.filter2D on each channel: out(y, x) = sum_ij k(i, j) x(y + i - c, x + j - c),
    borders reflect-101 (cv2's default). Only the kernel's nonzero taps are visited: the
    17x17 defocus kernels are nonzero on at most 5x5."""
    c = kernel.shape[0] // 2
    ii, jj = np.nonzero(kernel)
    reach = int(max(np.abs(ii - c).max(), np.abs(jj - c).max()))
    xp = np.pad(x, ((0, 0), (reach, reach), (reach, reach), (0, 0)), mode="reflect")
    h, w = x.shape[1:3]
    out = np.zeros_like(x)
    for i, j in zip(ii, jj, strict=True):
        top, left = i - c + reach, j - c + reach
        out += kernel[i, j] * xp[:, top : top + h, left : left + w]
    return out


def defocus_blur(
    x: np.ndarray, severity: int, rng: np.random.Generator | None = None
) -> np.ndarray:
    """Defocus blur: each channel convolved with `disk_kernel(radius, alias_blur)`, borders
    reflect-101 (as cv2.filter2D in the reference), clipped. Deterministic (`rng` unused).

    (radius, alias_blur) = (0.3, 0.4), (0.4, 0.5), (0.5, 0.6), (1, 0.2), (1.5, 0.1)
    for severities 1..5 (CIFAR-10-C).
    """
    radius, alias_blur = level(DEFOCUS, severity)
    return np.clip(_filter2d(x, disk_kernel(radius, alias_blur)), 0.0, 1.0)


def motion_blur_taps(
    radius: float, sigma: float, angle: float | np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ImageMagick's MotionBlurImage kernel: width = 2 * ceil(radius) + 1 taps t = 0..width-1
    (GetOptimalKernelWidth1D), weights exp(-t^2 / (2 sigma^2)) normalized, tap t reading the
    pixel at (x + dx_t, y + dy_t) with dx_t = ceil(t cos(angle) - 0.5), dy_t = ceil(t sin(angle)
    - 0.5): a one-sided line, strongest on the pixel itself.

    Returns (weights (T,), dy (..., T), dx (..., T)) for an angle array of shape (...).
    """
    t = np.arange(2 * math.ceil(radius) + 1)
    weights = np.exp(-(t**2) / (2.0 * sigma**2))
    weights /= weights.sum()
    theta = np.deg2rad(np.asarray(angle, dtype=np.float64))[..., None]
    dy = np.ceil(t * np.sin(theta) - 0.5).astype(np.int64)
    dx = np.ceil(t * np.cos(theta) - 0.5).astype(np.int64)
    return weights, dy, dx


def motion_blur_kernel(radius: float, sigma: float, angle: float) -> np.ndarray:
    """The taps of `motion_blur_taps` as a square correlation kernel (centre = offset 0), for
    inspection: out(y, x) = sum_ij k(i, j) x(y + i - c, x + j - c) away from the borders."""
    weights, dy, dx = motion_blur_taps(radius, sigma, angle)
    c = len(weights) - 1
    kernel = np.zeros((2 * c + 1, 2 * c + 1))
    np.add.at(kernel, (c + dy, c + dx), weights)
    return kernel


def motion_blur(
    x: np.ndarray,
    severity: int,
    rng: np.random.Generator | None,
    angles: np.ndarray | None = None,
) -> np.ndarray:
    """Motion blur as ImageMagick's `motion_blur(radius, sigma, angle)` (see
    `motion_blur_taps`), one angle per image drawn uniform in [-45, 45] degrees unless
    `angles` is given. Off-image reads take the nearest edge pixel (ImageMagick's default
    virtual-pixel method).

    (radius, sigma) = (6, 1), (6, 1.5), (6, 2), (8, 2), (9, 2.5) for severities 1..5
    (CIFAR-10-C).
    """
    radius, sigma = level(MOTION, severity)
    n, h, w = x.shape[:3]
    if angles is None:  # `rng` is only needed here
        if rng is None:
            raise ValueError("motion_blur draws the angles with `rng`: give one, or `angles`")
        angles = np.asarray(rng.uniform(-45.0, 45.0, size=n))
    weights, dy, dx = motion_blur_taps(radius, sigma, np.asarray(angles).reshape(n))
    rows = np.clip(np.arange(h) + dy[:, :, None], 0, h - 1)  # (N, T, H)
    cols = np.clip(np.arange(w) + dx[:, :, None], 0, w - 1)  # (N, T, W)
    batch = np.arange(n)[:, None, None]
    out = np.zeros_like(x)
    for t, weight in enumerate(weights):  # a gather per tap; each image has its own offsets
        out += weight * x[batch, rows[:, t, :, None], cols[:, t, None, :]]
    return np.clip(out, 0.0, 1.0)

"""The ten CIFAR-10-C corruptions at 32x32 scale, five severities each (CIFAR-10S / CIFAR-100S).

Hendrycks & Dietterich, "Benchmarking Neural Network Robustness to Common Corruptions and
Perturbations", ICLR 2019. Constants are those of the authors' CIFAR-10-C generator
(`make_cifar_c.py` in hendrycks/robustness), not the ImageNet-C ones; see
../shared/notes/cifar-c.md. Everything is reimplemented in numpy and vectorized over the batch.

Conventions. Each per-corruption function takes float images in [0, 1] of shape (N, H, W, 3),
a severity in 1..5 and a `numpy.random.Generator`, and returns floats in [0, 1] of that shape.
`corrupt` wraps them for uint8 batches and rounds back to uint8 (the reference script truncates
with `np.uint8`, which biases every corrupted image down by half a level on average).
"""

from __future__ import annotations

import functools
import io
import math
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
from PIL import Image

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
SEVERITIES = (1, 2, 3, 4, 5)

# CIFAR-10-C constants, one entry per severity 1..5.
GAUSSIAN_SIGMA = (0.04, 0.06, 0.08, 0.09, 0.10)
SHOT_RATE = (500, 250, 100, 75, 50)
IMPULSE_AMOUNT = (0.01, 0.02, 0.03, 0.05, 0.07)
DEFOCUS = ((0.3, 0.4), (0.4, 0.5), (0.5, 0.6), (1.0, 0.2), (1.5, 0.1))  # (radius, alias_blur)
MOTION = ((6, 1.0), (6, 1.5), (6, 2.0), (8, 2.0), (9, 2.5))  # (radius, sigma)
FROST = ((1.0, 0.2), (1.0, 0.3), (0.9, 0.4), (0.85, 0.4), (0.75, 0.45))  # (a, b)
FOG = ((0.2, 3.0), (0.5, 3.0), (0.75, 2.5), (1.0, 2.0), (1.5, 1.75))  # (a, decay)
JPEG_QUALITY = (80, 65, 58, 50, 40)
BRIGHTNESS = (0.05, 0.1, 0.15, 0.2, 0.3)
CONTRAST = (0.75, 0.5, 0.4, 0.3, 0.15)

# The reference draws randint(5): frost6 is shipped but never used.
FROST_FILES = ("frost1.png", "frost2.png", "frost3.png", "frost4.jpg", "frost5.jpg")
FROST_SCALE = 5  # cv2.resize(fx=fy=0.2)


# ---------------------------------------------------------------------------------------------
# Validation and conversion


def _check_severity(severity: int) -> None:
    ok = isinstance(severity, int | np.integer) and not isinstance(severity, bool)
    if not ok or severity not in SEVERITIES:
        raise ValueError(f"severity must be an integer in 1..5, got {severity!r}")


def _level(table: tuple, severity: int):
    _check_severity(severity)
    return table[severity - 1]


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
    sigma = _level(GAUSSIAN_SIGMA, severity)
    return np.clip(x + rng.normal(0.0, sigma, size=x.shape), 0.0, 1.0)


def shot_noise(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Poisson (shot) noise: clip(Poisson(x * c) / c, 0, 1), so Var = x / c.

    c = 500, 250, 100, 75, 50 for severities 1..5 (CIFAR-10-C).
    """
    c = _level(SHOT_RATE, severity)
    return np.clip(rng.poisson(x * c) / c, 0.0, 1.0)


def impulse_noise(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Salt-and-pepper noise: each value (pixel and channel) is hit with probability `amount`
    and then set to 1 or 0 with equal odds (scikit-image `random_noise(mode='s&p')`).

    amount = 0.01, 0.02, 0.03, 0.05, 0.07 for severities 1..5 (CIFAR-10-C).
    """
    amount = _level(IMPULSE_AMOUNT, severity)
    hit = rng.random(x.shape) < amount
    salt = rng.random(x.shape) < 0.5
    return np.where(hit, salt.astype(x.dtype), x)


# ---------------------------------------------------------------------------------------------
# Blur


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
    radius, alias_blur = _level(DEFOCUS, severity)
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
    radius, sigma = _level(MOTION, severity)
    n, h, w = x.shape[:3]
    if angles is None:  # `rng` is only needed here
        angles = rng.uniform(-45.0, 45.0, size=n)
    weights, dy, dx = motion_blur_taps(radius, sigma, np.asarray(angles).reshape(n))
    rows = np.clip(np.arange(h) + dy[:, :, None], 0, h - 1)  # (N, T, H)
    cols = np.clip(np.arange(w) + dx[:, :, None], 0, w - 1)  # (N, T, W)
    batch = np.arange(n)[:, None, None]
    out = np.zeros_like(x)
    for t, weight in enumerate(weights):  # a gather per tap; each image has its own offsets
        out += weight * x[batch, rows[:, t, :, None], cols[:, t, None, :]]
    return np.clip(out, 0.0, 1.0)


# ---------------------------------------------------------------------------------------------
# Weather


def resolve_frost_dir(frost_dir: str | Path | None = None) -> Path:
    """The folder holding frost1.png ... frost5.jpg: `frost_dir` if given, else the first
    `<ancestor>/shared/data/frost` above the working directory or above this file (which covers
    `<ancestor>/../shared/data/frost` too). Raises ValueError naming where it looked."""
    if frost_dir is not None:
        folder = Path(frost_dir)
        missing = [name for name in FROST_FILES if not (folder / name).is_file()]
        if missing:
            raise ValueError(
                f"frost textures not found: looked for {', '.join(missing)} in {folder}; "
                "pass frost_dir= the folder holding frost1.png ... frost5.jpg"
            )
        return folder
    return _find_frost_dir((Path.cwd(), Path(__file__).resolve().parents[1]))


def _find_frost_dir(starts: Iterable[Path]) -> Path:
    folder = find_shared("frost", starts, lambda f: all((f / n).is_file() for n in FROST_FILES))
    if folder is None:
        raise ValueError(
            "frost textures not found: looked for <ancestor>/shared/data/frost/frost1.png ... "
            f"frost5.jpg above {' and '.join(map(str, starts))}; pass frost_dir= the folder "
            "holding them"
        )
    return folder


def find_shared(
    name: str, starts: Iterable[Path], accept: Callable[[Path], bool] = Path.is_dir
) -> Path | None:
    """The first `<ancestor>/shared/data/<name>` above any of `starts` that `accept`s, or None:
    where the offline copies of the data live beside a checkout (`../shared/data`)."""
    for start in starts:
        start = Path(start).resolve()
        for ancestor in (start, *start.parents):
            folder = ancestor / "shared" / "data" / name
            if accept(folder):
                return folder
    return None


@functools.lru_cache(maxsize=4)
def _frost_textures(folder: str) -> tuple[np.ndarray, ...]:
    """frost1..frost5 as RGB floats in [0, 1], shrunk as the reference's cv2.resize(fx=fy=0.2,
    INTER_LINEAR): at an exact 1/5 scale its sample points (i + 0.5) * 5 - 0.5 = 5i + 2 are
    whole pixels, so it is a stride-5 pick without low-pass (PIL's resize would antialias and
    soften the frost). Alpha, where present, is dropped as cv2.imread does."""
    textures = []
    for name in FROST_FILES:
        with Image.open(Path(folder) / name) as image:
            rgb = np.asarray(image.convert("RGB"))
        h, w = round(rgb.shape[0] / FROST_SCALE), round(rgb.shape[1] / FROST_SCALE)
        start = FROST_SCALE // 2
        small = rgb[start::FROST_SCALE, start::FROST_SCALE][:h, :w]
        textures.append(np.ascontiguousarray(small, dtype=np.float64) / 255.0)
    return tuple(textures)


def frost(
    x: np.ndarray,
    severity: int,
    rng: np.random.Generator,
    frost_dir: str | Path | None = None,
) -> np.ndarray:
    """Frost: clip(a * x + b * crop, 0, 1), crop an H x W window of one of frost1..frost5
    (drawn uniformly per image) shrunk by 0.2, at a random offset in [0, size - H) x
    [0, size - W) as the reference's randint.

    (a, b) = (1, 0.2), (1, 0.3), (0.9, 0.4), (0.85, 0.4), (0.75, 0.45) for severities 1..5
    (CIFAR-10-C).
    """
    a, b = _level(FROST, severity)
    textures = _frost_textures(str(resolve_frost_dir(frost_dir)))
    n, h, w = x.shape[:3]
    sizes = np.array([t.shape[:2] for t in textures])
    if (sizes[:, 0] <= h).any() or (sizes[:, 1] <= w).any():
        raise ValueError(f"frost textures {sizes.tolist()} are too small for {h}x{w} images")
    pick = rng.integers(len(textures), size=n)
    top = rng.integers(0, sizes[pick, 0] - h)
    left = rng.integers(0, sizes[pick, 1] - w)
    rows = top[:, None] + np.arange(h)
    cols = left[:, None] + np.arange(w)
    crops = np.empty_like(x)
    for k, texture in enumerate(textures):
        sel = np.flatnonzero(pick == k)
        crops[sel] = texture[rows[sel, :, None], cols[sel, None, :]]
    return np.clip(a * x + b * crops, 0.0, 1.0)


def plasma_fractal(n: int, mapsize: int, decay: float, rng: np.random.Generator) -> np.ndarray:
    """n diamond-square heightmaps of mapsize x mapsize (a power of 2) on a torus, each
    normalized to [0, 1].

    As the reference: corners start at 0, each new point is the mean of its 4 neighbours plus
    wibble * U(-wibble, wibble) (so the displacement scale is wibble^2), wibble = 100 at the
    first level and divided by `decay` after each level.
    """
    if mapsize < 2 or mapsize & (mapsize - 1):
        raise ValueError(f"mapsize must be a power of 2 >= 2, got {mapsize}")
    m = np.zeros((n, mapsize, mapsize))
    step, wibble = mapsize, 100.0

    def displaced(total: np.ndarray) -> np.ndarray:
        return total / 4.0 + wibble * rng.uniform(-wibble, wibble, total.shape)

    while step >= 2:
        half = step // 2
        corners = m[:, ::step, ::step]
        # square step: the centre of each square from its 4 corners
        pair = corners + np.roll(corners, -1, axis=1)
        m[:, half::step, half::step] = displaced(pair + np.roll(pair, -1, axis=2))
        centres = m[:, half::step, half::step]
        # diamond step, points on the corner rows: left/right corners, centres above/below
        total = corners + np.roll(corners, -1, axis=2) + centres + np.roll(centres, 1, axis=1)
        m[:, ::step, half::step] = displaced(total)
        # diamond step, points on the corner columns: corners above/below, centres left/right
        total = corners + np.roll(corners, -1, axis=1) + centres + np.roll(centres, 1, axis=2)
        m[:, half::step, ::step] = displaced(total)
        step //= 2
        wibble /= decay
    m -= m.min(axis=(1, 2), keepdims=True)
    return m / m.max(axis=(1, 2), keepdims=True)


def fog(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Fog: clip((x + a * F) * m / (m + a), 0, 1), F a plasma fractal per image (same on all
    channels; mapsize = H, W rounded up to a power of 2, cropped) and m the image's maximum, so
    the fogged image keeps roughly the original's peak brightness.

    (a, decay) = (0.2, 3), (0.5, 3), (0.75, 2.5), (1, 2), (1.5, 1.75) for severities 1..5
    (CIFAR-10-C).
    """
    a, decay = _level(FOG, severity)
    n, h, w = x.shape[:3]
    mapsize = 1 << max(1, (max(h, w) - 1).bit_length())
    fractal = plasma_fractal(n, mapsize, decay, rng)[:, :h, :w, None]
    peak = x.max(axis=(1, 2, 3), keepdims=True)
    return np.clip((x + a * fractal) * peak / (peak + a), 0.0, 1.0)


# ---------------------------------------------------------------------------------------------
# Digital


def jpeg_compression(
    x: np.ndarray, severity: int, rng: np.random.Generator | None = None
) -> np.ndarray:
    """JPEG round trip through PIL's codec at quality q (PIL defaults otherwise, as the
    reference's `save(..., 'JPEG', quality=q)`). Deterministic (`rng` unused).

    q = 80, 65, 58, 50, 40 for severities 1..5 (CIFAR-10-C).
    """
    quality = _level(JPEG_QUALITY, severity)
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
    c = _level(BRIGHTNESS, severity)
    hsv = rgb_to_hsv(x)
    hsv[..., 2] = np.clip(hsv[..., 2] + c, 0.0, 1.0)
    return np.clip(hsv_to_rgb(hsv), 0.0, 1.0)


def contrast(x: np.ndarray, severity: int, rng: np.random.Generator | None = None) -> np.ndarray:
    """Contrast: clip((x - mean) * c + mean, 0, 1), mean per image and per channel (the
    reference's mean over axes (0, 1) of an H x W x 3 image). Deterministic (`rng` unused).

    c = 0.75, 0.5, 0.4, 0.3, 0.15 for severities 1..5 (CIFAR-10-C).
    """
    c = _level(CONTRAST, severity)
    mean = x.mean(axis=(1, 2), keepdims=True)
    return np.clip((x - mean) * c + mean, 0.0, 1.0)


# ---------------------------------------------------------------------------------------------
# Entry points


_BY_NAME = {
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
    _check_severity(severity)
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

"""CIFAR-10-C's weather: frost (the reference's texture files, found beside the checkout) and
fog (a diamond-square plasma fractal); conventions as `corruptions`."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from pfedgm_app.runconfig.shared_data import find_shared

from .severities import FOG, FROST, level

# The reference draws randint(5): frost6 is shipped but never used.
FROST_FILES = ("frost1.png", "frost2.png", "frost3.png", "frost4.jpg", "frost5.jpg")
FROST_SCALE = 5  # cv2.resize(fx=fy=0.2)


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


@functools.lru_cache(maxsize=4)
def _frost_textures(folder: str) -> tuple[np.ndarray, ...]:
    """frost1..frost5 as RGB floats in [0, 1], shrunk as the reference's cv2.resize(fx=fy=0.2,
    INTER_LINEAR): at an exact 1/5 scale its sample points (i + 0.5) * 5 - 0.5 = 5i + 2 are
    whole pixels, so it is a stride-5 pick without low-pass (PIL's resize would antialias and
    soften the frost). Alpha, where present, is dropped as cv2.imread does."""
    from PIL import Image  # where used: importing the data package stays lean

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
    a, b = level(FROST, severity)
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
    a, decay = level(FOG, severity)
    n, h, w = x.shape[:3]
    mapsize = 1 << max(1, (max(h, w) - 1).bit_length())
    fractal = plasma_fractal(n, mapsize, decay, rng)[:, :h, :w, None]
    peak = x.max(axis=(1, 2, 3), keepdims=True)
    return np.clip((x + a * fractal) * peak / (peak + a), 0.0, 1.0)

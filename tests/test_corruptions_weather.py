"""Tests of pfedgm_app.data.weather against the CIFAR-10-C definitions (docs/corruptions.md):
the plasma fractal, fog, frost on the real textures, and where the textures are found.

Expected constants are written out here again from that page, so a typo in the module fails.
"""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from pfedgm_app.data import severities, weather
from pfedgm_app.data.corruptions import corrupt
from tests.corruption_images import FROST_NAMES, _frost_dir, _mae, _random_images, _textured

# From the notes, severities 1..5.
FROST_AB = ((1, 0.2), (1, 0.3), (0.9, 0.4), (0.85, 0.4), (0.75, 0.45))
FOG_A_DECAY = ((0.2, 3), (0.5, 3), (0.75, 2.5), (1, 2), (1.5, 1.75))


# ---------------------------------------------------------------------------------------------
# Weather


def test_plasma_fractal_is_normalized_and_seeded():
    maps = weather.plasma_fractal(3, 32, 2.0, np.random.default_rng(0))
    assert maps.shape == (3, 32, 32)
    np.testing.assert_allclose(maps.min(axis=(1, 2)), 0.0)
    np.testing.assert_allclose(maps.max(axis=(1, 2)), 1.0)
    assert maps.std(axis=(1, 2)).min() > 0.05  # not degenerate
    assert not np.allclose(maps[0], maps[1])  # one fractal per image
    np.testing.assert_array_equal(
        maps, weather.plasma_fractal(3, 32, 2.0, np.random.default_rng(0))
    )
    # a slower decay keeps more fine detail: larger neighbour differences
    rough = weather.plasma_fractal(64, 32, 1.75, np.random.default_rng(1))
    smooth = weather.plasma_fractal(64, 32, 3.0, np.random.default_rng(1))
    assert np.abs(np.diff(rough, axis=2)).mean() > np.abs(np.diff(smooth, axis=2)).mean()
    with pytest.raises(ValueError, match="power of 2"):
        weather.plasma_fractal(1, 24, 2.0, np.random.default_rng(0))


class _TopOfRange:
    """Stands in for a Generator: every uniform draw returns its upper bound."""

    def uniform(self, low, high, size):
        return np.full(size, float(high))


def _reference_plasma(size: int, decay: float) -> np.ndarray:
    """Textbook diamond-square on a torus, point by point, every draw at the top of its range:
    new point = mean of its 4 neighbours + wibble * wibble (the reference's wibble * U(-w, w))."""
    m = np.zeros((size, size))
    step, wibble = size, 100.0
    while step >= 2:
        half = step // 2
        for i in range(half, size, step):  # square centres: the 4 diagonal corners
            for j in range(half, size, step):
                near = [
                    m[(i + a) % size, (j + b) % size] for a in (-half, half) for b in (-half, half)
                ]
                m[i, j] = sum(near) / 4 + wibble * wibble
        for i in range(0, size, half):  # diamond points: the 4 axis neighbours
            for j in range((i + half) % step, size, step):
                near = [
                    m[(i + a) % size, (j + b) % size]
                    for a, b in ((-half, 0), (half, 0), (0, -half), (0, half))
                ]
                m[i, j] = sum(near) / 4 + wibble * wibble
        step //= 2
        wibble /= decay
    m -= m.min()
    return m / m.max()


@pytest.mark.parametrize(("size", "decay"), [(4, 3.0), (8, 2.0), (16, 1.75)])
def test_plasma_fractal_matches_diamond_square(size, decay):
    got = weather.plasma_fractal(2, size, decay, _TopOfRange())
    np.testing.assert_allclose(got, np.stack([_reference_plasma(size, decay)] * 2), atol=1e-12)


@pytest.mark.parametrize("severity", [1, 2, 3, 4, 5])
def test_fog_closed_form(severity):
    a, decay = FOG_A_DECAY[severity - 1]
    x = _random_images(n=4, high=200) / 255.0
    out = weather.fog(x, severity, np.random.default_rng(3))
    fractal = weather.plasma_fractal(4, 32, decay, np.random.default_rng(3))[..., None]
    peak = x.max(axis=(1, 2, 3), keepdims=True)
    np.testing.assert_allclose(out, np.clip((x + a * fractal) * peak / (peak + a), 0, 1))
    # same fractal on the three channels: a grey image stays grey
    grey = weather.fog(np.full((2, 32, 32, 3), 0.4), severity, np.random.default_rng(0))
    np.testing.assert_array_equal(grey[..., 0], grey[..., 2])


def test_fog_grows_with_severity():
    x = _textured()
    errors = [_mae(corrupt(x, "fog", s, seed=0), x) for s in severities.SEVERITIES]
    assert all(a < b for a, b in zip(errors, errors[1:], strict=False)), errors


def test_frost_crops_the_real_textures():
    frost_dir = _frost_dir()
    b = FROST_AB[4][1]  # on a black image the output is b * crop
    out = corrupt(np.zeros((12, 32, 32, 3), np.uint8), "frost", 5, 0, frost_dir).astype(int)
    # the reference's cv2.resize(fx=fy=0.2) at an exact 1/5 scale reads pixel 5i + 2
    textures = []
    for name in FROST_NAMES:
        rgb = np.asarray(Image.open(frost_dir / name).convert("RGB")).astype(np.float64)
        textures.append(np.round(b * rgb[2::5, 2::5]).astype(int))
    used = set()
    for image in out:
        matches = []
        for k, tex in enumerate(textures):
            corner = np.abs(tex[:-32, :-32] - image[0, 0]).max(axis=-1) <= 1
            for r, c in np.argwhere(corner):
                if np.abs(tex[r : r + 32, c : c + 32] - image).max() <= 1:
                    matches.append(k)
        assert matches, "output is not a crop of frost1..frost5"
        used.update(matches)
    assert len(used) > 1  # the texture is drawn per image


def test_frost_share_grows_with_severity():
    frost_dir = _frost_dir()
    x = _random_images(n=16, high=129)  # dark enough that a * x + b * crop never clips

    def mean_correlation(out: np.ndarray) -> float:
        a, b = x.reshape(len(x), -1).astype(float), out.reshape(len(x), -1).astype(float)
        return float(np.mean([np.corrcoef(u, v)[0, 1] for u, v in zip(a, b, strict=True)]))

    corr = [mean_correlation(corrupt(x, "frost", s, 0, frost_dir)) for s in severities.SEVERITIES]
    assert all(a > b for a, b in zip(corr, corr[1:], strict=False)), corr
    black = np.zeros((8, 32, 32, 3), np.uint8)
    means = [corrupt(black, "frost", s, 0, frost_dir).mean() for s in severities.SEVERITIES]
    assert all(a <= b for a, b in zip(means, means[1:], strict=False)) and means[0] < means[4]


def test_default_frost_dir_search(tmp_path):
    with pytest.raises(ValueError, match=f"shared/data/frost.*{tmp_path}.*frost_dir"):
        weather._find_frost_dir([tmp_path])
    folder = tmp_path / "shared" / "data" / "frost"
    folder.mkdir(parents=True)
    for name in FROST_NAMES:
        (folder / name).touch()
    deep = tmp_path / "project" / "pkg"
    deep.mkdir(parents=True)
    assert weather._find_frost_dir([deep]) == folder  # found as <ancestor>/../shared/data/frost
    assert weather.resolve_frost_dir(folder) == folder

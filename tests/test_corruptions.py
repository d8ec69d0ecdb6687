"""Tests of pfedgm_app.data.corruptions against the CIFAR-10-C definitions
(docs/corruptions.md).

Expected constants are written out here again from that page, so a typo in the module fails.
"""

from __future__ import annotations

import colorsys
import io
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from pfedgm_app.data import blur, severities, weather
from pfedgm_app.data import corruptions as C
from pfedgm_app.data.corruptions import CORRUPTIONS, corrupt, corruption_pairs

FROST_DIR = Path(__file__).resolve().parents[2] / "shared" / "data" / "frost"
FROST_NAMES = ("frost1.png", "frost2.png", "frost3.png", "frost4.jpg", "frost5.jpg")
RANDOM = {"motion_blur", "gaussian_noise", "shot_noise", "impulse_noise", "frost", "fog"}

# From the notes, severities 1..5.
SIGMA = (0.04, 0.06, 0.08, 0.09, 0.10)
SHOT = (500, 250, 100, 75, 50)
AMOUNT = (0.01, 0.02, 0.03, 0.05, 0.07)
FROST_AB = ((1, 0.2), (1, 0.3), (0.9, 0.4), (0.85, 0.4), (0.75, 0.45))
FOG_A_DECAY = ((0.2, 3), (0.5, 3), (0.75, 2.5), (1, 2), (1.5, 1.75))
QUALITY = (80, 65, 58, 50, 40)
BRIGHT = (0.05, 0.1, 0.15, 0.2, 0.3)
CONTRAST = (0.75, 0.5, 0.4, 0.3, 0.15)
MOTION = ((6, 1), (6, 1.5), (6, 2), (8, 2), (9, 2.5))


def _frost_dir() -> Path:
    if not all((FROST_DIR / name).is_file() for name in FROST_NAMES):
        reason = f"frost textures not found in {FROST_DIR} (expected ../shared/data/frost)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason + "; under CI this is a failure")
        pytest.skip(reason)
    return FROST_DIR


def _random_images(n: int = 8, h: int = 32, w: int = 32, seed: int = 0, high: int = 256):
    return np.random.default_rng(seed).integers(0, high, size=(n, h, w, 3), dtype=np.uint8)


def _textured(n: int = 16, seed: int = 0) -> np.ndarray:
    """Smooth stripes plus mild noise: natural-ish content that JPEG and blur act on."""
    rng = np.random.default_rng(seed)
    yy, xx, _ = np.mgrid[:32, :32, :1]
    phase = rng.uniform(0, 2 * np.pi, size=(n, 1, 1, 3))
    base = 128 + 70 * np.sin(xx / 2.5 + yy / 4.0 + phase) * np.cos(yy / 3.0)
    return np.clip(base + rng.normal(0, 8, base.shape), 0, 255).astype(np.uint8)


def _flat(value: int, n: int = 64) -> np.ndarray:
    return np.full((n, 32, 32, 3), value, dtype=np.uint8)


def _total_variation(images: np.ndarray) -> float:
    x = images.astype(np.float64)
    return float(np.abs(np.diff(x, axis=1)).mean() + np.abs(np.diff(x, axis=2)).mean())


def _mae(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.float64) - b.astype(np.float64)).mean())


# ---------------------------------------------------------------------------------------------
# All pairs


def test_corruption_pairs_order():
    pairs = corruption_pairs()
    assert len(pairs) == 50 and len(set(pairs)) == 50
    # the order, on which the 50C / 100C client assignment depends
    expected = "motion_blur defocus_blur gaussian_noise shot_noise impulse_noise frost fog"
    assert CORRUPTIONS == (*expected.split(), "jpeg_compression", "brightness", "contrast")
    assert pairs[:6] == [("motion_blur", s) for s in range(1, 6)] + [("defocus_blur", 1)]
    assert pairs == [(c, s) for c in CORRUPTIONS for s in (1, 2, 3, 4, 5)]


@pytest.mark.parametrize(("name", "severity"), corruption_pairs())
def test_every_pair_is_uint8_deterministic_and_seeded(name, severity):
    frost_dir = _frost_dir() if name == "frost" else None
    x = _random_images()
    out = corrupt(x, name, severity, seed=1, frost_dir=frost_dir)
    assert out.dtype == np.uint8 and out.shape == x.shape
    assert not np.array_equal(out, x)
    np.testing.assert_array_equal(out, corrupt(x, name, severity, seed=1, frost_dir=frost_dir))
    other = corrupt(x, name, severity, seed=2, frost_dir=frost_dir)
    assert np.array_equal(out, other) == (name not in RANDOM)
    assert np.array_equal(x, _random_images())  # the input is left alone


@pytest.mark.parametrize("name", CORRUPTIONS)
def test_other_image_sizes(name):
    frost_dir = _frost_dir() if name == "frost" else None
    x = _random_images(n=2, h=20, w=24)
    assert corrupt(x, name, 3, seed=0, frost_dir=frost_dir).shape == x.shape
    assert corrupt(x[:0], name, 3, seed=0, frost_dir=frost_dir).shape == (0, 20, 24, 3)


# ---------------------------------------------------------------------------------------------
# Noise


@pytest.mark.parametrize("severity", [1, 2, 3, 4, 5])
def test_gaussian_noise_std(severity):
    x = _flat(128)
    noise = (corrupt(x, "gaussian_noise", severity, seed=0).astype(np.float64) - 128) / 255
    assert abs(noise.mean()) < 0.002
    assert noise.std() == pytest.approx(SIGMA[severity - 1], rel=0.03)


@pytest.mark.parametrize("severity", [1, 2, 3, 4, 5])
def test_shot_noise_mean_and_variance(severity):
    x = _flat(128)
    out = corrupt(x, "shot_noise", severity, seed=0).astype(np.float64) / 255
    assert out.mean() == pytest.approx(128 / 255, abs=0.002)
    assert out.var() == pytest.approx((128 / 255) / SHOT[severity - 1], rel=0.05)


@pytest.mark.parametrize("severity", [1, 2, 3, 4, 5])
def test_impulse_noise_fraction_and_balance(severity):
    x = _flat(128)
    out = corrupt(x, "impulse_noise", severity, seed=0)
    amount, size = AMOUNT[severity - 1], out.size
    tol = 5 * np.sqrt(amount * (1 - amount) / size)
    assert set(np.unique(out)) <= {0, 128, 255}
    assert np.mean(out != 128) == pytest.approx(amount, abs=tol)
    assert np.mean(out == 0) == pytest.approx(amount / 2, abs=tol)
    assert np.mean(out == 255) == pytest.approx(amount / 2, abs=tol)


# ---------------------------------------------------------------------------------------------
# Digital


def test_hsv_matches_colorsys_and_round_trips():
    x = _random_images(n=4) / 255.0
    x[0, :4] = 0.5  # greys: hue and saturation undefined
    x[0, 4:8] = 0.0
    hsv = C.rgb_to_hsv(x)
    expected = np.array([colorsys.rgb_to_hsv(*p) for p in x.reshape(-1, 3)]).reshape(x.shape)
    np.testing.assert_allclose(hsv, expected, atol=1e-12)
    np.testing.assert_allclose(C.hsv_to_rgb(hsv), x, atol=1e-12)


@pytest.mark.parametrize("severity", [1, 2, 3, 4, 5])
def test_brightness_closed_forms(severity):
    c = BRIGHT[severity - 1]
    x = np.zeros((4, 32, 32, 3), dtype=np.uint8)
    x[0] = 100  # grey: V = 100/255, stays grey
    x[1] = (200, 0, 0)  # pure red: V = 200/255, S = 1
    x[2] = (120, 60, 30)  # colour with V + c < 1: H and S kept means RGB scales by V'/V
    x[3] = (250, 250, 0)  # V + c > 1: V clips to 1
    out = corrupt(x, "brightness", severity, seed=0).astype(np.int64)
    assert (out[0] == round((100 / 255 + c) * 255)).all()
    assert (out[1] == (round(min(200 / 255 + c, 1) * 255), 0, 0)).all()
    scaled = np.round(np.array([120, 60, 30]) * (120 / 255 + c) / (120 / 255))
    assert np.abs(out[2] - scaled).max() <= 1
    assert (out[3] == (255, 255, 0)).all()


def test_brightness_zero_shift_is_identity():
    x = _random_images(n=4)
    hsv = C.rgb_to_hsv(x / 255.0)
    back = np.round(C.hsv_to_rgb(hsv) * 255)
    assert np.abs(back - x).max() <= 1


@pytest.mark.parametrize("severity", [1, 2, 3, 4, 5])
def test_contrast_closed_form_per_channel(severity):
    c = CONTRAST[severity - 1]
    x = np.zeros((2, 32, 32, 3), dtype=np.uint8)
    x[0, :, :16] = (0, 50, 100)  # two values on channels 0 and 2, channel 1 constant
    x[0, :, 16:] = (200, 50, 255)
    x[1] = 90
    x[1, :8] = 250  # a quarter of the pixels: mean 130
    out = corrupt(x, "contrast", severity, seed=0).astype(np.int64)
    for lo, hi, channel in ((0, 200, 0), (100, 255, 2)):
        mean = (lo + hi) / 2 / 255
        for value, half in ((lo, slice(0, 16)), (hi, slice(16, 32))):
            want = round(np.clip((value / 255 - mean) * c + mean, 0, 1) * 255)
            assert (out[0, :, half, channel] == want).all()
    assert (out[0, ..., 1] == 50).all()  # a per-channel mean keeps a flat channel flat
    mean = 130 / 255
    assert (out[1, :8] == round(((250 / 255 - mean) * c + mean) * 255)).all()
    assert (out[1, 8:] == round(((90 / 255 - mean) * c + mean) * 255)).all()


@pytest.mark.parametrize("severity", [1, 2, 3, 4, 5])
def test_jpeg_equals_pil_round_trip(severity):
    x = _textured(n=4)
    out = corrupt(x, "jpeg_compression", severity, seed=0)
    for image, got in zip(x, out, strict=True):
        buffer = io.BytesIO()
        Image.fromarray(image).save(buffer, format="JPEG", quality=QUALITY[severity - 1])
        np.testing.assert_array_equal(got, np.asarray(Image.open(buffer).convert("RGB")))


def test_jpeg_error_grows_with_severity():
    x = _textured()
    errors = [_mae(corrupt(x, "jpeg_compression", s, seed=0), x) for s in severities.SEVERITIES]
    assert all(a < b for a, b in zip(errors, errors[1:], strict=False)), errors


# ---------------------------------------------------------------------------------------------
# Blur


def test_disk_kernel_definition():
    for radius, alias_blur in ((0.3, 0.4), (0.4, 0.5), (0.5, 0.6), (1, 0.2), (1.5, 0.1)):
        kernel = blur.disk_kernel(radius, alias_blur)
        assert kernel.shape == (17, 17)
        assert kernel.sum() == pytest.approx(1.0, abs=1e-12)
        np.testing.assert_allclose(kernel, kernel.T, atol=1e-15)
    # radius 0.3: a single pixel, so the kernel is the 3x3 Gaussian itself
    e = np.exp(-1 / (2 * 0.4**2))
    g = np.array([e, 1, e]) / (1 + 2 * e)
    kernel = blur.disk_kernel(0.3, 0.4)
    np.testing.assert_allclose(kernel[7:10, 7:10], np.outer(g, g), atol=1e-12)
    assert np.count_nonzero(kernel) == 9
    # radius 1: the 5-pixel plus, blurred; radius 1.5: the 3x3 square, blurred
    assert np.count_nonzero(blur.disk_kernel(1, 0.2)) == 21  # 5x5 minus the corners
    assert np.count_nonzero(blur.disk_kernel(1.5, 0.1)) == 25


@pytest.mark.parametrize("severity", [1, 3, 5])
def test_defocus_blur_equals_filter2d_with_reflect_101_borders(severity):
    radius, alias_blur = ((0.3, 0.4), (0.4, 0.5), (0.5, 0.6), (1, 0.2), (1.5, 0.1))[severity - 1]
    x = _random_images(n=2) / 255.0
    kernel = blur.disk_kernel(radius, alias_blur)
    padded = np.pad(x, ((0, 0), (8, 8), (8, 8), (0, 0)), mode="reflect")  # cv2 BORDER_REFLECT_101
    windows = np.lib.stride_tricks.sliding_window_view(padded, (17, 17), axis=(1, 2))
    want = np.clip(np.einsum("nhwcij,ij->nhwc", windows, kernel), 0, 1)
    np.testing.assert_allclose(blur.defocus_blur(x, severity), want, atol=1e-12)


@pytest.mark.parametrize("severity", [1, 2, 3, 4, 5])
def test_defocus_blur_applies_its_kernel(severity):
    radius, alias_blur = ((0.3, 0.4), (0.4, 0.5), (0.5, 0.6), (1, 0.2), (1.5, 0.1))[severity - 1]
    delta = np.zeros((1, 32, 32, 3))
    delta[0, 16, 16] = 1.0
    out = blur.defocus_blur(delta, severity)
    kernel = blur.disk_kernel(radius, alias_blur)
    np.testing.assert_allclose(out[0, 8:25, 8:25, 0], kernel[::-1, ::-1], atol=1e-12)
    flat = _flat(77, n=2)
    np.testing.assert_array_equal(corrupt(flat, "defocus_blur", severity, seed=0), flat)


def test_motion_blur_taps_follow_imagemagick():
    for radius, sigma in MOTION:
        weights, dy, dx = blur.motion_blur_taps(radius, sigma, 0.0)
        t = np.arange(2 * radius + 1)  # GetOptimalKernelWidth1D: 2 * ceil(radius) + 1 taps
        want = np.exp(-(t**2) / (2 * sigma**2))
        np.testing.assert_allclose(weights, want / want.sum(), atol=1e-15)
        np.testing.assert_array_equal(dx, t)  # angle 0: a one-sided horizontal line
        np.testing.assert_array_equal(dy, 0)
        kernel = blur.motion_blur_kernel(radius, sigma, 30.0)
        assert kernel.sum() == pytest.approx(1.0, abs=1e-12)
    _, dy, dx = blur.motion_blur_taps(6, 1.0, 45.0)
    np.testing.assert_array_equal(dy, dx)
    np.testing.assert_array_equal(dx, np.ceil(np.arange(13) * np.sqrt(0.5) - 0.5))


@pytest.mark.parametrize("severity", [1, 3, 5])
def test_motion_blur_applies_its_kernel(severity):
    radius, sigma = MOTION[severity - 1]
    angles = np.array([-45.0, -10.0, 0.0, 33.0])
    delta = np.zeros((4, 64, 64, 3))
    delta[:, 32, 32] = 1.0
    out = blur.motion_blur(delta, severity, np.random.default_rng(0), angles=angles)
    for image, angle in zip(out, angles, strict=True):
        kernel = blur.motion_blur_kernel(radius, sigma, angle)
        c = kernel.shape[0] // 2
        window = image[32 - c : 33 + c, 32 - c : 33 + c, 1]
        np.testing.assert_allclose(window, kernel[::-1, ::-1], atol=1e-12)
        assert window.sum() == pytest.approx(1.0)
    # without `angles`, one angle per image drawn uniform in [-45, 45]
    x = _random_images(n=4) / 255.0
    drawn = np.random.default_rng(5).uniform(-45, 45, size=4)
    np.testing.assert_array_equal(
        blur.motion_blur(x, severity, np.random.default_rng(5)),
        blur.motion_blur(x, severity, np.random.default_rng(9), angles=drawn),
    )
    flat = _flat(77, n=2)
    np.testing.assert_array_equal(corrupt(flat, "motion_blur", severity, seed=0), flat)
    # off-image reads repeat the edge pixel: at angle 0 every tap of the last column reads it
    at_zero = blur.motion_blur(x, severity, None, angles=np.zeros(4))
    np.testing.assert_allclose(at_zero[:, :, -1], x[:, :, -1], atol=1e-12)
    down = blur.motion_blur(x, severity, None, angles=np.full(4, 45.0))  # taps go right and down
    np.testing.assert_allclose(down[:, -1, -1], x[:, -1, -1], atol=1e-12)
    up = blur.motion_blur(x, severity, None, angles=np.full(4, -45.0))  # right and up
    np.testing.assert_allclose(up[:, 0, -1], x[:, 0, -1], atol=1e-12)


@pytest.mark.parametrize("name", ["defocus_blur", "motion_blur"])
def test_blur_reduces_total_variation_with_severity(name):
    x = _textured()
    tv = [_total_variation(corrupt(x, name, s, seed=0)) for s in severities.SEVERITIES]
    assert _total_variation(x) > tv[0]
    assert all(b <= a * (1 + 1e-3) for a, b in zip(tv, tv[1:], strict=False)), tv
    assert tv[4] < tv[0] * 0.9, tv


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


# ---------------------------------------------------------------------------------------------
# Errors


def test_bad_inputs_raise_clear_errors(tmp_path):
    x = _random_images(n=2)
    with pytest.raises(ValueError, match="unknown corruption 'snow'.*motion_blur.*contrast"):
        corrupt(x, "snow", 1, 0)
    for severity in (0, 6, 2.0, True):
        with pytest.raises(ValueError, match=r"1\.\.5"):
            corrupt(x, "contrast", severity, 0)
    with pytest.raises(ValueError, match="uint8"):
        corrupt(x.astype(np.float32), "contrast", 1, 0)
    for shape in ((2, 32, 32, 4), (2, 32, 32), (32, 32, 3, 1)):
        with pytest.raises(ValueError, match=r"\(N, H, W, 3\)"):
            corrupt(np.zeros(shape, np.uint8), "contrast", 1, 0)
    missing = tmp_path / "nowhere"
    with pytest.raises(ValueError, match=f"{missing}.*frost_dir"):
        corrupt(x, "frost", 1, 0, frost_dir=missing)
    with pytest.raises(ValueError, match="frost_dir"):
        corrupt(x[:0], "frost", 1, 0, frost_dir=missing)
    with pytest.raises(ValueError, match="1..5"):
        C.gaussian_noise(x / 255.0, 7, np.random.default_rng(0))


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

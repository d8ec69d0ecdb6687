"""Tests of pfedgm_app.data.corruptions against the CIFAR-10-C definitions
(docs/corruptions.md): every pair, the noises, the digital corruptions and bad input.

Expected constants are written out here again from that page, so a typo in the module fails.
"""

from __future__ import annotations

import colorsys
import io

import numpy as np
import pytest
from PIL import Image

from pfedgm_app.data import corruptions as C
from pfedgm_app.data import severities
from pfedgm_app.data.corruptions import CORRUPTIONS, corrupt, corruption_pairs
from tests.corruption_images import _flat, _frost_dir, _mae, _random_images, _textured

RANDOM = {"motion_blur", "gaussian_noise", "shot_noise", "impulse_noise", "frost", "fog"}

# From the notes, severities 1..5.
SIGMA = (0.04, 0.06, 0.08, 0.09, 0.10)
SHOT = (500, 250, 100, 75, 50)
AMOUNT = (0.01, 0.02, 0.03, 0.05, 0.07)
QUALITY = (80, 65, 58, 50, 40)
BRIGHT = (0.05, 0.1, 0.15, 0.2, 0.3)
CONTRAST = (0.75, 0.5, 0.4, 0.3, 0.15)


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

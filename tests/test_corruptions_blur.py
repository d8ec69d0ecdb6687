"""Tests of pfedgm_app.data.blur against the CIFAR-10-C definitions (docs/corruptions.md): the
defocus disk and the motion blur's taps, each applied as its kernel.

Expected constants are written out here again from that page, so a typo in the module fails.
"""

from __future__ import annotations

import numpy as np
import pytest

from pfedgm_app.data import blur, severities
from pfedgm_app.data.corruptions import corrupt
from tests.corruption_images import _flat, _random_images, _textured

# From the notes, severities 1..5.
MOTION = ((6, 1), (6, 1.5), (6, 2), (8, 2), (9, 2.5))


def _total_variation(images: np.ndarray) -> float:
    x = images.astype(np.float64)
    return float(np.abs(np.diff(x, axis=1)).mean() + np.abs(np.diff(x, axis=2)).mean())


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

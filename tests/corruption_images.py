"""Test images and the frost textures of ../shared/data, for the corruption tests."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

FROST_DIR = Path(__file__).resolve().parents[2] / "shared" / "data" / "frost"
FROST_NAMES = ("frost1.png", "frost2.png", "frost3.png", "frost4.jpg", "frost5.jpg")


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


def _mae(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.float64) - b.astype(np.float64)).mean())

"""The CIFAR-10-C constants (`make_cifar_c.py` in hendrycks/robustness, docs/corruptions.md),
one entry per severity 1..5, and the lookup every corruption makes through `level`."""

from __future__ import annotations

import numpy as np

SEVERITIES = (1, 2, 3, 4, 5)

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


def check_severity(severity: int) -> None:
    ok = isinstance(severity, int | np.integer) and not isinstance(severity, bool)
    if not ok or severity not in SEVERITIES:
        raise ValueError(f"severity must be an integer in 1..5, got {severity!r}")


def level(table: tuple, severity: int):
    check_severity(severity)
    return table[severity - 1]

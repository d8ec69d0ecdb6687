"""Five CIFAR-10 test images as PNG files, to try `predict` on (README, "Each client's model").

    python examples/make_images.py [OUT]      # default: examples/images

They are taken from the local copy of CIFAR-10 beside the checkout
(`<ancestor>/shared/data/cifar10/test.parquet`), read in place: the repository holds no data.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

NAMES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
CHOSEN = ("airplane", "cat", "frog", "ship", "truck")


def write_images(source: Path, out: Path) -> list[Path]:
    """The first test image of each class in `CHOSEN`, as `<class>-<row>.png` in `out`."""
    import pyarrow.parquet as pq
    from PIL import Image

    out.mkdir(parents=True, exist_ok=True)
    table = pq.read_table(source / "test.parquet").to_pylist()
    written, seen = [], set()
    for row, record in enumerate(table):
        name = NAMES[record["label"]]
        if name in CHOSEN and name not in seen:
            seen.add(name)
            path = out / f"{name}-{row}.png"
            Image.open(io.BytesIO(record["img"]["bytes"])).convert("RGB").save(path)
            written.append(path)
    return written


if __name__ == "__main__":
    import argparse

    from pfedgm_app.runconfig.shared_data import find_shared

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = Path(__file__).parent / "images"
    parser.add_argument(
        "out", nargs="?", type=Path, default=default, help="default: " + str(default)
    )
    out = parser.parse_args().out
    source = find_shared("cifar10", (Path.cwd(), Path(__file__).parent))
    if source is None:
        sys.exit("make_images: no <ancestor>/shared/data/cifar10 above here or this checkout")
    for path in write_images(source, out):
        print(path)

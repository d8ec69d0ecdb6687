"""Classify images with a device's personalized model, without Flower.

    python -m pfedgm_app.predict MODEL IMAGE_OR_FOLDER... [--json] [--batch-size N]

MODEL is a file a run's client saved (`client-<id>.safetensors`, `personal_model`). Each image,
or each image file below a folder (png, jpg, ...; sorted), is read as the app reads its data:
converted to the model's mode (grayscale or RGB), not resized, scaled to [-1, 1]
(`data.to_tensor`). Prints one line per image, `<path>\t<class>\t<probability>`, or with
`--json` one JSON object per line (`image`, `class`, `probability`), in batches. Refused in
one line, before any prediction, exit code 2: a file that is not such a model or was changed
since it was saved, an image of another size than the model's, a file that is not an image.
Every image is an input not trusted: its size is read from its header before it is decoded, so
that a decompression bomb is never decoded, and each is decoded once before the first
prediction, so that a damaged one (truncated, say) is refused before any line is printed.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from .data import to_tensor
from .personal_model import SUFFIX, ModelFileError, PersonalModel, load
from .run_folder import RunFolder

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff"}


class ImageError(ValueError):
    """An image the model cannot take; the message names the file."""


def image_files(paths: list[Path]) -> list[Path]:
    """The files given and the image files below the folders given, in order."""
    found = []
    for path in paths:
        if path.is_dir():
            below = sorted(p for p in path.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
            found += [p for p in below if p.is_file()]
        elif path.is_file():
            found.append(path)
        else:
            raise ImageError(f"{path}: no such file or folder")
    return found


def check_images(paths: list[Path], image_shape: tuple[int, int, int]) -> None:
    """Every image has the model's size (read from its header first, so that no image of
    another size, a decompression bomb included, is decoded) and decodes whole."""
    from PIL import Image

    height, width = image_shape[1:]
    mode = "L" if image_shape[0] == 1 else "RGB"
    for path in paths:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", Image.DecompressionBombWarning)
                with Image.open(path) as im:
                    size = im.size
                    if size == (width, height):
                        im.convert(mode)
        except Exception as exc:  # noqa: BLE001 - the bytes are the input: any PIL error is theirs
            why = f"{type(exc).__name__}: {exc}".splitlines()[0]
            raise ImageError(
                f"{path}: not an image, or a damaged one ({why}); remove it or give an intact copy"
            ) from None
        if size != (width, height):
            raise ImageError(
                f"{path} is {size[0]}x{size[1]} pixels; this model takes "
                f"{describe(image_shape)} images and resizes none: use a model trained on "
                "images of this size"
            )


def describe(image_shape: tuple[int, int, int]) -> str:
    kind = "grayscale" if image_shape[0] == 1 else "RGB"
    return f"{kind} {image_shape[1]}x{image_shape[2]}"


def batches(paths: list[Path], image_shape: tuple[int, int, int], size: int) -> Iterator:
    """(paths, normalized images) in batches of `size`, decoded as the app decodes its data."""
    from PIL import Image

    mode = "L" if image_shape[0] == 1 else "RGB"
    for start in range(0, len(paths), size):
        chunk = paths[start : start + size]
        pixels = []
        for path in chunk:
            with Image.open(path) as im:
                pixels.append(np.asarray(im.convert(mode)))
        yield chunk, to_tensor(np.stack(pixels), image_shape)


@torch.no_grad()
def predict(
    model: PersonalModel, paths: list[Path], batch_size: int = 256
) -> Iterator[tuple[Path, str, float]]:
    """(image, class name, its probability) per image, the class the model's logits favour."""
    for chunk, x in batches(paths, model.image_shape, batch_size):
        probabilities = torch.softmax(model.model(x), dim=1)
        best, index = probabilities.max(dim=1)
        for path, p, k in zip(chunk, best.tolist(), index.tolist(), strict=True):
            yield path, model.classes[k], p


def model_file(path: Path) -> Path:
    """The personalized model `path` names: the file itself, or a run's `output-dir` (its
    `models/` folder) holding exactly one; a run's global model or a folder of several is
    refused in one line naming the files to choose from."""
    models = RunFolder(path).models
    folder = models if models.is_dir() else path
    if folder.is_dir():
        found = sorted(folder.glob(f"client-*{SUFFIX}"))
        if len(found) == 1:
            return found[0]
        if not found:
            raise ModelFileError(f"{path}: no client-<id>{SUFFIX} in it; give a client's model")
        shown = ", ".join(p.name for p in found[:5]) + (", ..." if len(found) > 5 else "")
        raise ModelFileError(
            f"{folder}: {len(found)} clients' models ({shown}); each device predicts with its "
            "own: give one of them"
        )
    run = RunFolder(path.parent)
    if path.suffix == ".pt" or path.name == run.global_model.name:
        raise ModelFileError(
            f"{path}: the run's global model (Phase 1), not a device's personalized one; give "
            f"{run.models}/client-<id>{SUFFIX} (a client's model) instead"
        )
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "model",
        type=Path,
        help="a client's saved model (.safetensors), or a run's output-dir holding one",
    )
    parser.add_argument("images", type=Path, nargs="+", help="image files or folders of them")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args(argv)
    try:
        model = load(model_file(args.model))
        paths = image_files(args.images)
        check_images(paths, model.image_shape)
    except (ModelFileError, ImageError) as exc:
        print(f"predict: {exc}", file=sys.stderr)
        return 2
    for path, name, p in predict(model, paths, max(1, args.batch_size)):
        if args.json:
            print(json.dumps({"image": str(path), "class": name, "probability": p}))
        else:
            print(f"{path}\t{name}\t{p:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

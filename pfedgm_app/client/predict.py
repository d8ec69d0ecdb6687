"""Classify images with a device's personalized model, without Flower.

    python -m pfedgm_app.client.predict MODEL IMAGE_OR_FOLDER... [--json] [--batch-size N]

MODEL is a file a run's client saved (`client-<id>.safetensors`, `personal_model`). Each image,
or each image file below a folder (png, jpg, ...; sorted), is read as the app reads its data:
converted to the model's mode (grayscale or RGB; a 16-bit image scaled to 8 bits first, see
`pixels`), not resized, scaled to [-1, 1] (`data.to_tensor`). Prints one line per image,
`<path>\t<class>\t<probability>`, the path and class name with their control characters escaped
(`escaped`: no name can rewrite the terminal), or with `--json` one JSON object per line
(`image`, `class`, `probability`), in batches. Refused in one line, before any prediction, exit
code 2: a file that is not such a model, was changed since it was saved or holds NaN or Inf
weights, an image of another size than the model's or of a mode it cannot read, a file that is
not an image. Every image is an input not trusted: its size is read from its header before it is
decoded, so that a decompression bomb is never decoded, and each is decoded once before the
first prediction, so that a damaged one (truncated, say) is refused before any line is printed.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pfedgm_app.data import to_tensor
from pfedgm_app.records.run_folder import RunFolder

from .personal_model import SUFFIX, ModelFileError, PersonalModel, load

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff"}
# How an image's PIL mode becomes the model's 8-bit pixels (`bits`, `pixels`). 8 bits a channel:
# PIL's conversion ("1" to 0 or 255, RGB to grey by luma, CMYK and YCbCr to RGB, alpha dropped);
# a palette through its colours, by way of RGBA, which is how PIL takes its transparency.
EIGHT_BIT = frozenset({"1", "L", "P", "PA", "LA", "RGB", "RGBA", "RGBX", "CMYK", "YCbCr"})
# 16-bit grey (PNG, TIFF; older Pillow opens a 16-bit grey PNG as "I", 32-bit integers): scaled
# to 8 bits, value / 257 rounded (65535 -> 255), then read as 8-bit grey; PIL's own conversion
# would clip at 255. Every other mode is refused: "I" not from a PNG and "F" (integers or floats
# of no fixed range), "LAB", "HSV", signed 16-bit, ...
SIXTEEN_BIT = frozenset({"I;16", "I;16L", "I;16B", "I;16N"})


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
    """Every image has the model's size and a mode `bits` reads (both read from its header
    first, so that no image of another size, a decompression bomb included, is decoded) and
    decodes whole."""
    from PIL import Image

    height, width = image_shape[1:]
    mode = "L" if image_shape[0] == 1 else "RGB"
    for path in paths:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", Image.DecompressionBombWarning)
                with Image.open(path) as im:
                    size, kind, depth = im.size, im.mode, bits(im)
                    if size == (width, height) and depth:
                        pixels(im, mode)
        except Exception as exc:  # the bytes are the input: any PIL error is theirs
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
        if not depth:
            raise ImageError(
                f"{path} is an image of mode {kind!r}, which this model does not read; convert "
                "it to 8- or 16-bit grey, or to RGB"
            )


def bits(im: Any) -> int | None:
    """8 or 16: the bits a channel of the PIL image `im` holds, by the rule at `EIGHT_BIT` and
    `SIXTEEN_BIT` (its header says); None for a mode the model does not read."""
    if im.mode in EIGHT_BIT:
        return 8
    return 16 if im.mode in SIXTEEN_BIT or (im.mode, im.format) == ("I", "PNG") else None


def pixels(im: Any, mode: str) -> np.ndarray:
    """The PIL image `im` (`bits` not None) as 8-bit pixels of `mode` ("L" or "RGB")."""
    if bits(im) == 16:
        from PIL import Image

        values = np.asarray(im, dtype=np.int64)  # I;16B is big-endian: numpy reads it as such
        im = Image.fromarray(((values + 128) // 257).astype(np.uint8))  # round(value / 257)
    elif im.mode in ("P", "PA"):
        im = im.convert("RGBA")
    return np.asarray(im.convert(mode))


def describe(image_shape: tuple[int, int, int]) -> str:
    kind = "grayscale" if image_shape[0] == 1 else "RGB"
    return f"{kind} {image_shape[1]}x{image_shape[2]}"


def batches(paths: list[Path], image_shape: tuple[int, int, int], size: int) -> Iterator:
    """(paths, normalized images) in batches of `size`, decoded as the app decodes its data."""
    from PIL import Image

    mode = "L" if image_shape[0] == 1 else "RGB"
    for start in range(0, len(paths), size):
        chunk = paths[start : start + size]
        images = []
        for path in chunk:
            with Image.open(path) as im:
                images.append(pixels(im, mode))
        yield chunk, to_tensor(np.stack(images), image_shape)


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


def escaped(text: str) -> str:
    """`text` with every character that is not printable (C0 and C1 controls, DEL, format
    characters such as bidi overrides, line separators, the lone surrogates of a name that is
    not UTF-8) and the backslash escaped as in a Python string (`\\x1b`, `\\n`, `\\u202e`,
    `\\\\`): a file or class name, which a hostile file may set, cannot move the cursor, colour
    the terminal or forge a line or column. Printable names (é, 猫) are kept as they are."""
    return "".join(
        c if c.isprintable() and c != "\\" else c.encode("unicode_escape").decode("ascii")
        for c in text
    )


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
    parser = argparse.ArgumentParser(prog="pfedgm predict", description=__doc__.splitlines()[0])
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
        print(f"predict: {escaped(str(exc))}", file=sys.stderr)  # it names the files
        return 2
    for path, name, p in predict(model, paths, max(1, args.batch_size)):
        if args.json:  # json.dumps escapes every control and non-ASCII character
            print(json.dumps({"image": str(path), "class": name, "probability": p}))
        else:
            print(f"{escaped(str(path))}\t{escaped(name)}\t{p:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

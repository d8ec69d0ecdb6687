"""`predict` on files built to break it: model files whose metadata was edited and their SHA-256
recomputed as `personal_model` computes it, images whose header claims a decompression bomb,
images cut short. Each is refused before any prediction in one line naming the file, exit 2."""

from __future__ import annotations

import json
import struct
import warnings
import zlib

import pytest
import torch
from PIL import Image
from safetensors import safe_open
from safetensors.torch import save_file

from pfedgm_app import personal_model, predict
from tests.test_personal_model import _images, _save


def _forged(tmp_path, edit_meta=None, edit_tensors=None, method="fedavg", text=None):
    """A saved model, its metadata (and tensors) edited, its SHA-256 recomputed to match."""
    path, _ = _save(tmp_path / "saved.safetensors", method)
    with safe_open(path, framework="pt") as f:
        header, tensors = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}
    meta = json.loads(header["model"])
    if edit_meta:
        edit_meta(meta)
    if edit_tensors:
        edit_tensors(tensors)
    text = json.dumps(meta, sort_keys=True) if text is None else text
    header = {**header, "model": text, "sha256": personal_model.digest(tensors, text)}
    save_file(tensors, tmp_path / "forged.safetensors", header)
    return tmp_path / "forged.safetensors"


def _refused(capsys, argv, named):
    """`main(argv)` exits 2 before any prediction, with one line naming `named` (no warning
    either: it would be a second line)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code = predict.main([str(a) for a in argv])
    out = capsys.readouterr()
    assert code == 2 and out.out == "" and not caught, (code, out, caught)
    assert len(out.err.splitlines()) == 1 and str(named) in out.err, out.err
    return out.err


def _set(key, value):
    return lambda meta: meta.__setitem__(key, value)


def _drop(key):
    return lambda meta: meta.pop(key)


META_EDITS = {
    "no head": _drop("head"),
    "no classes": _drop("classes"),
    "no image-shape": _drop("image-shape"),
    "no head-args": _drop("head-args"),
    "no backbone": _drop("backbone"),
    "one class name": _set("classes", ["zero"]),
    "a class name more than logits": _set("classes", ["zero", "one", "two", "three", "four"]),
    "no class names": _set("classes", []),
    "classes not names": _set("classes", [0, 1, 2, 3]),
    "classes a string": _set("classes", "zero one two three"),
    "huge image shape": _set("image-shape", [3, 100_000, 100_000]),
    "negative image shape": _set("image-shape", [1, -28, 28]),
    "zero image shape": _set("image-shape", [0, 28, 28]),
    "short image shape": _set("image-shape", [28, 28]),
    "image shape of strings": _set("image-shape", ["1", "28", "28"]),
    "image shape of floats": _set("image-shape", [1.0, 28.0, 28.0]),
    "image shape a string": _set("image-shape", "1x28x28"),
    "unknown head": _set("head", "mystery"),
    "head not a string": _set("head", ["linear"]),
    "head-args a list": _set("head-args", []),
    "backbone another": _set("backbone", "CifarCNN"),
    "backbone null": _set("backbone", None),
    "head of another kind": _set("head", "lda"),
}


@pytest.mark.parametrize("edit", META_EDITS.values(), ids=META_EDITS.keys())
def test_a_model_whose_metadata_does_not_fit_its_tensors_is_refused(tmp_path, capsys, edit):
    model = _forged(tmp_path, edit)
    _refused(capsys, [model, *_images(tmp_path / "in", 2)], model)


@pytest.mark.parametrize(
    ("method", "edit_meta", "edit_tensors"),
    [
        ("pfedgm", _set("head-args", {}), None),  # no lambda
        ("pfedgm", _set("head-args", {"lambda": "x"}), None),
        ("pfedgm", _set("head-args", {"lambda": [1.0]}), None),
        ("fedavg", None, lambda t: t.update({"head.weight": t["head.weight"].double()})),
        ("fedavg", None, lambda t: t.update({"head.weight": torch.zeros(4, 100)})),
        ("fedavg", None, lambda t: t.pop("head.bias")),
        ("pfedfda", None, lambda t: t.update({"head.mu": torch.zeros(4, 128, 2)})),
    ],
    ids=["no lambda", "lambda a string", "lambda a list", "float64", "narrow weight",
         "no bias", "mu of 3 dims"],
)  # fmt: skip
def test_a_model_whose_head_does_not_fit_its_metadata_is_refused(
    tmp_path, capsys, method, edit_meta, edit_tensors
):
    model = _forged(tmp_path, edit_meta, edit_tensors, method)
    _refused(capsys, [model, *_images(tmp_path / "in", 2)], model)


@pytest.mark.parametrize(
    "text",
    ["{", "[]", '"model"', "null", "[" * 100_000],
    ids=["cut", "array", "string", "null", "deep"],
)
def test_a_model_whose_metadata_is_no_json_object_is_refused(tmp_path, capsys, text):
    model = _forged(tmp_path, text=text)
    _refused(capsys, [model, *_images(tmp_path / "in", 2)], model)


def _png_claiming(path, width, height):
    """A 28x28 PNG whose IHDR chunk claims `width` x `height` (its CRC recomputed)."""
    _images(path.parent, 1)[0].rename(path)
    data = bytearray(path.read_bytes())
    assert data[12:16] == b"IHDR"
    data[16:24] = struct.pack(">II", width, height)
    data[29:33] = struct.pack(">I", zlib.crc32(bytes(data[12:29])))
    path.write_bytes(bytes(data))
    return path


def _truncated(path):
    whole = _images(path.parent, 1)[0].read_bytes()
    path.write_bytes(whole[: len(whole) // 2])
    return path


def _bomb(path, warns_only=False):
    """A PNG whose header claims 20000x20000 pixels (10000x10000: PIL only warns)."""
    side = 10_000 if warns_only else 20_000
    path = _png_claiming(path, side, side)
    with (
        pytest.warns(Image.DecompressionBombWarning)
        if warns_only
        else pytest.raises(Image.DecompressionBombError)
    ):
        Image.open(path).close()
    return path


@pytest.mark.parametrize(
    "make",
    [_bomb, lambda p: _bomb(p, warns_only=True), _truncated],
    ids=["bomb", "bomb-warning", "truncated"],
)
def test_a_bomb_or_a_damaged_image_is_refused_before_any_prediction(tmp_path, capsys, make):
    model, _ = _save(tmp_path / "m.safetensors")
    image = make(tmp_path / "bad" / "bad.png")
    _refused(capsys, [model, *_images(tmp_path / "ok", 2), image], image)

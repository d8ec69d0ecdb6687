"""`predict` on files built to break it: model files whose metadata was edited and their SHA-256
recomputed as `personal_model` computes it, images whose header claims a decompression bomb,
images cut short. Each is refused before any prediction in one line naming the file, exit 2."""

from __future__ import annotations

import json
import struct
import warnings
import zlib

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors import safe_open
from safetensors.torch import save_file

from pfedgm_app.client import personal_model, predict
from pfedgm_app.data import to_tensor
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


@pytest.mark.parametrize("value", [float("nan"), float("inf")], ids=["nan", "inf"])
def test_a_model_whose_weights_are_not_finite_is_refused_before_predicting(tmp_path, capsys, value):
    """Its SHA-256 matches (a client that diverged saved it so): no `nan` probabilities."""
    model = _forged(tmp_path, edit_tensors=lambda t: t["head.weight"].__setitem__((0, 0), value))
    err = _refused(capsys, [model, *_images(tmp_path / "in", 2)], model)
    assert "head.weight" in err and "NaN or Inf" in err, err


def _gradient(width, height, top):
    """A horizontal-and-vertical gradient from 0 to `top`, rounded to integers."""
    ramp = np.linspace(0, 1, width * height).reshape(height, width)
    return np.round(ramp * top)


@pytest.mark.parametrize(
    ("suffix", "dtype"), [(".png", np.uint16), (".tif", ">u2")], ids=["I;16", "I;16B"]
)
@pytest.mark.parametrize("shape", [(1, 28, 28), (3, 32, 32)], ids=["grey", "rgb"])
def test_a_16_bit_image_reads_as_the_8_bit_image_of_the_same_gradient(
    tmp_path, suffix, dtype, shape
):
    """Within one grey level of its 8-bit twin (PIL alone would clip it at 255: near white)."""
    width, height = shape[2], shape[1]
    deep = tmp_path / f"deep{suffix}"
    Image.fromarray(_gradient(width, height, 65535).astype(dtype)).save(deep)
    Image.fromarray(_gradient(width, height, 255).astype(np.uint8)).save(tmp_path / "flat.png")
    with Image.open(deep) as im:
        assert im.mode == ("I;16" if suffix == ".png" else "I;16B")
    predict.check_images([deep], shape)
    ((_, x),) = predict.batches([deep, tmp_path / "flat.png"], shape, 2)
    assert (x[0] - x[1]).abs().max() <= 2 / 255 + 1e-6  # [-1, 1]: a grey level is 2/255


def _rgba():
    rgb = np.random.default_rng(1).integers(0, 255, (28, 28, 3), dtype=np.uint8)
    alpha = np.random.default_rng(2).integers(0, 255, (28, 28, 1), dtype=np.uint8)
    return rgb, np.concatenate([rgb, alpha], axis=2)


MODES = {  # mode: (the image as that mode, the 8-bit grey it must read as)
    "1": lambda rgb, rgba: (Image.fromarray(rgb).convert("1"),
                            Image.fromarray(rgb).convert("1").convert("L")),
    "P": lambda rgb, rgba: (Image.fromarray(rgb).convert("P"),
                            Image.fromarray(rgb).convert("P").convert("RGB").convert("L")),
    "LA": lambda rgb, rgba: (Image.fromarray(rgba[..., [0, 3]]), Image.fromarray(rgb[..., 0])),
    "RGBA": lambda rgb, rgba: (Image.fromarray(rgba), Image.fromarray(rgb).convert("L")),
}  # fmt: skip


@pytest.mark.parametrize("mode", MODES)
def test_8_bit_modes_convert_as_their_colours_say_alpha_dropped(tmp_path, mode):
    image, grey = MODES[mode](*_rgba())
    assert image.mode == mode
    image.save(tmp_path / "x.png")
    ((_, x),) = predict.batches([tmp_path / "x.png"], (1, 28, 28), 1)
    assert torch.equal(x, to_tensor(np.array(grey)[None], (1, 28, 28)))


def test_a_palette_with_transparency_bytes_reads_without_a_warning(tmp_path, capsys):
    model, _ = _save(tmp_path / "m.safetensors")
    image = Image.fromarray(_rgba()[0]).convert("P")
    image.info["transparency"] = bytes(range(200))
    image.save(tmp_path / "p.png")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert predict.main([str(model), str(tmp_path / "p.png")]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1


@pytest.mark.parametrize("mode", ["F", "I"])
def test_a_mode_of_no_fixed_range_is_refused_naming_it(tmp_path, capsys, mode):
    """Float and 32-bit integer TIFFs: no rule says which value is white."""
    model, _ = _save(tmp_path / "m.safetensors")
    image = tmp_path / "in" / f"{mode}.tif"
    image.parent.mkdir()
    Image.fromarray(_gradient(28, 28, 255).astype(np.float32)).convert(mode).save(image)
    err = _refused(capsys, [model, *_images(tmp_path / "ok", 2), image], image)
    assert f"mode {mode!r}" in err, err


HOSTILE = ["\x1b[2J\x1b[31mzero", "one\nfake.png\tzero\t1.0000", "two\rthree", "t\u202ehree\x9b"]
CONTROLS = {chr(c) for c in [*range(0x20), *range(0x7F, 0xA0)]} | {"\u202e"}


def test_names_print_with_their_control_characters_escaped(tmp_path, capsys):
    """Class names from the model file's metadata and file names: no raw control character
    reaches the terminal but the line's tabs and newline, one line per image; é and 猫 kept."""
    model = _forged(tmp_path, _set("classes", HOSTILE))
    folder = tmp_path / "images"
    names = ["a\x1b[31m.png", "b\nforged\tzero\t1.0000.png", "c\r.png", "é猫.png"]
    for name, image in zip(names, _images(folder, 4), strict=True):
        image.rename(folder / name)
    assert predict.main([str(model), str(folder)]) == 0
    out = capsys.readouterr().out
    lines = [line.split("\t") for line in out.splitlines()]
    assert len(lines) == 4 and all(len(line) == 3 for line in lines), out
    assert not (CONTROLS - {"\t", "\n"}) & set(out), repr(out)
    assert lines[-1][0] == str(folder / "é猫.png") and "\\x1b[31m" in lines[0][0]
    assert {line[1] for line in lines} <= {predict.escaped(c) for c in HOSTILE}
    assert predict.main([str(model), str(folder), "--json"]) == 0  # JSON escapes, and round-trips
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {r["image"] for r in records} == {str(folder / n) for n in names}
    assert {r["class"] for r in records} <= set(HOSTILE)
    (folder / "d\n\x1b[2K.png").write_text("not an image")  # refused: still one line
    _refused(capsys, [model, folder], "d\\n\\x1b[2K.png")

"""A device's personalized model: every method's saved with what using it needs and loaded
without pickle to the same logits; a changed file or one that is no model refused in one line;
`predict` on images; the folder a device keeps it in."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from flwr.app import Context, Message, RecordDict
from PIL import Image
from safetensors import safe_open
from safetensors.torch import save_file

from devtools.reference.privacy import REPLY_RUN
from pfedgm_app import client_app
from pfedgm_app.client import node, personal_model, predict
from pfedgm_app.client.personal_model import ModelFileError
from pfedgm_app.data import ClientData, Protocol, load_client_data, to_tensor
from pfedgm_app.learning.training import accuracy
from pfedgm_app.methods import METHODS, get_method, parse_run_config, run_config_keys
from pfedgm_app.methods.base import ClientState, ClientTask
from pfedgm_app.records.run_folder import RunFolder
from pfedgm_app.runconfig.common import RunConfig
from pfedgm_app.server.federation import unavailable

SHAPE, CLASSES = (1, 28, 28), ["zero", "one", "two", "three"]
FAST = {"local-epochs": 1, "personal-epochs": 1, "finetune-epochs": 1, "fedrep-refit-epochs": 1,
        "pfedme-inner-steps": 1, "lbfgs-cycles": 1}  # fmt: skip
HEAD_KINDS = {"pfedgm": "personalized-gaussian", "pfedfda": "lda"}  # the others: linear
ROOT = Path(__file__).resolve().parents[1]


def _task(n: int = 60) -> ClientTask:
    g = torch.Generator().manual_seed(0)
    y = torch.arange(n) % len(CLASSES)
    x = torch.randn(n, *SHAPE, generator=g) + y[:, None, None, None].float()  # learnable
    data = ClientData(x, y, x[:20], y[:20], len(CLASSES))
    return ClientTask(RunConfig(local_epochs=1), data, ClientState(), g, torch.device("cpu"))


def _personalized(name: str, **keys):
    method = get_method(name)
    plugin = method.plugin(method.settings.from_run_config({**FAST, **keys}))
    torch.manual_seed(0)
    return plugin.personalize(plugin.build_model(SHAPE, len(CLASSES)), _task())


def _save(path, name="fedavg"):
    result = _personalized(name)
    run = {"method": name, "accuracy": result.metrics["accuracy"], "run-id": 7}
    return personal_model.save(path, result.model, SHAPE, CLASSES, run), result


@pytest.mark.parametrize("name", METHODS)
def test_every_methods_model_reloads_to_the_same_logits_and_accuracy(tmp_path, name):
    """What each plug-in evaluated (Ditto's personal model, FedRep's refit head, pFedGM's
    personalized Gaussian head on phi, pFedFDA's LDA head, ...) comes back from its file as
    the same function: bitwise the same logits, the accuracy it reported."""
    path, result = _save(tmp_path / "client-0.safetensors", name)
    loaded = personal_model.load(path)
    x, y = _task().data.x_test, _task().data.y_test
    with torch.no_grad():
        assert torch.equal(loaded.model(x), result.model.eval()(x))
    assert accuracy(loaded.model, x, y) == result.metrics["accuracy"]
    meta = loaded.meta
    assert meta["head"] == HEAD_KINDS.get(name, "linear")
    assert (meta["method"], meta["run-id"], meta["classes"]) == (name, 7, CLASSES)
    assert loaded.image_shape == SHAPE and meta["backbone"] == "EmnistCNN"
    with safe_open(path, framework="pt") as f:  # plain safetensors: no pickle anywhere
        assert f.metadata()["format"] == personal_model.FORMAT


def test_a_personalized_gaussian_head_keeps_its_objective_scale(tmp_path):
    """Under `objective-scale=sum` zeta has no 1/d: the reloaded head must keep it to give
    the logits the device's accuracy came from; a file written before it was kept reads as the
    default ("mean")."""
    result = _personalized("pfedgm", **{"objective-scale": "sum"})
    path = personal_model.save(tmp_path / "m.safetensors", result.model, SHAPE, CLASSES, {})
    loaded = personal_model.load(path)
    x = _task().data.x_test
    with torch.no_grad():
        assert torch.equal(loaded.model(x), result.model.eval()(x))
    assert loaded.meta["head-args"]["objective-scale"] == "sum"


def test_a_file_naming_its_rounds_server_round_as_before_loads_them_as_rounds(tmp_path):
    """A model file names the Phase 1 rounds behind it `rounds` (on the wire, `server-round` is
    the current round); one written while it was `server-round` reads the same."""
    result = _personalized("fedavg")
    old = tmp_path / "old.safetensors"
    personal_model.save(old, result.model, SHAPE, CLASSES, {"server-round": 3, "run-id": 7})
    meta = personal_model.load(old).meta
    assert (meta["rounds"], meta["run-id"], "server-round" in meta) == (3, 7, False)


@pytest.mark.slow  # every method through the ClientApp handlers
def test_every_devices_saved_model_gives_the_accuracy_its_reply_reported(every_method_run, mnist):
    """Every method through the real ClientApp on MNIST (`every_method_run`): each client's
    file, loaded and evaluated on the client's own test split, gives exactly the accuracy its
    personalize reply reported, and says so in its metadata."""
    workdir, replies, _ = every_method_run
    for name in METHODS:
        cfg = parse_run_config({**REPLY_RUN, "method": name, "dataset": str(mnist)})[0]
        rows = [c["metrics"] for _, kind, c in replies[name] if kind == "train.personalize"]
        assert len(rows) == 2, name
        for row in rows:
            pid = int(row["partition-id"])
            model = RunFolder(workdir / name).models / f"client-{pid}.safetensors"
            saved = personal_model.load(model)
            data = load_client_data(Protocol.of(cfg, 2), pid)
            assert accuracy(saved.model, data.x_test, data.y_test) == row["accuracy"], name
            assert (saved.meta["accuracy"], saved.meta["method"]) == (row["accuracy"], name)
            assert saved.classes == list("0123456789") and saved.image_shape == SHAPE


def test_a_changed_file_or_one_that_is_no_model_is_refused_in_one_line(tmp_path):
    """A byte of a tensor flipped, the metadata edited (its SHA-256 kept), a text file, another
    program's safetensors, a missing file: each refused with one line naming the file."""
    path, _ = _save(tmp_path / "m.safetensors")
    flipped = bytearray(path.read_bytes())
    flipped[-1] ^= 1  # the data section ends the file
    (tmp_path / "flipped.safetensors").write_bytes(bytes(flipped))
    with safe_open(path, framework="pt") as f:
        header, tensors = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}
    meta = json.loads(header["model"])
    edited = {**header, "model": json.dumps({**meta, "accuracy": 1.0}, sort_keys=True)}
    save_file(tensors, tmp_path / "edited.safetensors", edited)
    (tmp_path / "text.safetensors").write_text("not a model")
    save_file({"w": torch.zeros(2)}, tmp_path / "other.safetensors")
    cases = {"flipped": "changed since it was written", "edited": "changed since it was written",
             "text": "not a model file", "other": "not a pFedGM personalized model",
             "missing": "no such file"}  # fmt: skip
    for name, why in cases.items():
        file = tmp_path / f"{name}.safetensors"
        with pytest.raises(ModelFileError) as err:
            personal_model.load(file)
        assert str(file) in str(err.value) and why in str(err.value), str(err.value)
        assert "\n" not in str(err.value)


@pytest.mark.parametrize("value", [float("nan"), float("-inf")], ids=["nan", "inf"])
def test_a_model_saved_with_weights_not_finite_is_refused_naming_the_tensor(tmp_path, value):
    """A client whose training diverged saves such a model, its SHA-256 right: every
    prediction with it would be `nan`."""
    result = _personalized("pfedgm")
    with torch.no_grad():
        result.model.generator.features[0].weight[0, 0, 0, 0] = value
    path = personal_model.save(tmp_path / "m.safetensors", result.model, SHAPE, CLASSES, {})
    with pytest.raises(ModelFileError) as err:
        personal_model.load(path)
    message = str(err.value)
    assert f"{path}: generator.features.0.weight holds NaN or Inf" in message, message


def test_a_head_of_no_declared_kind_is_not_saved(tmp_path):
    result = _personalized("fedavg")
    result.model.head = torch.nn.Sequential(result.model.head)
    with pytest.raises(TypeError, match="personal_model.HEADS"):
        personal_model.save(tmp_path / "m.safetensors", result.model, SHAPE, CLASSES, {})
    with pytest.raises(ValueError, match="4 logits for 3 class names"):
        personal_model.save(tmp_path / "m.safetensors", _personalized("fedavg").model, SHAPE,
                            CLASSES[:3], {})  # fmt: skip


def _images(folder, count, size=(28, 28), mode="L"):
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    shape = (size[1], size[0]) if mode == "L" else (size[1], size[0], 3)
    for i in range(count):
        Image.fromarray(rng.integers(0, 255, shape, dtype=np.uint8)).save(folder / f"{i}.png")
    return sorted(folder.glob("*.png"))


def test_predict_prints_each_images_class_and_probability(tmp_path, capsys):
    """Folders and files, read as the app reads its data (an RGB image converted to the
    model's grayscale): the class the model's logits favour and its softmax probability."""
    path, _ = _save(tmp_path / "m.safetensors", "pfedgm")
    files = _images(tmp_path / "images", 3) + _images(tmp_path / "rgb", 1, mode="RGB")
    assert predict.main([str(path), str(tmp_path / "images"), str(files[-1])]) == 0
    lines = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    model = personal_model.load(path).model
    pixels = np.stack([np.asarray(Image.open(f).convert("L")) for f in files])
    with torch.no_grad():
        expected = torch.softmax(model(to_tensor(pixels, SHAPE)), 1).max(1)
    assert [line[0] for line in lines] == [str(f) for f in files]
    assert [line[1] for line in lines] == [CLASSES[k] for k in expected.indices]
    assert [float(line[2]) for line in lines] == pytest.approx(expected.values.tolist(), abs=1e-4)
    assert predict.main([str(path), str(files[0]), "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    p = pytest.approx(expected.values[0].item(), abs=1e-4)  # batch sizes differ in the last bit
    assert record == {"image": str(files[0]), "class": lines[0][1], "probability": p}


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda d: _images(d, 1, size=(32, 32), mode="RGB")[0], "is 32x32 pixels; this model "
         "takes grayscale 28x28 images"),
        (lambda d: (d.mkdir(), (d / "notes.png").write_text("x"), d / "notes.png")[-1],
         "not an image"),
        (lambda d: d / "absent.png", "no such file or folder"),
    ],
)  # fmt: skip
def test_predict_refuses_what_the_model_cannot_take_before_predicting(tmp_path, capsys, make, why):
    path, _ = _save(tmp_path / "m.safetensors")
    image = make(tmp_path / "in")
    assert predict.main([str(path), *map(str, _images(tmp_path / "ok", 2)), str(image)]) == 2
    out = capsys.readouterr()
    assert out.out == "" and len(out.err.splitlines()) == 1
    assert str(image) in out.err and why in out.err, out.err
    assert predict.main([str(image), str(tmp_path / "ok")]) == 2  # not a model file
    assert "predict: " in capsys.readouterr().err


def test_predict_names_the_file_to_give_for_a_run_folder_or_its_global_model(tmp_path, capsys):
    """A run's output-dir with one client's model predicts with it; with several, or given
    the global model, one line names the files to choose from, exit 2."""
    run = RunFolder(tmp_path / "run")
    _save(run.models / "client-0.safetensors")
    run.global_model.write_bytes(b"not for predict")
    image = _images(tmp_path / "images", 1)[0]
    assert predict.main([str(run.path), str(image)]) == 0
    assert capsys.readouterr().out.startswith(str(image))
    _save(run.models / "client-1.safetensors")
    for given, says in ((run.path, "client-0.safetensors, client-1.safetensors"),
                        (run.global_model, "models/client-<id>.safetensors")):  # fmt: skip
        assert predict.main([str(given), str(image)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0], err


def test_the_example_images_are_classified_by_a_cifar10_model(tmp_path, capsys, cifar10):
    """examples/make_images.py writes CIFAR-10 test images (the README's example) from the
    local copy; a CIFAR-10 model classifies each in one line."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_images", ROOT / "examples/make_images.py")
    make_images = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_images)
    images = tmp_path / "images"
    assert len(make_images.write_images(cifar10, images)) == 5
    names = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship",
             "truck"]  # fmt: skip
    method = get_method("fedavg")  # a linear head: any saved kind predicts the same way
    torch.manual_seed(0)
    model = method.plugin().build_model((3, 32, 32), len(names))
    path = personal_model.save(tmp_path / "client-0.safetensors", model, (3, 32, 32), names,
                               {"method": "fedavg", "accuracy": 0.5, "run-id": 1})  # fmt: skip
    assert predict.main([str(path), str(images)]) == 0
    lines = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert [Path(line[0]).name for line in lines] == sorted(p.name for p in images.glob("*.png"))
    assert all(line[1] in names and 0 < float(line[2]) <= 1 for line in lines)


def test_a_device_keeps_its_model_in_model_dir_else_under_output_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "share"))
    cfg = RunConfig(output_dir="/runs/a")
    assert node.model_dir(cfg, {"model-dir": "/dev/m"}, 7) == Path("/dev/m")
    assert node.model_dir(cfg, {}, 7) == Path("/runs/a/models")
    assert node.model_dir(RunConfig(), {}, 7) == tmp_path / "share/pfedgm/models/run-7"


def test_a_device_that_cannot_write_its_model_dir_answers_the_query_with_why(
    tmp_path, mnist, monkeypatch, task_identity
):
    """Before round 1: the query's reply says, in one line, that the model cannot be kept."""
    monkeypatch.setenv("PFEDGM_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "file").write_text("a file, not a folder")
    run_config = {**run_config_keys(), "dataset": str(mnist), "pool-size": 600}
    node = {"partition-id": 0, "num-partitions": 4, "model-dir": str(tmp_path / "file" / "m")}
    reply = client_app.query(Message(RecordDict(), dst_node_id=3, message_type="query"),
                             Context(1, 3, node, RecordDict(), run_config))  # fmt: skip
    why = unavailable(reply)
    assert why.startswith("cannot save its personalized model: ") and "\n" not in why
    assert f"{tmp_path / 'file' / 'm'} cannot be written" in why and "model-dir" in why

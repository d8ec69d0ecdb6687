"""Devices with their own data (node-config `data-path`) and the disk cache of decoded clients:
loading, the run's class list, one clear error per bad folder, and a node's config."""

from __future__ import annotations

import zlib

import datasets
import numpy as np
import pytest
import torch

from pfedgm_app.client.node import node_data
from pfedgm_app.data import (
    KNOWN_CLASSES,
    DeviceData,
    Protocol,
    cache,
    client_split,
    clients,
    load_client_data,
    load_device_data,
    load_pool,
    run_classes,
    sources,
)
from pfedgm_app.data import device as device_data
from pfedgm_app.runconfig.common import RunConfig
from pfedgm_app.runconfig.settings import ConfigError

# each test with its own disk cache and empty in-memory caches (a new process)
pytestmark = pytest.mark.usefixtures("fresh_caches")

DIGITS = KNOWN_CLASSES["ylecun/mnist"]


@pytest.fixture(scope="session")
def digits(mnist) -> datasets.Dataset:
    """400 MNIST test images, every 25th (the copy is sorted by label: all ten classes)."""
    test = datasets.load_dataset("parquet", data_files={"test": str(mnist / "test.parquet")})
    return test["test"].select(range(0, 10_000, 25))


def write_image_folder(rows: datasets.Dataset, root, names=None):
    """PNG files in one subfolder per class (named by `names`, default the digit)."""
    for i, row in enumerate(rows):
        folder = root / (names or DIGITS)[row["label"]]
        folder.mkdir(parents=True, exist_ok=True)
        row["image"].save(folder / f"{i:04d}.png")
    return root


def device(path, client_id=0, classes=DIGITS, **kw) -> DeviceData:
    return DeviceData(str(path), classes, client_id, **{"min_train": 10, **kw})


def _equal(a, b) -> bool:
    return all(torch.equal(x, y) for x, y in zip(
        (a.x_train, a.y_train, a.x_test, a.y_test), (b.x_train, b.y_train, b.x_test, b.y_test),
        strict=True)) and a.num_classes == b.num_classes  # fmt: skip


def test_a_device_holding_a_partition_is_that_partitions_client(tmp_path, mnist):
    """A device whose parquet holds partition 2's samples (in pool order), with client id 2,
    gets the same train and test tensors as partition 2 in simulation."""
    protocol = Protocol(str(mnist), 4, 0.5, seed=1, min_train=10, pool_size=800)
    rows = np.sort(np.concatenate(client_split(protocol, 2)))
    (tmp_path / "dev").mkdir()
    load_pool(str(mnist)).dataset.select(rows).to_parquet(str(tmp_path / "dev" / "d.parquet"))
    mine = load_device_data(device(tmp_path / "dev", 2, seed=1))
    assert _equal(mine, load_client_data(protocol, 2))


def test_an_image_folder_maps_its_classes_onto_the_runs(tmp_path, digits):
    """A device with two classes only: labels are indices into the run's ten, the model has
    ten classes; split 80/20 (ceil), seeded by the client id; `classes` sets the order."""
    rows = digits.filter(lambda label: label in (3, 7), input_columns="label")
    folder = write_image_folder(rows, tmp_path / "img")
    d = load_device_data(device(folder, 5))
    n = len(rows)
    assert (len(d.y_test), len(d.y_train)) == (int(np.ceil(0.2 * n)), n - int(np.ceil(0.2 * n)))
    assert d.num_classes == 10 and set(d.y_train.tolist()) | set(d.y_test.tolist()) == {3, 7}
    assert d.x_train.shape[1:] == (1, 28, 28) and -1 <= d.x_train.min() < d.x_train.max() <= 1
    other = load_device_data(device(folder, 6))
    assert not torch.equal(d.y_test, other.y_test) or not torch.equal(d.x_test, other.x_test)
    swapped = load_device_data(device(folder, 5, classes=("7", "3")))
    assert swapped.num_classes == 2 and torch.equal(swapped.y_train, (d.y_train == 3).long())


def write_int_labels(root, labels):
    """A parquet file whose label column holds plain integers (no ClassLabel names)."""
    from PIL import Image

    images = [Image.fromarray(np.zeros((28, 28), np.uint8))] * len(labels)
    ds = datasets.Dataset.from_dict({"image": images, "label": labels})
    root.mkdir(parents=True)
    ds.cast_column("image", datasets.Image()).to_parquet(str(root / "train.parquet"))


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p, rows: None, "does not exist on this device"),
        (lambda p, rows: p.mkdir(), "holds neither parquet splits"),
        (lambda p, rows: (p / "3").mkdir(parents=True), "holds no samples"),
        (lambda p, rows: write_image_folder(rows, p, [*DIGITS[:9], "cat"]),
         "labels ['cat'] are not among the run's 10 classes"),
        (lambda p, rows: write_int_labels(p, [0, 3, 12] * 20), "labels [12] lie outside"),
        (lambda p, rows: (p.mkdir(), (p / "x.parquet").write_bytes(b"PAR1 not parquet")),
         "not a readable parquet file"),
        (lambda p, rows: (write_image_folder(rows.select(range(0, 400, 8)), p),
                          (p / "4" / "x.png").write_bytes(b"?")),
         "cannot identify image file"),
        (lambda p, rows: write_image_folder(rows.select(range(10)), p),
         "8 training samples after the 80% split, fewer than min-train-samples=10"),
    ],
)  # fmt: skip
def test_bad_device_data_is_one_clear_error_naming_the_path(tmp_path, digits, make, message):
    path = tmp_path / "data"
    make(path, digits)
    with pytest.raises(ConfigError) as err:
        load_device_data(device(path))
    assert message in str(err.value) and str(path) in str(err.value)


def test_the_runs_class_list_comes_from_classes_or_the_dataset(mnist, tmp_path):
    assert run_classes(" b, a ", "uoft-cs/cifar10") == ("b", "a")
    assert run_classes("", "uoft-cs/cifar10")[:3] == ("airplane", "automobile", "bird")
    assert run_classes("", str(mnist)) == DIGITS  # a local copy's schema, no image decoded
    (tmp_path / "b").mkdir(), (tmp_path / "a").mkdir()  # an image folder's class subfolders
    assert run_classes("", str(tmp_path)) == ("a", "b")
    with pytest.raises(ConfigError, match="give run-config classes="):
        run_classes("", "/not/on/this/device")
    with pytest.raises(ConfigError, match="names no class list"):
        run_classes("", "zh-plus/tiny-imagenet")
    for bad in ("a,,b", "a,b,a"):
        with pytest.raises(ConfigError, match="distinct non-empty names"):
            RunConfig(classes=bad).validate()


def test_node_config_names_the_client_and_its_data(tmp_path, digits):
    folder = str(write_image_folder(digits.select(range(0, 400, 2)), tmp_path / "img"))
    cfg = RunConfig(dataset="ylecun/mnist", min_train_samples=10)
    cid, num, d = node_data(cfg, {"data-path": folder})
    assert (cid, num) == (zlib.crc32(folder.encode()) & 0x7FFFFFFF, 0) and d.num_classes == 10
    assert node_data(cfg, {"data-path": folder, "partition-id": 3, "num-partitions": 4})[:2] == (
        3, 4)  # fmt: skip
    with pytest.raises(ConfigError, match="names no data"):
        node_data(cfg, {"num-partitions": 4})
    with pytest.raises(ConfigError, match="needs corruption='none'"):
        node_data(RunConfig(corruption="50C"), {"data-path": folder})


def test_a_new_process_reads_the_cached_client_and_a_changed_key_decodes_again(
    tmp_path, digits, monkeypatch
):
    """Decoded once: a fresh process (empty memory caches) reads the same tensors from disk
    without decoding; a changed file, seed or class list decodes again."""
    folder = write_image_folder(digits.select(range(0, 400, 4)), tmp_path / "img")
    first = load_device_data(device(folder, 1))
    decoded = []
    real = device_data.pixels
    monkeypatch.setattr(device_data, "pixels", lambda *a: decoded.append(1) or real(*a))

    def again(**kw):
        cache._CLIENTS.clear()
        sources._POOLS.clear()
        return load_device_data(device(folder, 1, **kw))

    assert _equal(again(), first) and decoded == []
    assert len(list((tmp_path / "cache" / "clients").glob("*.npz"))) == 1
    again(seed=1)
    assert len(decoded) == 2  # train and test
    again(classes=("9", *DIGITS[:9]))
    assert len(decoded) == 4
    png = next(folder.rglob("*.png"))
    png.write_bytes(png.read_bytes())  # same bytes, new modification time
    assert _equal(again(), first) and len(decoded) == 6


def test_partitioned_clients_are_cached_on_disk_too(mnist, monkeypatch):
    protocol = Protocol(str(mnist), 4, 0.5, seed=2, min_train=10, pool_size=400)
    first = load_client_data(protocol, 1)
    cache._CLIENTS.clear()

    def refuse(*args):
        raise AssertionError("the pool was loaded instead of the cached client read")

    monkeypatch.setattr(clients, "load_pool", refuse)
    assert _equal(load_client_data(protocol, 1), first)
    with pytest.raises(AssertionError, match="instead of the cached"):
        load_client_data(Protocol(str(mnist), 4, 0.5, seed=2, min_train=10, pool_size=500), 1)


def test_a_one_class_dataset_or_class_list_is_refused(tmp_path, digits):
    """A single class would train nothing and report 100 % accuracy: refused with its reason."""
    one = write_image_folder(digits.filter(lambda r: r["label"] == 3), tmp_path / "threes")
    with pytest.raises(ConfigError, match="holds 1 class.*to partition: a classifier needs"):
        load_client_data(Protocol.of(RunConfig(dataset=str(one), min_train_samples=1), 2), 0)
    assert load_device_data(device(one, min_train=1)).num_classes == 10  # a device may hold one
    with pytest.raises(ConfigError, match=r"class list is \['3'\]: a classifier needs at least 2"):
        run_classes("", str(one))
    with pytest.raises(ConfigError, match="at least 2 classes"):
        run_classes("cat", "uoft-cs/cifar10")

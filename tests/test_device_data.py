"""Devices with their own data (node-config `data-path`) and the disk cache of decoded clients:
loading, the run's class list, clear errors, discovery leaving a bad node out, and a
deployment whose SuperNodes read their own folders."""

from __future__ import annotations

import json
import subprocess
import sys
import zlib
from pathlib import Path

import datasets
import numpy as np
import pytest
import torch
from flwr.app import Error, Message, MetricRecord, RecordDict

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
from pfedgm_app.data.labels import _declared_classes
from pfedgm_app.data.sources import _columns
from pfedgm_app.runconfig.common import RunConfig
from pfedgm_app.runconfig.settings import ConfigError
from pfedgm_app.server.federation import discover_clients, unavailable
from tests.conftest import SHARED_DATA as SHARED
from tests.test_server import FakeGrid

DIGITS = KNOWN_CLASSES["ylecun/mnist"]


@pytest.fixture(autouse=True)
def _fresh(fresh_caches):
    """Each test with its own disk cache and empty in-memory caches (a new process)."""


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


def _features_classes(files: list[Path]) -> tuple[str, ...] | None:
    """What `datasets` reads from a parquet file's schema: the label column's class names."""
    import pyarrow.parquet as pq

    features = datasets.Features.from_arrow_schema(pq.read_schema(files[0]))
    label = features[_columns(str(files[0].parent), features)[1]]
    return tuple(label.names) if isinstance(label, datasets.ClassLabel) else None


@pytest.mark.parametrize("name", ["mnist", "cifar10", "cifar100", "emnist", "tinyimagenet"])
def test_the_declared_class_list_is_the_one_datasets_reads(name):
    """The class list read from a parquet schema's metadata without `datasets` is the one
    `datasets` reads, for every dataset of ../shared/data."""
    files = sorted((SHARED / name).rglob("*.parquet"))
    if not files:
        pytest.skip(f"no parquet files of {name} in ../shared/data")
    import pyarrow.parquet as pq

    assert _declared_classes(pq.read_schema(files[0]).metadata) == _features_classes(files)


def test_the_declared_class_list_follows_columns_choice_or_leaves_it_to_datasets():
    def meta(features):
        return {b"huggingface": json.dumps({"info": {"features": features}}).encode()}

    image, coarse = {"_type": "Image"}, {"names": ["x", "y"], "_type": "ClassLabel"}
    fine = {"names": ["a", "b", "c"], "_type": "ClassLabel"}
    both = {"img": image, "label": coarse, "fine_label": fine}  # as `_columns`: fine_label
    assert _declared_classes(meta(both)) == ("a", "b", "c")
    assert _declared_classes(meta({"img": image, "other": fine})) == ("a", "b", "c")
    for unknown in (
        {"img": image, "label": {"dtype": "int64", "_type": "Value"}},
        {"label": fine},
        {"img": image, "label": {"names": [1, 2], "_type": "ClassLabel"}},
    ):
        assert _declared_classes(meta(unknown)) is None
    assert _declared_classes({}) is None and _declared_classes({b"huggingface": b"{"}) is None


def test_a_local_copys_class_list_is_read_without_importing_datasets(mnist):
    """Every message of a deployment asks for the run's class list in a fresh process:
    `datasets` (seconds to import) stays out of it."""
    code = (
        "import sys; from pfedgm_app.data import run_classes; "
        f"print(run_classes('', {str(mnist)!r})[:2], 'datasets' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["('0',", "'1')", "False"]


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


@pytest.mark.usefixtures("task_identity")
@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda p: None, "does not exist on this device"),
        (lambda p: (p.mkdir(), (p / "x.parquet").write_bytes(b"PAR1 not parquet")),
         "x.parquet: not a readable parquet file"),
    ],
)  # fmt: skip
def test_a_node_whose_data_cannot_be_loaded_answers_the_query_with_why(
    tmp_path, caplog, make, reason
):
    """No exception leaves the ClientApp (Flower would wrap and log it with its traceback): the
    query's reply carries the reason, and the node logs it in one line."""
    from flwr.app import Context

    from pfedgm_app import client_app
    from pfedgm_app.methods import run_config_keys
    from pfedgm_app.protocol import wire

    path = tmp_path / "data"
    make(path)
    run_config = {**run_config_keys(), "dataset": "ylecun/mnist"}
    context = Context(1, 17, {"data-path": str(path)}, RecordDict(), run_config)
    request = Message(RecordDict(), dst_node_id=17, message_type="query")
    with caplog.at_level("ERROR", logger="flwr"):
        reply = client_app.query(request, context)
    assert not reply.has_error() and wire.METRICS not in reply.content
    why = reply.content[wire.UNAVAILABLE][wire.REASON]
    assert str(path) in why and reason in why and "\n" not in why
    assert [r.getMessage() for r in caplog.records] == [
        f"pFedGM app: node 17 cannot take part: {why}"
    ]
    assert unavailable(reply) == f"could not load its data: {why}"


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


class DeviceGrid(FakeGrid):
    """FakeGrid whose replies also carry the model input; `inputs` overrides a node's."""

    def __init__(self, partitions, failing=(), no_data=(), inputs=None):
        super().__init__(partitions, failing, no_data)
        self.inputs = inputs or {}

    def send_and_receive(self, messages, timeout=None):
        replies = super().send_and_receive(messages, timeout)
        for reply in replies:
            if reply.has_content() and "metrics" in reply.content:
                shape, k = self.inputs.get(reply.metadata.src_node_id, ([1, 28, 28], 10))
                metrics = {**reply.content["metrics"], "image-shape": shape, "num-classes": k}
                reply.content["metrics"] = MetricRecord(metrics)
        return replies


@pytest.mark.usefixtures("task_identity")
def test_with_min_nodes_a_node_that_cannot_take_part_is_left_out_and_recorded():
    grid = DeviceGrid({1: (0, 0), 2: (1, 0), 3: (2, 0), 4: (3, 0), 5: (4, 0)}, failing=[5],
                      no_data=[3], inputs={4: ([3, 32, 32], 10)})  # fmt: skip
    failed = {}
    infos = discover_clients(grid, RunConfig(min_nodes=2, node_wait_timeout=1), failed)
    assert sorted(infos) == [1, 2]
    assert failed[3] == "could not load its data: data-path '/x' does not exist on this device"
    assert "gives the model [3, 32, 32] images" in failed[4]
    assert failed[5] == "its ClientApp failed (Flower error code 1): boom"
    with pytest.raises(ConfigError, match="set min-nodes=N"):  # devices without num-partitions
        discover_clients(grid, RunConfig(node_wait_timeout=1))
    with pytest.raises(ConfigError, match="set min-nodes=N"):
        discover_clients(DeviceGrid({1: (0, 0)}), RunConfig(node_wait_timeout=1))


@pytest.mark.usefixtures("task_identity")
def test_a_failed_clientapps_error_is_reported_as_its_exception_on_one_line():
    """Flower's code, then the ClientApp's message out of Flower's wrapper (`error_cause`);
    a reason of another form on one line, shortened."""
    request = Message(RecordDict(), dst_node_id=1, message_type="query")

    def reply(reason):
        return Message(Error(code=2, reason=reason), reply_to=request)

    simulation = (
        "<class 'flwr.clientapp.client_app.ClientAppException'>:<'\nException "
        "ClientAppException occurred. Message: division by zero'>"
    )
    assert (
        unavailable(reply(simulation))
        == "its ClientApp failed (Flower error code 2): division by zero"
    )
    long = unavailable(reply("x" * 1000))
    assert long.endswith("x...") and len(long) < 700 and "\n" not in long


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

"""Partition invariants: disjoint, complete, seeded, minimum sizes, 80/20; decoded tensors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from pfedgm_app.data import (
    Protocol,
    client_indices,
    client_split,
    corruption_pair,
    dirichlet_partition,
    hold_out_validation,
    load_client_data,
    load_pool,
    min_partition_size,
    pixels,
    split_train_test,
    to_tensor,
)
from pfedgm_app.data.corruptions import CORRUPTIONS, corruption_pairs
from pfedgm_app.data.partitioner import ResamplingDirichletPartitioner
from pfedgm_app.runconfig.settings import ConfigError

LABELS = np.repeat(np.arange(10), 600)  # 6000 samples, 10 balanced classes


@pytest.mark.parametrize("alpha", [0.1, 0.5, 100.0])
def test_dirichlet_partition_is_disjoint_complete_and_sized(alpha):
    parts = dirichlet_partition(LABELS, 20, alpha, min_size=63, seed=1)
    assert len(parts) == 20
    joined = np.concatenate(parts)
    assert len(joined) == len(LABELS) == len(np.unique(joined))  # disjoint and complete
    assert min(len(p) for p in parts) >= 63


def test_dirichlet_partition_is_seeded():
    a = dirichlet_partition(LABELS, 20, 0.3, 63, seed=7)
    b = dirichlet_partition(LABELS, 20, 0.3, 63, seed=7)
    c = dirichlet_partition(LABELS, 20, 0.3, 63, seed=8)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c, strict=True))


def test_smaller_alpha_means_more_label_skew():
    """Dir(0.1) clients hold fewer classes than Dir(100) clients (the heterogeneity knob)."""

    def classes_per_client(alpha):
        parts = dirichlet_partition(LABELS, 20, alpha, 63, seed=0)
        return np.mean(
            [np.sum(np.bincount(LABELS[p], minlength=10) > 0.05 * len(p)) for p in parts]
        )

    assert classes_per_client(0.1) < 4 < 9 < classes_per_client(100.0)


def test_impossible_minimum_is_a_clear_error():
    with pytest.raises(ConfigError, match="exceeds"):
        dirichlet_partition(LABELS, 100, 0.5, min_size=61, seed=0)


def test_partitioner_is_a_flwr_datasets_partitioner():
    import datasets

    ds = datasets.Dataset.from_dict({"label": LABELS.tolist()})
    p = ResamplingDirichletPartitioner(10, 0.5, min_size=63, seed=0)
    p.dataset = ds
    assert p.num_partitions == 10
    assert len(p.load_partition(3)) == len(p.partition_indices()[3]) >= 63


def test_train_test_split_is_80_20_disjoint_and_seeded():
    idx = np.arange(1000, 1063)
    train, test = split_train_test(idx, 0.2, seed=3)
    assert len(test) == math.ceil(0.2 * 63) and len(train) == 50
    assert set(train).isdisjoint(test) and set(train) | set(test) == set(idx)
    again = split_train_test(idx, 0.2, seed=3)
    assert np.array_equal(train, again[0])
    assert min_partition_size(50, 0.2) == 63


def test_a_validation_split_is_carved_from_train_and_the_test_set_is_never_read(cifar10):
    """validation-fraction 0.1: ceil(0.1 n) of a client's n training samples (seeded) become
    the evaluated set; the rest train; the partition and the test indices are as without."""
    idx = np.arange(200, 263)
    train, test = split_train_test(idx, 0.2, seed=3)
    rest, validation = hold_out_validation(train, test, 0.1, seed=3)
    assert len(validation) == math.ceil(0.1 * len(train)) and len(rest) + len(validation) == 50
    assert set(rest) | set(validation) == set(train) and set(rest).isdisjoint(validation)
    kept = hold_out_validation(train, test, 0.0, seed=3)
    assert kept[0] is train and kept[1] is test
    assert np.array_equal(hold_out_validation(train, test, 0.1, seed=3)[1], validation)
    plain = Protocol(str(cifar10), 20, 0.5, seed=0, pool_size=6000)
    held = Protocol(str(cifar10), 20, 0.5, seed=0, pool_size=6000, validation_fraction=0.1)
    for pid in (0, 7):
        (tr, te), (rest, val) = client_split(plain, pid), client_split(held, pid)
        assert set(rest) | set(val) == set(tr) and not set(val) & set(te)
        data = load_client_data(held, pid)
        assert len(data.y_test) == len(val) and len(data.y_train) == len(rest)


@pytest.mark.slow  # real CIFAR-10, decoded
def test_cifar10_protocol_partition(cifar10):
    """Pooled 60k CIFAR-10, Dir(0.1), 100 clients: every client >= 50 train samples, 80/20."""
    clients = client_indices(Protocol(str(cifar10), 100, 0.1, seed=0))
    train_sizes = [len(tr) for tr, _ in clients]
    everything = np.concatenate([np.concatenate(c) for c in clients])
    assert len(everything) == 60_000 == len(np.unique(everything))
    assert min(train_sizes) >= 50
    for tr, te in clients:
        assert len(te) == math.ceil(0.2 * (len(tr) + len(te)))


def test_client_tensors_are_decoded_and_normalized(cifar10):
    protocol = Protocol(str(cifar10), 100, 0.5, seed=0)
    data = load_client_data(protocol, 5)
    assert data.x_train.shape[1:] == (3, 32, 32) and data.x_train.dtype.is_floating_point
    assert -1.0 <= data.x_train.min() < -0.5 and 0.5 < data.x_train.max() <= 1.0
    assert data.num_classes == 10 and len(data.y_train) >= 50
    pixel = pixels(load_pool(str(cifar10)), np.array([0]))  # (1, 32, 32, 3) uint8
    back = to_tensor(pixel, (3, 32, 32))
    torch.testing.assert_close(back[0, :, 4, 7], torch.from_numpy(pixel[0, 4, 7]) / 127.5 - 1)
    # cached: the same tensors come back, no second decoding
    assert load_client_data(protocol, 5) is data


def test_pool_size_keeps_a_seeded_subset(cifar10):
    """pool-size N: the clients share N samples of the pool, the same ones for the same seed."""
    protocol = Protocol(str(cifar10), 4, 0.5, seed=3, pool_size=1000)
    clients = client_indices(protocol)
    everything = np.concatenate([np.concatenate(c) for c in clients])
    assert len(everything) == 1000 == len(np.unique(everything)) and everything.max() < 60_000
    again = client_indices(Protocol(str(cifar10), 4, 0.5, seed=3, pool_size=1000))
    assert all(np.array_equal(a[0], b[0]) for a, b in zip(clients, again, strict=True))


@pytest.mark.parametrize(
    ("name", "shape", "classes"),
    [("mnist", (1, 28, 28), 10), ("emnist", (1, 28, 28), 62), ("cifar10", (3, 32, 32), 10),
     ("cifar100", (3, 32, 32), 100), ("tinyimagenet", (3, 64, 64), 200)],
)  # fmt: skip
def test_every_dataset_goes_through_one_pipeline(request, name, shape, classes):
    """Grayscale and color, 28, 32 and 64 px, from ../shared/data: the pool's shape and classes,
    and a client's tensors in [-1, 1] of that shape with labels in range."""
    pool = load_pool(str(request.getfixturevalue(name)))
    assert (pool.image_shape, pool.num_classes) == (shape, classes)
    data = load_client_data(Protocol(str(pool.source), 20, 0.5, seed=0, pool_size=4000), 0)
    assert data.x_train.shape[1:] == shape and data.num_classes == classes
    assert -1.0 <= data.x_train.min() and data.x_train.max() <= 1.0
    assert 0 <= data.y_train.min() and data.y_train.max() < classes


def test_grayscale_images_among_color_ones_are_read_as_rgb(tinyimagenet):
    """TinyImageNet holds mode-L images (row 24 of the local copy is one): read as 3 equal
    channels, like the color images around them."""
    pool = load_pool(str(tinyimagenet))
    assert pool.dataset[24][pool.image_column].mode == "L"
    x = to_tensor(pixels(pool, np.array([23, 24])), pool.image_shape)
    assert x.shape == (2, 3, 64, 64)
    assert torch.equal(x[1, 0], x[1, 1]) and torch.equal(x[1, 1], x[1, 2])
    assert not torch.equal(x[0, 0], x[0, 1])


def test_a_corrupt_parquet_file_is_named_in_one_line(tmp_path, mnist):
    (tmp_path / "train.parquet").write_bytes((mnist / "test.parquet").read_bytes()[:5000])
    with pytest.raises(ConfigError) as err:
        load_pool(str(tmp_path))
    message = str(err.value)
    assert str(tmp_path / "train.parquet") in message and "not a readable parquet" in message
    assert "\n" not in message


def test_labels_outside_the_declared_classes_are_refused(tmp_path):
    """An unlabeled row (-1, as some hub test splits have) fails before any round."""
    import datasets
    from PIL import Image

    images = [Image.fromarray(np.zeros((32, 32, 3), dtype=np.uint8)) for _ in range(3)]
    ds = datasets.Dataset.from_dict({"img": images, "label": [0, 1, -1]})
    ds = ds.cast_column("img", datasets.Image())
    ds.to_parquet(str(tmp_path / "train.parquet"))
    with pytest.raises(ConfigError, match="outside the 2 classes"):
        load_pool(str(tmp_path))


def test_50c_and_100c_assign_the_papers_pairs():
    assert [corruption_pair("50C", i) for i in (0, 4, 5, 49)] == [
        (CORRUPTIONS[0], 1), (CORRUPTIONS[0], 5), (CORRUPTIONS[1], 1), (CORRUPTIONS[9], 5)
    ]  # fmt: skip
    assert corruption_pair("50C", 50) is None and corruption_pair("none", 0) is None
    assert corruption_pair("100C", 6) == corruption_pair("100C", 7) == corruption_pair("50C", 3)
    assert corruption_pair("100C", 99) == (CORRUPTIONS[9], 5)
    assert corruption_pair("100C", 100) is None
    assigned = [corruption_pair("50C", i) for i in range(50)]
    assert len(set(assigned)) == 50


def test_corrupted_clients_are_seeded_cached_on_disk_and_clean_ones_untouched(
    cifar10, tmp_path, monkeypatch
):
    """50C on 60 clients: client 2 (motion blur, severity 3) differs from its clean images in
    train and test alike; client 55 is clean; a second process reads the corrupted images from
    the disk cache instead of computing them again."""
    from pfedgm_app.data import cache, clients

    monkeypatch.setenv("PFEDGM_CACHE_DIR", str(tmp_path))
    common = dict(dataset=str(cifar10), num_partitions=60, alpha=0.5, pool_size=12_000)
    clean, noisy = Protocol(**common), Protocol(**common, corruption="50C")
    for pid, changed in ((2, True), (55, False)):
        a, b = load_client_data(clean, pid), load_client_data(noisy, pid)
        assert torch.equal(a.y_train, b.y_train) and torch.equal(a.y_test, b.y_test)
        assert (not torch.equal(a.x_train, b.x_train)) is changed
        assert (not torch.equal(a.x_test, b.x_test)) is changed
    assert len(list((tmp_path / "corrupted").glob("motion_blur-3-*.npy"))) == 2  # train, test
    first = load_client_data(noisy, 2)
    cache._CLIENTS.clear()  # a new process: only the disk cache is left

    def refuse(*args, **kwargs):
        raise AssertionError("computed again instead of read from the cache")

    monkeypatch.setattr(clients, "corrupt", refuse)
    again = load_client_data(noisy, 2)
    assert torch.equal(first.x_train, again.x_train) and torch.equal(first.x_test, again.x_test)


def test_corruption_of_grayscale_data_is_refused(mnist):
    protocol = Protocol(str(mnist), 10, 0.5, pool_size=2000, corruption="50C")
    with pytest.raises(ConfigError, match="needs color images"):
        load_client_data(protocol, 0)


def test_generalization_protocol_trains_45_seen_and_evaluates_55_unseen_clients():
    """The paper's new-client protocol on 100 clients: 0..49 clean, 50..99 corrupted with the 50
    pairs in order; Phase 1 on 0..44; the headline accuracy over the 5 new clean and the 50
    corrupted clients, the 45 others reported as 'original'."""
    p = Protocol("any", 100, 0.5, kind="generalization")
    assert [i for i in range(100) if p.trains(i)] == list(range(45))
    assert [i for i in range(100) if p.headline(i)] == list(range(45, 100))
    assert [p.pair(i) for i in range(100)] == [None] * 50 + corruption_pairs()
    types = [p.client_type(i) for i in range(100)]
    assert types.count("original") == 45 and types.count("clean") == 5
    assert all(types.count(c) == 5 for c in CORRUPTIONS)
    standard = Protocol("any", 100, 0.5, corruption="100C")
    assert all(standard.trains(i) and standard.headline(i) for i in range(100))
    assert standard.pair(7) == corruption_pair("100C", 7)


@pytest.mark.parametrize("preset", ["emnist-dir01-offline", "emnist-dir05-offline"])
def test_the_offline_emnist_presets_give_each_of_1000_clients_its_data(preset, emnist):
    """The paper's 1000 EMNIST clients from the real ByClass images here: the partition holds,
    every client has at least min-train-samples to train on, labels among the 62 classes."""
    from pfedgm_app.methods import parse_run_config

    cfg, _, _ = parse_run_config({"preset": preset, "dataset": str(emnist)})
    protocol = Protocol.of(cfg, 1000)
    train_sizes = [len(train) for train, _ in client_indices(protocol)]
    assert len(train_sizes) == 1000 and min(train_sizes) >= cfg.min_train_samples
    data = load_client_data(protocol, 999)
    assert data.num_classes == 62 and data.x_train.shape[1:] == (1, 28, 28)

"""What a client holds on a subset of the paper's data (`pfedgm_paper.holdings`)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from pfedgm_app.data import Protocol, client_indices, load_pool
from pfedgm_paper import holdings


def test_scaled_labels_keep_the_class_shares_at_the_new_count():
    labels = np.repeat(np.arange(3), [5, 3, 2])
    for total in (10, 33, 7):
        counts = np.bincount(holdings.scaled(labels, total), minlength=3)
        assert counts.sum() == total
        assert np.all(np.abs(counts - np.array([0.5, 0.3, 0.2]) * total) < 1)


def test_an_even_pool_gives_every_client_every_class_and_no_thin_test_image():
    """Closed form: near-uniform proportions (alpha 1e6) over 10 balanced classes of 1000
    images split 10 clients each about 80 training images a class, 800 in all."""
    labels = np.repeat(np.arange(10), 1000)
    got = holdings.holding(labels, Protocol("none", 10, 1e6, seed=0))
    assert got.classes == 10 and got.unseen == 0 and got.thin == 0
    assert got.train_images == pytest.approx(800, abs=2)
    assert got.per_class == pytest.approx(80, abs=3)


def test_a_client_of_one_image_a_class_makes_its_test_images_of_that_class_thin():
    """Dir(0.01) over 1000 classes of 3 images: a class goes to about one client, whose 80/20
    split leaves it 0 to 3 training images of it; every test image's class is then unseen or
    thin, and few clients see a class twice."""
    labels = np.repeat(np.arange(1000), 3)
    got = holdings.holding(labels, Protocol("none", 10, 0.01, seed=0, min_train=50))
    assert got.unseen + got.thin > 90
    assert got.unseen > 0 and got.thin > 0


def test_the_local_copy_is_partitioned_as_the_app_partitions_it(tinyimagenet):
    """'here' is the app's own partition of the local copy: the same clients, sizes and labels
    as `client_indices`, which the runs train on."""
    protocol = holdings.protocol_of("tinyimagenet-dir05-offline")
    protocol = dataclasses.replace(protocol, dataset=str(tinyimagenet))
    labels = load_pool(protocol.dataset).labels
    clients = client_indices(protocol)
    sizes = sorted(len(train) for train, _ in clients)
    got = holdings.holding(labels, protocol)
    assert got.pooled == 30_000 and got.train_images == np.median(sizes)
    held = [len(np.unique(labels[train])) for train, _ in clients]
    assert got.classes == np.median(held)


def test_the_papers_size_holds_more_of_each_class_than_the_local_copy(tinyimagenet):
    """Four times the pool: about four times a client's images, more of each class it holds,
    and fewer of its test images unseen or thin."""
    here = holdings.protocol_of("tinyimagenet-dir05-offline")
    here = dataclasses.replace(here, dataset=str(tinyimagenet))
    labels = load_pool(here.dataset).labels
    small = holdings.holding(labels, here)
    large = holdings.holding(holdings.scaled(labels, 120_000), here)
    assert large.train_images == pytest.approx(4 * small.train_images, rel=0.1)
    assert large.per_class > small.per_class and large.classes > small.classes
    assert large.unseen + large.thin < (small.unseen + small.thin) / 2


def test_without_the_local_copy_the_table_is_one_line_naming_no_folder(monkeypatch):
    def missing(dataset):
        raise holdings.ConfigError(f"dataset {dataset!r}: no /some/where/shared/data")

    monkeypatch.setattr(holdings, "load_pool", missing)
    lines = holdings.holding_lines("tinyimagenet-dir05", "shared:tinyimagenet")
    assert len(lines) == 1 and "/some/where" not in lines[0] and "not here" in lines[0]

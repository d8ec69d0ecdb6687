"""The decoded data a device keeps on disk is checked, not trusted: an entry that no longer
matches its SHA-256 (labels flipped, bytes cut, its digest removed, a pickle put in its place)
is decoded again from the source with one warning naming it, and nothing is unpickled."""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest
import torch

from pfedgm_app.data import Protocol, cache, load_client_data, load_pool
from pfedgm_app.data.clients import corrupted


@pytest.fixture(autouse=True)
def _fresh(fresh_caches):
    """Each test with its own disk cache and empty in-memory caches (a new process)."""


class Payload:
    """Unpickling it makes a folder: had the cache unpickled it, the folder would be there."""

    def __init__(self, folder):
        self.folder = folder

    def __reduce__(self):
        return os.mkdir, (str(self.folder),)


def _flip_labels(entry, arrays, tmp_path):
    np.savez(entry, **{**arrays, "y_train": (arrays["y_train"] + 1) % 10})  # digest kept


def _cut(entry, arrays, tmp_path):
    entry.write_bytes(entry.read_bytes()[: entry.stat().st_size // 2])


def _no_digest(entry, arrays, tmp_path):
    np.savez(entry, **{k: v for k, v in arrays.items() if k != "sha256"})


def _pickle(entry, arrays, tmp_path):
    bait = np.array([Payload(tmp_path / "unpickled")], dtype=object)
    np.savez(entry, **{**arrays, "y_train": bait}, allow_pickle=True)


@pytest.mark.parametrize("tamper", [_flip_labels, _cut, _no_digest, _pickle])
def test_a_changed_cached_client_is_decoded_again_with_one_warning(mnist, tmp_path, caplog, tamper):
    protocol = Protocol(str(mnist), 10, 0.5, pool_size=2000)
    first = load_client_data(protocol, 0)
    [entry] = (tmp_path / "cache" / "clients").glob("*.npz")
    with np.load(entry) as stored:
        arrays = dict(stored)
    tamper(entry, arrays, tmp_path)
    cache._CLIENTS.clear()  # a new process: only the disk cache is left
    with caplog.at_level(logging.WARNING):
        again = load_client_data(protocol, 0)
    assert torch.equal(again.y_train, first.y_train) and torch.equal(again.x_train, first.x_train)
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert str(entry) in caplog.records[0].getMessage()
    assert not (tmp_path / "unpickled").exists()
    cache._CLIENTS.clear()  # rewritten whole: read back without a warning
    caplog.clear()
    assert torch.equal(load_client_data(protocol, 0).y_test, first.y_test)
    assert not caplog.records


def test_changed_corrupted_images_are_computed_again_with_one_warning(cifar10, caplog):
    pool, indices = load_pool(str(cifar10)), np.arange(8)
    first = corrupted(pool, indices, ("gaussian_noise", 1), seed=0)
    [entry] = (cache.cache_dir() / "corrupted").glob("*.npy")
    np.save(entry, np.zeros_like(first))
    with caplog.at_level(logging.WARNING):
        again = corrupted(pool, indices, ("gaussian_noise", 1), seed=0)
    assert np.array_equal(again, first)
    assert len(caplog.records) == 1 and str(entry) in caplog.records[0].getMessage()

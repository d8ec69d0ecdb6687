"""The paper's t-SNE figure (`pfedgm_paper.tsne`) from a run folder made by hand: the
config.json and global_model.safetensors that `results.RunWriter` writes, for a small CIFAR-10
run on the real local data (pool-size keeps it small)."""

from __future__ import annotations

import sys
import time

import numpy as np
import pytest
from flwr.app import ArrayRecord
from matplotlib.image import imread

from pfedgm_app.data import Protocol, load_client_data
from pfedgm_app.methods import get_method
from pfedgm_app.records.results import RunWriter
from pfedgm_app.records.run_folder import RunFolder
from pfedgm_app.runconfig.common import RunConfig
from pfedgm_app.runconfig.settings import ConfigError
from pfedgm_app.server.experiment import starting_model

pytest.importorskip("sklearn", reason='the t-SNE figure needs pip install -e ".[paper]"')
tsne = pytest.importorskip("pfedgm_paper.tsne")

NUM_CLIENTS = 8


def _run_folder(folder, cifar10, model=True):
    """A finished pfedgm run's folder: its config.json and its (seeded, untrained) model."""
    cfg = RunConfig(dataset=str(cifar10), pool_size=3000, num_server_rounds=2, seed=1)
    folder.mkdir()
    config = {**cfg.to_run_config(), "num-clients": NUM_CLIENTS, "flwr-version": "1.0"}
    RunFolder(folder).write_config(config)
    if model:
        plugin = get_method(cfg.method).plugin()
        arrays = ArrayRecord(starting_model(cfg, plugin, (3, 32, 32), 10).state_dict())
        RunWriter(folder).save_weights(arrays)
    return folder, Protocol.of(cfg, NUM_CLIENTS)


@pytest.mark.slow  # a t-SNE fit
def test_the_figure_has_a_panel_per_class_and_one_by_class(cifar10, tmp_path):
    run, protocol = _run_folder(tmp_path / "run", cifar10)
    clients, classes = tsne.choose(run)
    assert len(clients) == 6 and len(classes) == 4 and clients == sorted(set(clients))
    assert (clients, classes) == tsne.choose(run)  # repeatable

    z, y, client = tsne.representations(run, clients, classes, max_per_client_class=20)
    assert set(client) <= set(clients) and set(y) <= set(classes)
    assert z.shape == (len(y), 128) and len(client) == len(y)  # z of the CIFAR backbone
    for c in clients:  # the labels are the client's own, capped per class
        labels = load_client_data(protocol, c).y_train.numpy()
        for k in classes:
            assert (y[client == c] == k).sum() == min(20, (labels == k).sum())

    points = tsne.embed(z, seed=0)
    assert points.shape == (len(z), 2) and np.allclose(points, tsne.embed(z, seed=0))
    fig = tsne.draw(points, y, client, ["c"] * 10, tsne.title(run))
    assert len(fig.axes) == len(set(y)) + 1
    assert "cifar10" in fig._suptitle.get_text() and "Dir(0.5)" in fig._suptitle.get_text()

    started = time.time()
    out = tsne.tsne_figure(run, tmp_path / "figs" / "tsne.png", max_per_client_class=20)
    image = imread(out)
    assert image.ndim == 3 and image.shape[1] > 4 * image.shape[0]  # 5 panels side by side
    assert time.time() - started < 15


def test_a_run_without_its_model_is_refused_in_one_line(cifar10, tmp_path):
    run, _ = _run_folder(tmp_path / "run", cifar10, model=False)
    with pytest.raises(ConfigError) as err:
        tsne.tsne_figure(run, tmp_path / "tsne.png")
    assert RunFolder(run).global_model.name in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "tsne.png").exists()


def test_without_scikit_learn_one_line_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn.manifold", None)  # its import now fails
    with pytest.raises(ImportError, match=r'^[^\n]*pip install -e "\.\[paper\]"$'):
        tsne.embed(np.zeros((5, 2)))

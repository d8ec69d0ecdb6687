"""The paper's t-SNE figure (Fig. fig_tsne) from a finished run's output folder.

The final global model's generator (phi, eval mode) maps a few clients' images to their
representations z; one t-SNE (scikit-learn) embeds them all. Each class gets a panel of its
points coloured by client (how far clients' data of one class lie apart in z), and one more
panel shows every point coloured by class. The clients' train images are used, as the paper
does: their test sets are too small for a class to show.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from matplotlib.figure import Figure

from pfedgm_app.data import Protocol, load_client_data, run_classes
from pfedgm_app.methods import get_method, parse_run_config, run_config_keys
from pfedgm_app.records.initial_model import load_state
from pfedgm_app.records.plots import dataset_label
from pfedgm_app.records.run_folder import RunFolder
from pfedgm_app.runconfig.settings import ConfigError


def _json(read: Callable[[], dict[str, Any]], path: Path) -> dict[str, Any]:
    """`read()` (a RunFolder reader of `path`), or one ConfigError naming the file."""
    try:
        return read()
    except (OSError, ValueError) as exc:
        raise ConfigError(f"no readable {path.name} in {path.parent} ({exc})") from None


def _run(run_dir: Path) -> tuple[Any, Any, Protocol]:
    """(common settings, the method's settings, the clients' protocol) of a run folder; its
    global model is checked first, so a folder without one fails before any data loads."""
    run_dir = Path(run_dir)
    folder = RunFolder(run_dir)
    if not folder.global_model.is_file():
        legacy = folder.legacy_global_model
        raise ConfigError(
            f"no {folder.global_model.name} in {run_dir}: give a finished run's output-dir"
            + (f" (`pfedgm-paper collect` converts its {legacy.name})" if legacy.is_file() else "")
        )
    config = _json(folder.read_config, folder.config)
    keys = {k: v for k, v in config.items() if k in run_config_keys()}  # less num-clients, ...
    cfg, _, settings = parse_run_config({**keys, "preset": ""})  # its keys are already final
    num = config.get("num-clients") or _json(folder.read_summary, folder.summary)["num-clients"]
    return cfg, settings, Protocol.of(cfg, int(num))


def representations(
    run_dir: Path,
    clients: list[int],
    classes: list[int],
    split: str = "train",
    max_per_client_class: int = 60,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(z, label, client) of each client's first `max_per_client_class` images of each class
    (the cap keeps t-SNE quick and one large client from filling a panel); train images by
    default, as the paper's figure (the test sets are small)."""
    if split not in ("train", "test"):
        raise ConfigError(f"split must be 'train' or 'test', got {split!r}")
    cfg, settings, protocol = _run(run_dir)
    zs: list[np.ndarray] = []
    ys: list[np.ndarray] = []
    cs: list[np.ndarray] = []
    for c in clients:
        data = load_client_data(protocol, c)
        if not zs:  # the model as the run's clients build it, from their images and classes
            channels, height, width = data.x_train.shape[1:]
            shape = (int(channels), int(height), int(width))
            model = get_method(cfg.method).plugin(settings).build_model(shape, data.num_classes)
            folder = RunFolder(Path(run_dir))
            try:  # safetensors: tensors only; torch's messages run to many lines
                model.load_state_dict(load_state(folder.global_model))
            except Exception:  # not safetensors, or another model's arrays
                raise ConfigError(
                    f"{folder.global_model.name} in {run_dir} is not a safetensors file of "
                    f"its {folder.config.name}'s model"
                ) from None
            generator = model.generator.eval()
        x, y = (data.x_train, data.y_train) if split == "train" else (data.x_test, data.y_test)
        keep = torch.cat([torch.nonzero(y == k).flatten()[:max_per_client_class] for k in classes])
        with torch.no_grad():
            zs.append(torch.cat([generator(b) for b in x[keep].split(512)]).numpy())
        ys.append(y[keep].numpy())
        cs.append(np.full(len(keep), c))
    return np.concatenate(zs), np.concatenate(ys), np.concatenate(cs)


def choose(
    run_dir: Path, clients: list[int] | None = None, classes: list[int] | None = None
) -> tuple[list[int], list[int]]:
    """Defaults: the 4 classes most frequent among the given clients (all when none are given),
    then the 6 clients with the most train samples of them; ties go to the lower id."""
    _, _, protocol = _run(run_dir)
    pool = range(protocol.num_partitions) if clients is None else clients
    counts = {}
    for c in pool:
        data = load_client_data(protocol, c)
        counts[c] = np.bincount(data.y_train.numpy(), minlength=data.num_classes)
    if classes is None:
        classes = sorted(np.argsort(-sum(counts.values()), kind="stable")[:4].tolist())
    if clients is None:
        held = {c: int(v[classes].sum()) for c, v in counts.items()}
        clients = sorted(sorted(held, key=lambda c: (-held[c], c))[:6])
    return list(clients), list(classes)


def embed(z: np.ndarray, seed: int = 0) -> np.ndarray:
    """2-D t-SNE of `z` (fixed random_state, PCA init: the same run gives the same figure)."""
    try:  # lazily: the ClientApp and ServerApp never need scikit-learn
        from sklearn.manifold import TSNE
        from threadpoolctl import threadpool_limits
    except ImportError:
        raise ImportError(
            'the t-SNE figure needs scikit-learn: pip install -e ".[paper]"'
        ) from None
    if len(z) < 3:
        raise ConfigError(f"t-SNE needs at least 3 points, got {len(z)}")
    perplexity = min(30.0, (len(z) - 1) / 3)  # sklearn requires perplexity < n_samples
    tsne = TSNE(2, perplexity=perplexity, init="pca", random_state=seed)
    # One thread: on a busy machine sklearn's OpenMP threads made a few hundred points take
    # 20-50 s instead of 1 s; the figure's points are few.
    with threadpool_limits(1):
        return tsne.fit_transform(z)


def draw(
    points: np.ndarray, y: np.ndarray, client: np.ndarray, names: list[str], title: str
) -> Figure:
    """One panel per class coloured by client, then every point coloured by class; the panels
    share their axes, so each class's place in the common embedding shows."""
    classes, clients = np.unique(y).tolist(), np.unique(client).tolist()
    name = {k: names[k] if k < len(names) else f"class {k}" for k in classes}
    fig = Figure(figsize=(3.2 * (len(classes) + 1), 3.6), layout="constrained")
    axes = fig.subplots(1, len(classes) + 1, sharex=True, sharey=True, squeeze=False)[0]
    for ax, k in zip(axes, classes, strict=False):
        for i, c in enumerate(clients):  # a client keeps its colour in every panel
            at = (y == k) & (client == c)
            ax.scatter(*points[at].T, s=6, color=f"C{i % 10}", label=f"client {c}")
        ax.set_title(name[k])
    for i, k in enumerate(classes):
        axes[-1].scatter(*points[y == k].T, s=6, color=f"C{i % 10}", label=name[k])
    axes[-1].set_title("all, by class")
    for ax in (axes[0], axes[-1]):
        ax.legend(fontsize=6, markerscale=2)
    for ax in axes:
        ax.set_xticks([]), ax.set_yticks([])
    fig.suptitle(title)
    return fig


def title(run_dir: Path) -> str:
    """'t-SNE of z: pfedgm on cifar10 (100C), Dir(0.5), 200 rounds'."""
    cfg, _, _ = _run(run_dir)
    folder = RunFolder(Path(run_dir))
    rounds = cfg.num_server_rounds
    if folder.finished:
        rounds = _json(folder.read_summary, folder.summary)["rounds"]
    data = dataset_label(cfg.dataset) + ("" if cfg.corruption == "none" else f" ({cfg.corruption})")
    return f"t-SNE of z: {cfg.method} on {data}, Dir({cfg.dirichlet_alpha:g}), {rounds} rounds"


def tsne_figure(
    run_dir: Path,
    out_png: Path,
    clients: list[int] | None = None,
    classes: list[int] | None = None,
    seed: int = 0,
    max_per_client_class: int = 60,
) -> Path:
    """Write the t-SNE figure of the run in `run_dir` to `out_png` (dpi 120); returns its path."""
    cfg, _, _ = _run(run_dir)
    clients, classes = choose(run_dir, clients, classes)
    z, y, client = representations(run_dir, clients, classes, "train", max_per_client_class)
    names = list(run_classes(cfg.classes, cfg.dataset))
    fig = draw(embed(z, seed), y, client, names, title(run_dir))
    out = Path(out_png)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    return out

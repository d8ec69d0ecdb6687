"""Each method's accuracy by its clients' training images, on a subset of the paper's data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pfedgm_app.records.run_folder import RunFolder
from pfedgm_paper import render
from pfedgm_paper.client_size import quartile_means, slope_per_doubling
from pfedgm_paper.grid import TABLES

RNG = np.random.default_rng(0)


def _clients(n: int = 40) -> dict:
    images = RNG.integers(10, 400, n)
    return {
        (0, i): (float(50 + 8 * np.log2(m) + RNG.normal(0, 3)), int(RNG.integers(5, 30)), int(m))
        for i, m in enumerate(images)
    }


def test_the_slope_is_weighted_least_squares_on_log2_images_with_its_sandwich_se():
    clients = _clients()
    acc, w, n = (np.array(v, dtype=float) for v in zip(*clients.values(), strict=True))
    x = np.log2(n)
    slope, se = slope_per_doubling(clients)
    assert slope == pytest.approx(np.polyfit(x, acc, 1, w=np.sqrt(w))[0], rel=1e-9)
    design = np.stack([np.ones_like(x), x], axis=1)
    bread = np.linalg.inv(design.T @ (w[:, None] * design))
    residual = acc - design @ (bread @ design.T @ (w * acc))
    meat = design.T @ (((w * residual) ** 2)[:, None] * design)
    assert se == pytest.approx(np.sqrt((bread @ meat @ bread)[1, 1]), rel=1e-9)


def test_one_size_has_no_slope():
    assert slope_per_doubling({(0, 0): (80.0, 10, 100), (0, 1): (60.0, 10, 100)}) is None


def test_a_quartile_is_the_test_size_weighted_mean_of_its_clients():
    clients = {(0, 0): (50.0, 10, 20), (0, 1): (80.0, 30, 25), (1, 0): (90.0, 10, 300)}
    assert quartile_means(clients, [30.0, 100.0, 200.0]) == {0: 72.5, 3: 90.0}


def _run(out: Path, column: str, run: str, dataset: str, rows: list[tuple[float, int]]) -> None:
    folder = RunFolder(out / column / run / "seed0")
    folder.path.mkdir(parents=True)
    folder.write_clients(
        [
            {
                "partition-id": i,
                "accuracy": acc / 100,
                "acc-global": acc / 200,
                "num-test": 10,
                "num-examples": images,
            }
            for i, (acc, images) in enumerate(rows)
        ]  # fmt: skip
    )
    folder.write_summary({"rounds": 200, "seconds-total": 60.0, "seconds-per-round": 1.0})
    folder.write_config({"num-clients": 1000, "num-server-rounds": 200, "dataset": dataset})


def test_a_subset_column_gets_each_methods_quartiles_and_a_full_one_none(tmp_path):
    grow = [(40.0 + 10 * q, 20 * 2**q) for q in range(4) for _ in range(3)]
    _run(tmp_path, "emnist-dir01", "local", "shared:emnist", grow)
    _run(tmp_path, "emnist-dir01", "fedavgft", "shared:emnist", [(70.0, m) for _, m in grow])
    _run(tmp_path, "cifar10-dir01", "local", "shared:cifar10", grow)
    lines = render.markdown(tmp_path, TABLES["standard"]).splitlines()
    heads = [line for line in lines if "by the client's training images" in line]
    assert len(heads) == 1 and heads[0].startswith("emnist-dir01:") and "7.0 times" in heads[0]
    table = lines[lines.index(heads[0]) + 2 :]
    assert table[0] == "| | 20-20 (3) | 40-40 (3) | 80-80 (3) | 160-160 (3) | a doubling |"
    local = next(line for line in table if line.startswith("| Local |"))
    assert local.startswith("| Local | 40.00 | 50.00 | 60.00 | 70.00 | +10.00 (se 0.00) |")
    fedavg = next(line for line in table if line.startswith("| FedAvg |"))  # FedAvgFT's acc-global
    assert fedavg.startswith("| FedAvg | 35.00 | 35.00 | 35.00 | 35.00 | +0.00 ")

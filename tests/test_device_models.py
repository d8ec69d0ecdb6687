"""Through `flwr run` in the real simulation engine: every client ends with its personalized
model on disk, which gives exactly the accuracy the run reported and which `predict` uses; the
ServerApp in the simulation process keeps twice the cores' messages in flight. (A
device that joins after training, in the loopback deployment: `tests/test_e2e.py`; what a run
from a stored model refuses, and such a run in process: `tests/test_initial_model.py`.)"""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
from PIL import Image

from pfedgm_app.client import personal_model
from pfedgm_app.data import Protocol, load_client_data
from pfedgm_app.learning.training import accuracy
from pfedgm_app.methods import parse_run_config
from pfedgm_app.records.run_folder import RunFolder
from pfedgm_cli.flwr_cli import run_app

pytestmark = pytest.mark.e2e

SHORT = {"method": "pfedgm", "local-epochs": 1, "personal-epochs": 1, "lbfgs-cycles": 1,
         "pool-size": 1500, "fraction-train": 1.0, "client-threads": 1}  # fmt: skip


def write_images(mnist, folder, count):
    """The first `count` MNIST test images as PNG files, named <index>-<label>.png."""
    folder.mkdir(parents=True)
    rows = pq.read_table(mnist / "test.parquet").slice(0, count).to_pylist()
    for i, row in enumerate(rows):
        Image.open(io.BytesIO(row["image"]["bytes"])).save(folder / f"{i}-{row['label']}.png")
    return folder


def test_every_client_keeps_its_model_which_gives_its_accuracy_and_predicts(
    flower_env, tmp_path, mnist
):
    trained = tmp_path / "trained"
    cfg = {**SHORT, "num-server-rounds": 1, "dataset": str(mnist), "output-dir": str(trained),
           "messages-in-flight": -1}  # fmt: skip
    run = run_app(cfg, 2, flower_env, timeout=600)
    assert run.ok, run.log[-3000:]
    # `messages-in-flight` auto: in the simulation process, a window of twice the cores
    assert RunFolder(trained).read_config()["messages-in-flight"] == 2 * len(
        os.sched_getaffinity(0)
    )
    reported = {int(r["partition-id"]): r["accuracy"] for r in RunFolder(trained).read_clients()}
    protocol = Protocol.of(parse_run_config(cfg)[0], 2)
    for pid, acc in reported.items():
        saved = personal_model.load(RunFolder(trained).models / f"client-{pid}.safetensors")
        data = load_client_data(protocol, pid)
        assert 100 * accuracy(saved.model, data.x_test, data.y_test) == acc  # exactly, in %
        assert (saved.meta["run-id"], saved.meta["rounds"]) == (int(run.run_id), 1)
    images = write_images(mnist, tmp_path / "images", 4)
    model = RunFolder(trained).models / "client-0.safetensors"
    command = [sys.executable, "-m", "pfedgm_app.client.predict", str(model), str(images)]
    predicted = subprocess.run(command, capture_output=True, text=True, check=True)
    lines = [line.split("\t") for line in predicted.stdout.splitlines()]
    assert len(lines) == 4 and all(c in "0123456789" and 0 < float(p) <= 1 for _, c, p in lines)

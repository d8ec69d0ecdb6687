"""End-to-end runs through `flwr run` in the real simulation engine, on real data: learning,
failures, a deployment, a preset's file. (What a run does with its data: test_data_runs.)"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from devtools.deployment import start_deployment
from pfedgm_app.learning import diagnostics
from pfedgm_app.records.initial_model import load_state
from pfedgm_app.records.run_folder import RunFolder
from pfedgm_cli.flwr_calls import offline_env
from pfedgm_cli.flwr_cli import run_app
from pfedgm_cli.superlink import stop_local_superlink
from pfedgm_engine.inprocess import run_inprocess
from tests.test_data_runs import SMALL, check_folder

pytestmark = pytest.mark.e2e


def _run(flower_env, tmp_path, dataset, num_supernodes=4, **run_config):
    cfg = {"dataset": str(dataset), "output-dir": str(tmp_path / "out"), **run_config}
    return run_app(cfg, num_supernodes, flower_env, timeout=900)


def _check_outputs(run, method, num_clients, rounds):
    assert run.ok, f"run {run.run_id} ended {run.status}:\n{run.log[-3000:]}"
    assert "personalized test accuracy" in run.log  # the summary closes the log
    return check_folder(run.summary, run.output_dir, method, num_clients, rounds)


def test_learning_pfedgm_beats_fedavg_on_cifar10_dir01(flower_env, tmp_path, cifar10):
    """pFedGM's personalized accuracy is far above chance (10%) and above FedAvg's, Dir(0.1).
    pFedGM through `flwr run`; FedAvg, the yardstick, in process meanwhile (the same results
    as through the engine: test_inprocess), while the engine's run starts up."""
    cfg = {"num-server-rounds": 3, "local-epochs": 2, "fraction-train": 0.5,
           "dirichlet-alpha": 0.1, "pool-size": 10_000, "gradient-diagnostics": True}  # fmt: skip
    with ThreadPoolExecutor(1) as engine:
        submitted = engine.submit(
            _run, flower_env, tmp_path / "pfedgm", cifar10, 10, method="pfedgm", **cfg
        )
        avg, _ = run_inprocess(
            {**cfg, "method": "fedavg", "dataset": str(cifar10),
             "output-dir": str(tmp_path / "fedavg"), "client-threads": 1}, 10
        )  # fmt: skip
        gm = _check_outputs(submitted.result(), "pfedgm", 10, 3)
    folder = RunFolder(Path(gm["output-dir"]))
    for row in folder.read_rounds():  # Phase 1's diagnostics, averaged over the round's clients
        assert all(math.isfinite(row[k]) for k in diagnostics.KEYS), row
        assert 0 <= row["grad-share-personalized"] <= 1 and row["loss-shared"] > 0, row
    assert {"head.mu", "head.b", "head.A"} <= set(load_state(folder.global_model))
    assert gm["mean-accuracy"] > 50, gm
    assert gm["mean-accuracy"] > avg["mean-accuracy"] + 10, (gm, avg)
    # The ablation points of the paper's adaptation table are reported alongside.
    assert {"acc-global", "acc-global-cov", "acc-finetune"} <= set(gm["ablation-mean-accuracy"])


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"method": "fedfoo"}, "unknown method"),
        # the same ServerApp check (its try block before round 1), another key
        pytest.param(
            {"dataset": "/nonexistent/cifar10"}, "does not exist", marks=pytest.mark.exhaustive
        ),
    ],
)
def test_bad_input_fails_the_run_with_its_error(flower_env, tmp_path, cifar10, override, message):
    """A bad run-config ends the run as failed, before any round, with a clear error."""
    cfg = {"dataset": str(cifar10), "output-dir": str(tmp_path / "out"), **override}
    run = run_app(cfg, 2, flower_env, timeout=300)
    assert run.status == "finished:failed", run.status
    assert message in run.log
    assert "[ROUND 1" not in run.log


def test_a_client_whose_data_is_corrupt_fails_the_run_before_round_1_in_one_line(
    flower_env, tmp_path, mnist
):
    """The clients' data is a corrupt parquet file (the server never reads it): each ClientApp
    answers the query with why, so no exception reaches Flower (no ClientApp traceback), and
    the ServerApp ends the run before round 1 with one line naming a node and the file."""
    data = tmp_path / "corrupt"
    data.mkdir()
    (data / "train.parquet").write_bytes((mnist / "test.parquet").read_bytes()[:5000])
    cfg = {"dataset": str(data), "output-dir": str(tmp_path / "out")}
    run = run_app(cfg, 2, flower_env, timeout=300)
    assert run.status == "finished:failed", run.status
    assert "[ROUND 1" not in run.log
    cause = f"{data / 'train.parquet'}: not a readable parquet file"
    line = re.search(
        r"pFedGM app: SuperNode \d+ cannot take part: could not load its data: .*", run.log
    )
    assert line and cause in line.group(), run.log[-3000:]
    # no ClientApp raised, and the ServerApp's refusal is its one line, with no traceback
    assert "Traceback" not in run.log, run.log[-3000:]


def test_pfedgm_run_ends_a_diverged_run_with_its_cause_last(flower_env, tmp_path, mnist):
    """At learning-rate 0.05 and the literal navigator scale (std 1; the default 1/sqrt(d)
    trains there) every MNIST client's loss goes non-finite in round 1: `pfedgm run` exits 1
    and its last line is the app's cause naming the learning rate, not Ray's wrapper, and
    advises no resume (there is nothing to continue)."""
    out = tmp_path / "out"
    cfg = (
        f"preset='smoke' dataset='{mnist}' learning-rate=0.05 navigator-std=1.0 output-dir='{out}'"
    )
    cmd = [sys.executable, "-m", "pfedgm_cli.commands", "run", "--run-config", cfg]
    cmd += ["--federation-config", "num-supernodes=4"]
    done = subprocess.run(cmd, env=flower_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=600)  # fmt: skip
    assert done.returncode == 1, done.stdout[-3000:]
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("pFedGM app: no training round aggregated an update"), last
    assert "Diverged: training diverged" in last and "lower learning-rate" in last, last
    assert "ray::" not in last and "resume" not in last, last


def test_deployment_of_devices_with_their_own_data_survives_a_bad_and_a_killed_one(tmp_path, mnist):
    """The deployment path: a SuperLink and four SuperNode processes, one fresh ClientApp
    process per message, each SuperNode told only its client id and where its own data is
    (`data-path`: the three clients' folders, written from a partition of MNIST; no central
    copy), and a fourth whose data-path does not exist. With `min-nodes=2`: the bad device
    answers with its error and is left out (the summary lists it); the third SuperNode is
    killed once round 1 is logged, its messages come back as errors, round 2 goes on with the
    other two, and the personalize round reports it. FedPer's heads live only in each
    SuperNode's `context.state`: a personalized accuracy far above chance needs them to persist
    across rounds and into the personalize round. Each device that was personalized keeps its
    model in its `model-dir`, and predicts with it; the killed device, back after training,
    joins a run from the stored global model with no rounds and gets its own.
    """
    import subprocess
    import sys
    import threading

    from devtools.devices import write_devices
    from pfedgm_app.client.personal_model import load
    from tests.test_device_models import write_images

    home = tmp_path / "flwr-home"
    env = {**offline_env(home), "OMP_NUM_THREADS": "1", "PFEDGM_CACHE_DIR": str(tmp_path / "c")}
    cfg = {**SMALL, "method": "fedper", "fraction-train": 1.0, "pool-size": 3000,
           "client-threads": 1, "min-nodes": 2, "dataset": str(mnist),
           "output-dir": str(tmp_path / "out")}  # fmt: skip
    devices = write_devices(cfg, 3, tmp_path / "devices")
    kept = [tmp_path / "kept" / str(i) for i in range(3)]  # each device's model-dir
    nodes = [f"partition-id={i} data-path='{d}' model-dir='{kept[i]}'"
             for i, d in enumerate(devices)]  # fmt: skip
    deployment = start_deployment(home, [*nodes, f"data-path='{tmp_path / 'nothing'}'"], env)
    out = tmp_path / "out"

    def kill_after_round_1():
        while not RunFolder(out).rounds.exists():
            time.sleep(0.5)
        deployment.kill_supernode(2)

    threading.Thread(target=kill_after_round_1, daemon=True).start()
    joined, saved = None, {}
    try:
        run = run_app(cfg, 3, env, timeout=900, federation=deployment.federation)
        if run.ok:  # on each device, its model (the run after this one replaces it)
            saved = {i: load(kept[i] / f"client-{i}.safetensors").meta for i in (0, 1)}
            assert not (kept[2] / "client-2.safetensors").exists()  # killed before Phase 2
            # device 2 is back: the personalize round alone, on the 3 devices up now
            deployment.add_supernode(nodes[2])
            again = {**cfg, "num-server-rounds": 0, "initial-model": str(out), "min-nodes": 3,
                     "output-dir": str(tmp_path / "joined")}  # fmt: skip
            joined = run_app(again, 3, env, timeout=600, federation=deployment.federation)
    finally:
        deployment.stop()
        stop_local_superlink(home)  # in case a CLI call started a managed one there
    assert run.ok, run.log[-3000:]
    rows = RunFolder(out).read_rounds()
    assert [(r["round"], r["num-clients"]) for r in rows] == [(1, 3), (2, 2)]
    assert run.summary["num-clients-evaluated"] == 2
    killed, bad = sorted(run.summary["failures"], key=lambda f: f.startswith("node"))
    assert killed == "partition 2: not connected"
    assert f"data-path '{tmp_path / 'nothing'}' does not exist" in bad, bad
    assert run.summary["mean-accuracy"] > 40, run.summary  # chance is 10%
    assert len(list((tmp_path / "c" / "clients").glob("*.npz"))) == 3  # decoded once each
    reported = {int(r["partition-id"]): r["accuracy"] for r in RunFolder(out).read_clients()}
    assert {i: 100 * meta["accuracy"] for i, meta in saved.items()} == reported  # a fraction
    assert joined is not None and joined.ok, joined and joined.log[-3000:]
    assert joined.summary["rounds"] == 0 and joined.summary["num-clients-evaluated"] == 3
    model = kept[2] / "client-2.safetensors"
    assert load(model).meta["initial-model"] == str(out)
    images = write_images(mnist, tmp_path / "images", 3)
    command = [sys.executable, "-m", "pfedgm_app.client.predict", str(model), str(images), "--json"]
    predicted = subprocess.run(command, capture_output=True, text=True, check=True)
    classes = [json.loads(line)["class"] for line in predicted.stdout.splitlines()]
    assert len(classes) == 3 and set(classes) <= set("0123456789")


def test_a_presets_conf_file_runs_through_flwr_run_as_it_is(flower_env, tmp_path, cifar10):
    """`flwr run . --run-config conf/smoke-offline.toml`, the file alone as Flower takes it:
    a copy with an output-dir added, as the app's notice advises for a changed key."""
    copy = tmp_path / "smoke.toml"
    text = (Path(__file__).resolve().parents[1] / "conf" / "smoke-offline.toml").read_text()
    copy.write_text(text + f'output-dir = "{tmp_path / "out"}"\n')
    run = run_app({}, 4, flower_env, timeout=900, config_file=copy)
    _check_outputs(run, "pfedgm", 4, 2)

"""What a run does with its data, on real data, with the in-process driver (the same results as
through `flwr run`: test_inprocess): MNIST in EMNIST's shape, 64 px TinyImageNet images,
CIFAR-100S's corruptions from its preset, the generalization protocol. (Through the engine:
test_e2e.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from pfedgm_app.data import Protocol, client_indices
from pfedgm_app.records.initial_model import load_state
from pfedgm_app.records.run_folder import RunFolder
from pfedgm_engine.inprocess import run_inprocess

pytestmark = pytest.mark.slow

# A seeded subset of the pool keeps each run short; the protocol is otherwise the paper's.
SMALL = {"num-server-rounds": 2, "local-epochs": 2, "finetune-epochs": 2, "pool-size": 4000}


def check_folder(summary, output_dir, method, num_clients, rounds):
    """A finished run's summary and folder agree on its method, clients and rounds."""
    out = RunFolder(Path(output_dir))
    assert summary["method"] == method and summary["format-version"] == 2
    assert summary["num-clients"] == num_clients == summary["num-clients-evaluated"]
    assert summary["rounds"] == rounds
    assert 0 <= summary["std-accuracy"] <= 100 and 0 <= summary["mean-accuracy"] <= 100
    assert out.read_config()["method"] == method
    assert [r["round"] for r in out.read_rounds()] == list(range(1, rounds + 1))
    clients = out.read_clients()
    assert sorted(c["partition-id"] for c in clients) == list(range(num_clients))
    assert all(0 <= c["accuracy"] <= 100 for c in clients)  # percent
    weights = load_state(out.global_model)
    assert "generator.features.0.weight" in weights
    return summary


def _run_inprocess(tmp_path, dataset, num_clients, **run_config):
    """A run of `num_clients` in process, its folder `tmp_path/out`: its summary."""
    cfg = {"output-dir": str(tmp_path / "out"), "client-threads": 1, **run_config}
    if dataset is not None:
        cfg["dataset"] = str(dataset)
    return run_inprocess(cfg, num_clients)[0]


def test_emnist_shaped_data_learns_with_pfedgm(tmp_path, mnist):
    """The 1x28x28 path (EMNIST's CNN) through pFedGM, on the local MNIST copy: two rounds
    take the clients' mean accuracy far above chance (10 %)."""
    summary = _run_inprocess(tmp_path, mnist, 4, method="pfedgm", **SMALL)
    check_folder(summary, tmp_path / "out", "pfedgm", 4, 2)
    assert summary["mean-accuracy"] > 50, summary


def test_64px_data_runs_pfedgm_end_to_end(tmp_path, tinyimagenet):
    """TinyImageNet (64 px, grayscale images among color ones) through the app with the
    dropout model: every client is personalized and evaluated, and the global model is the
    512-d one with a 200-class Gaussian head. (Two rounds on 2,000 images do not learn 200
    classes: learning is checked on MNIST above and on CIFAR-10 through `flwr run`.)"""
    cfg = {**SMALL, "fraction-train": 1.0, "pool-size": 2000, "dirichlet-alpha": 0.1}
    summary = _run_inprocess(tmp_path, tinyimagenet, 4, method="pfedgm", **cfg)
    check_folder(summary, tmp_path / "out", "pfedgm", 4, 2)
    weights = load_state(RunFolder(tmp_path / "out").global_model)
    assert weights["head.mu"].shape == weights["head.A"].shape == (200, 512)
    assert weights["generator.features.11.weight"].shape == (512, 3136)


def test_cifar100s_preset_runs_pfedgm_with_corrupted_clients(tmp_path, cifar100):
    """CIFAR-100S from the offline preset of its table cell, shortened by key=value
    overrides: 100 classes, clients 2j and 2j+1 share a corruption pair, and the summary
    reports accuracy per corruption. (A preset's file through `flwr run`: the next test.)"""
    cfg = {**SMALL, "preset": "cifar100s-dir05-100c-offline", "fraction-train": 1.0}
    summary = _run_inprocess(tmp_path, None, 4, **cfg)
    check_folder(summary, tmp_path / "out", "pfedgm", 4, 2)
    assert Path(summary["dataset"]).resolve() == cifar100.resolve()  # shared:cifar100, found
    assert load_state(RunFolder(tmp_path / "out").global_model)["head.mu"].shape == (100, 128)
    assert summary["accuracy-by-type"].keys() == {"motion_blur"}  # pairs 0 and 1: severities 1, 2
    assert summary["accuracy-by-type"]["motion_blur"]["clients"] == 4


def test_generalization_protocol_trains_seen_clients_only(tmp_path, cifar10):
    """protocol=generalization, 4 clients: client 0 (original, clean) alone trains; every
    client is personalized, the new ones (1 clean, 2 and 3 CIFAR-10S) make the headline
    accuracy, all are reported by type; eval-every=1 adds round 1's evaluation to rounds.jsonl
    and the plot, whose last line holds the final one."""
    cfg = {**SMALL, "protocol": "generalization", "fraction-train": 0.6, "eval-every": 1}
    summary = _run_inprocess(tmp_path, cifar10, 4, method="pfedgm", **cfg)
    out = RunFolder(tmp_path / "out")
    rounds = out.read_rounds()
    protocol = Protocol(str(cifar10), 4, 0.5, pool_size=4000, kind="generalization")
    seen_train_size = len(client_indices(protocol)[0][0])
    assert [(r["num-clients"], r["num-examples-total"]) for r in rounds] == [
        (1, seen_train_size)
    ] * 2
    assert "personalized-accuracy" in rounds[0]  # the headline clients' too
    assert rounds[1]["personalized-accuracy"] == summary["mean-accuracy"]  # Phase 2's, final
    clients = {int(c["partition-id"]): c for c in out.read_clients()}
    assert sorted(clients) == [0, 1, 2, 3]
    by_type = summary["accuracy-by-type"]
    assert {k: v["clients"] for k, v in by_type.items()} == {"original": 1, "clean": 1,
                                                             "motion_blur": 2}  # fmt: skip
    new = [clients[i]["accuracy"] * clients[i]["num-test"] for i in (1, 2, 3)]
    tests = sum(clients[i]["num-test"] for i in (1, 2, 3))
    assert summary["mean-accuracy"] == pytest.approx(sum(new) / tests)  # both in percent
    assert out.plot.stat().st_size > 1000

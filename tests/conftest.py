"""Shared fixtures: the real data in ../shared/data and a private Flower home for e2e runs."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from pfedgm_cli.flwr_calls import free_port, offline_env
from pfedgm_cli.superlink import stop_local_superlink
from pfedgm_engine.inprocess import run_identity

ROOT = Path(__file__).resolve().parents[1]
# PFEDGM_SHARED_DATA: a copy elsewhere (a GPU machine gets one beside the repo, see benchmarks/)
SHARED_DATA = Path(os.environ.get("PFEDGM_SHARED_DATA") or ROOT.parent / "shared" / "data")


def _data(name: str) -> Path:
    path = SHARED_DATA / name
    if not (path / "train.parquet").exists():
        reason = f"real data not found at {path} (expected ../shared/data beside the project)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason + "; under CI this is a failure")
        pytest.skip(reason)
    return path


def _data_fixture(name: str, doc: str):
    def fixture() -> Path:
        return _data(name)

    fixture.__doc__ = doc
    return pytest.fixture(scope="session", name=name)(fixture)


cifar10 = _data_fixture("cifar10", "Local copy of uoft-cs/cifar10 (parquet, hub schema).")
mnist = _data_fixture("mnist", "Local copy of ylecun/mnist (grayscale 28x28).")
emnist = _data_fixture("emnist", "Real EMNIST ByClass (62 classes; its official test split).")
cifar100 = _data_fixture("cifar100", "Local copy of uoft-cs/cifar100 (`fine_label`, 100 classes).")
tinyimagenet = _data_fixture(
    "tinyimagenet", "Local copy of zh-plus/tiny-imagenet (64x64, 200 classes, some grayscale)."
)


@pytest.fixture(scope="session")
def flower_env(tmp_path_factory):
    """Offline environment with its own FLWR_HOME and ports; stops its SuperLink at the end.

    Its simulations join one Ray head started here (RAY_ADDRESS, as docs/running.md deploys a
    cluster) declaring this machine's CPUs, as the private instance each run would start
    does; what it saves is that start, about a quarter of a short run's time."""
    home = tmp_path_factory.mktemp("flwr-home")
    with ray_head(os.cpu_count() or 1) as address:
        yield {**offline_env(home), "RAY_ADDRESS": address}
        stop_local_superlink(home)


@contextmanager
def ray_head(cpus: int) -> Iterator[str]:
    """A Ray head on loopback declaring `cpus` CPUs (a logical count), up until the block
    ends: its address. A private port and a short temp dir (Ray's socket paths must stay under
    the OS's 107 characters); `ray start --block` stops the node's processes with it."""
    temp, port = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp")), free_port()
    head = subprocess.Popen(
        ["ray", "start", "--head", f"--port={port}", f"--temp-dir={temp}", f"--num-cpus={cpus}",
         "--include-dashboard=false", "--disable-usage-stats", "--block"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    address = f"127.0.0.1:{port}"
    try:
        for _ in range(120):  # the head is up once `ray status` reaches it
            if subprocess.run(["ray", "status", "--address", address],
                              capture_output=True).returncode == 0:  # fmt: skip
                break
            time.sleep(1)
        else:
            raise RuntimeError(f"no Ray head answered at {address} in 120 s (`ray start`)")
        yield address
    finally:
        head.terminate()
        head.wait(timeout=60)
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture(scope="session")
def every_method_run(mnist, tmp_path_factory):
    """Every method through the real ClientApp handlers in process, as docs/privacy.md is made
    (`devtools.reference.privacy.record_replies`: two MNIST clients, two rounds): its folder (one
    output-dir per method), {method: its replies}, {method: its model}."""
    from devtools.reference.privacy import record_replies

    workdir = tmp_path_factory.mktemp("every-method")
    replies, models = record_replies(mnist, workdir)
    return workdir, replies, models


@pytest.fixture
def fresh_caches(tmp_path, monkeypatch):
    """A disk cache of the test's own and empty in-memory caches, as a new process has."""
    from pfedgm_app.data import cache

    monkeypatch.setenv("PFEDGM_CACHE_DIR", str(tmp_path / "cache"))
    cache._CLIENTS.clear()
    yield
    cache._CLIENTS.clear()


@pytest.fixture
def task_identity():
    """Messages can only be built inside a run; give this process an identity for the test."""
    with run_identity():
        yield


@pytest.fixture(scope="module")
def _one_thread():
    """The Gaussian head's tests (`pytest.mark.usefixtures`): their tensors are tiny, and one
    intra-op thread avoids oversubscription on busy hosts."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture
def _online(monkeypatch):
    """Hub ids pass `check` in the CLI's tests (`pytest.mark.usefixtures`; CI runs offline,
    where they would not: the test of that sets HF_HUB_OFFLINE itself)."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)


def pytest_addoption(parser):
    parser.addoption(
        "--exhaustive", action="store_true", help="also run the tests marked exhaustive"
    )


def pytest_collection_modifyitems(config, items):
    """A run through the real engine is slow: the fast tier (`-m "not slow"`) leaves it out.
    An exhaustive test repeats, for one more case, what a kept test already proves for a case
    that exercises the same code paths: skipped unless `--exhaustive`, to keep the suite short."""
    exhaustive = config.getoption("--exhaustive")
    for item in items:
        if item.get_closest_marker("e2e"):
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("exhaustive") and not exhaustive:
            item.add_marker(pytest.mark.skip(reason="exhaustive: run with --exhaustive"))

"""Shared fixtures: the real data in ../shared/data and a private Flower home for e2e runs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from devtools.launch import offline_env, stop_local_superlink

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"


def _data(name: str) -> Path:
    path = SHARED_DATA / name
    if not (path / "train.parquet").exists():
        reason = f"real data not found at {path} (expected ../shared/data beside the project)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason + "; under CI this is a failure")
        pytest.skip(reason)
    return path


@pytest.fixture(scope="session")
def cifar10() -> Path:
    """Local copy of uoft-cs/cifar10 (parquet, hub schema)."""
    return _data("cifar10")


@pytest.fixture(scope="session")
def mnist() -> Path:
    """Local copy of ylecun/mnist (parquet, hub schema)."""
    return _data("mnist")


@pytest.fixture(scope="session")
def flower_env(tmp_path_factory):
    """Offline environment with its own FLWR_HOME and ports; stops its SuperLink at the end."""
    home = tmp_path_factory.mktemp("flwr-home")
    yield offline_env(home)
    stop_local_superlink(home)


@pytest.fixture(scope="session")
def cifar100() -> Path:
    """Local copy of uoft-cs/cifar100 (parquet, hub schema; `fine_label`, 100 classes)."""
    return _data("cifar100")


@pytest.fixture(scope="session")
def tinyimagenet() -> Path:
    """Local copy of zh-plus/tiny-imagenet (64x64, 200 classes, some images grayscale)."""
    return _data("tinyimagenet")

"""A simulation on a Ray cluster that is already running (docs/running.md): Flower's engine
calls `ray.init()`, which joins the cluster named by RAY_ADDRESS instead of starting one."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from pfedgm_app.paper.flwr_cli import free_port, offline_env, run_app

pytestmark = pytest.mark.e2e


def _drivers(temp: Path) -> set[Path]:
    """The drivers the cluster has seen: each process that joined it leaves its log."""
    return set(temp.glob("session_latest/logs/python-core-driver-*.log"))


def test_a_simulation_runs_on_a_ray_cluster_started_beforehand(tmp_path, mnist):
    # a short temp dir: Ray's socket paths must stay under the OS's 107 characters
    temp = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))
    port = free_port()
    head = subprocess.Popen(
        ["ray", "start", "--head", f"--port={port}", f"--temp-dir={temp}", "--num-cpus=2",
         "--include-dashboard=false", "--disable-usage-stats", "--block"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    home = tmp_path / "flwr-home"
    env = {**offline_env(home), "RAY_ADDRESS": f"127.0.0.1:{port}"}
    try:
        for _ in range(120):  # the head is up once `ray status` reaches it
            status = subprocess.run(["ray", "status", "--address", env["RAY_ADDRESS"]],
                                    capture_output=True)  # fmt: skip
            if status.returncode == 0:
                break
            time.sleep(1)
        before = _drivers(temp)
        cfg = {"method": "fedavg", "num-server-rounds": 1, "local-epochs": 1, "pool-size": 600,
               "fraction-train": 1.0, "client-threads": 1, "dataset": str(mnist),
               "output-dir": str(tmp_path / "out")}  # fmt: skip
        run = run_app(cfg, 2, env, timeout=600)
        assert run.ok, run.log[-3000:]
        joined = _drivers(temp) - before
        assert joined, "the simulation did not join the running cluster"
        assert any("ClientAppActor" in p.read_text(errors="replace") for p in joined)
    finally:
        from devtools.launch import stop_local_superlink

        stop_local_superlink(home)
        head.terminate()  # `ray start --block` stops the node's processes with it
        head.wait(timeout=60)
        shutil.rmtree(temp, ignore_errors=True)

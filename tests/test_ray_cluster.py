"""A simulation on a Ray cluster that is already running (docs/running.md): Flower's engine
calls `ray.init()`, which joins the cluster named by RAY_ADDRESS instead of starting one, and
the cluster's resources, not this machine's, bound the ClientApps.

The proof is the run's outcome, not Ray's logs: each ClientApp asks for more CPUs than this
machine has, which only the running cluster (declaring that many) can give. A private Ray
instance would hold at most this machine's CPUs, no ClientApp would fit and the run would fail
(Flower's "ActorPool is empty"); completed, the run can only have run on the cluster.
"""

from __future__ import annotations

import os

import pytest

from pfedgm_cli.flwr_calls import offline_env
from pfedgm_cli.flwr_cli import run_app
from pfedgm_cli.superlink import stop_local_superlink
from tests.conftest import ray_head

pytestmark = pytest.mark.e2e


def test_a_simulation_runs_on_a_ray_cluster_started_beforehand(tmp_path, mnist):
    # more CPUs than a private instance could have: the cluster declares them (a logical count)
    cpus = (os.cpu_count() or 1) + 1
    home = tmp_path / "flwr-home"
    with ray_head(cpus) as address:
        env = {**offline_env(home), "RAY_ADDRESS": address}
        try:
            cfg = {"method": "fedavg", "num-server-rounds": 1, "local-epochs": 1,
                   "pool-size": 600, "fraction-train": 1.0, "client-threads": 1,
                   "dataset": str(mnist), "output-dir": str(tmp_path / "out")}  # fmt: skip
            run = run_app(cfg, 2, env, cpus_per_client=cpus, timeout=600)
            assert run.ok, run.log[-3000:]
            # both ClientApps trained (no reply dropped) and were evaluated
            assert (
                run.summary["dropped-replies"] == [] and run.summary["num-clients-evaluated"] == 2
            )
        finally:
            stop_local_superlink(home)

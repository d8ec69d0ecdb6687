"""The launcher's process handling, on a stand-in process tree (no Flower needed)."""

from __future__ import annotations

import subprocess
import time

from devtools.launch import run_config_arg, stop_local_superlink, superlink_tree


def test_stop_local_superlink_kills_the_whole_tree(tmp_path):
    """A 'flower-superlink' naming this FLWR_HOME and its child both go; others are untouched."""
    home = tmp_path / "flwr-home"
    script = f"sleep 300 & wait  # flower-superlink --database {home}/local-superlink/state.db"
    root = subprocess.Popen(["bash", "-c", script])
    bystander = subprocess.Popen(["sleep", "300"])
    try:
        for _ in range(50):
            tree = superlink_tree(home)
            if len(tree) >= 2:
                break
            time.sleep(0.1)
        assert root.pid in tree and len(tree) >= 2 and bystander.pid not in tree
        assert stop_local_superlink(home) == len(tree)
        root.wait(timeout=10)
        assert superlink_tree(home) == set() and bystander.poll() is None
    finally:
        for proc in (root, bystander):
            proc.kill()


def test_run_config_arg_quotes_strings():
    assert run_config_arg({"method": "fedavg", "lambda": 1.0, "seed": 3}) == (
        "method='fedavg' lambda=1.0 seed=3"
    )

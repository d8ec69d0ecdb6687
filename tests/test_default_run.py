"""A bare `pfedgm run`'s environment: the variables a run needs, a managed SuperLink started with
others restarted when it runs nothing and refused when it does, read from a real process."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from pfedgm_cli import default_run
from pfedgm_cli.default_run import differences, run_env, superlink_env, superlink_ready


def test_the_run_gets_the_variables_it_needs_and_keeps_the_users():
    env = run_env({"FLWR_TELEMETRY_ENABLED": "1", "PATH": "/bin"})
    assert env["FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION"] == "1"
    assert env["FLWR_TELEMETRY_ENABLED"] == "1" and env["PATH"] == "/bin"


def test_a_bare_run_reads_the_hub_where_no_local_copy_is_found(monkeypatch, tmp_path):
    monkeypatch.setattr(default_run, "shared_parquet", lambda name: None)
    run_config, federation = default_run.default_run(tmp_path)
    assert run_config[0].startswith(f"preset='smoke' output-dir='{tmp_path}/outputs/smoke-")
    assert federation == ["num-supernodes=4"]


@pytest.fixture
def superlink(tmp_path):
    """A process standing for a managed SuperLink of `tmp_path` (its command line names
    flower-superlink and a file in that FLWR_HOME), started with HF_HUB_OFFLINE=1."""
    code = "import time; time.sleep(60)"
    cmd = [sys.executable, "-c", code, "flower-superlink", "--log-file", str(tmp_path / "log")]
    proc = subprocess.Popen(cmd, env={"HF_HUB_OFFLINE": "1", "PATH": "/bin"})
    deadline = time.monotonic() + 10
    while superlink_env(tmp_path) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    yield proc
    proc.kill()
    proc.wait()


def test_a_running_superlinks_environment_is_read_from_its_process(superlink, tmp_path):
    assert superlink_env(tmp_path) == {"HF_HUB_OFFLINE": "1", "PATH": "/bin"}
    assert superlink_env(tmp_path / "elsewhere") is None


def test_a_superlink_of_another_environment_is_restarted_when_idle_and_refused_when_busy(
    superlink, tmp_path
):
    env = run_env({"HF_HUB_OFFLINE": "1"})
    changed = differences(env, superlink_env(tmp_path))
    assert changed == ["FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 (the SuperLink's: unset)"]
    with pytest.raises(RuntimeError, match=r"runs run 5 \(running\): wait for it to end"):
        superlink_ready(tmp_path, env, lambda: ["run 5 (running)"])
    assert superlink.poll() is None  # a busy SuperLink is left running
    note = superlink_ready(tmp_path, env, lambda: [])
    assert note == f"restarted the managed SuperLink of {tmp_path}: {changed[0]}"
    assert superlink.wait(timeout=15) is not None and superlink_env(tmp_path) is None


def test_a_superlink_of_the_same_environment_is_left_alone(superlink, tmp_path):
    """Only the watched variables count: PATH differs, and nothing is restarted."""
    env = {"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin"}
    assert superlink_ready(tmp_path, env, lambda: ["run 5 (running)"]) is None
    assert superlink.poll() is None

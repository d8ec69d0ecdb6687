"""Flower's CLI as subprocesses: the `flwr` command (looked up on PATH), the JSON objects its
`--format json` answers hold, and an environment for offline runs on free local ports.

What `flwr` prints is read, not trusted: an answer that is not JSON, lacks a key or lists no
run is an empty dict here, never an exception.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from pathlib import Path


def offline_env(flwr_home: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """An environment (`base`, else this process's) for offline runs in `flwr_home`, on free
    local ports: no dependency installation, no telemetry, `HF_HUB_OFFLINE=1` unless set."""
    env = dict(os.environ if base is None else base)
    env.update(
        FLWR_HOME=str(flwr_home),
        FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="1",
        FLWR_TELEMETRY_ENABLED="0",
        HF_HUB_OFFLINE=env.get("HF_HUB_OFFLINE", "1"),
    )
    env.setdefault("FLWR_LOCAL_SUPERLINK_HTTP_API_PORT", str(free_port()))
    env.setdefault("FLWR_LOCAL_CONTROL_API_PORT", str(free_port()))
    return env


def flwr_json(stdout: str) -> dict:
    """The JSON object a `flwr ... --format json` printed, after any progress line it prints
    first; {} when there is none, so that a SuperLink's odd answer is a missing key, not a crash.
    """
    try:
        answer = json.loads(stdout[stdout.index("{") :])
    except (ValueError, RecursionError):
        return {}
    return answer if isinstance(answer, dict) else {}


def parse_listed(stdout: str, run_id: str) -> dict:
    """The run `run_id` in what `flwr list --run-id RUN_ID --format json` printed: `status`,
    `status-details`, ...; {} when the answer does not hold it (no JSON, `success` false, no
    `runs`, another run), as from a SuperLink that does not know the run."""
    runs = flwr_json(stdout).get("runs")
    if not isinstance(runs, list):
        return {}
    mine = [r for r in runs if isinstance(r, dict) and str(r.get("run-id", run_id)) == run_id]
    return mine[0] if mine and isinstance(mine[0].get("status"), str) else {}


def flwr_command() -> str:
    """The `flwr` executable on PATH (Flower's own commands, e.g. `flower-superlink`, are
    looked up there too, so an environment that is not activated is refused here)."""
    if found := shutil.which("flwr"):
        return found
    raise ValueError(
        "flwr: no such command on PATH; activate the environment the app is installed in "
        "(pip install -e .), or use --engine inprocess"
    )


def flwr(
    args: list[str], env: dict[str, str], check: bool = True, timeout: float | None = None
) -> subprocess.CompletedProcess:
    """`flwr ARGS...` in `env`, its output captured as text (`check`: raise on a non-zero
    exit)."""
    cmd = [flwr_command(), *args]
    return subprocess.run(
        cmd, env=env, capture_output=True, text=True, check=check, timeout=timeout
    )


def free_port() -> int:
    """A TCP port of 127.0.0.1 that is free now (for a managed SuperLink of its own)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

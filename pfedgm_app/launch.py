"""Run the app through the real Flower engine from Python (tests, benchmarks, comparisons).

`flwr run` returns as soon as the run is submitted, and `flwr run --stream` exits 0 even when
the run fails, so `run_app` submits with `--format json`, polls `flwr list` until the run is
finished, and returns its status, its log and the `summary.json` it wrote.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

APP_DIR = Path(__file__).resolve().parent.parent


@dataclass
class FlowerRun:
    """The outcome of one `flwr run`."""

    run_id: str
    status: str
    log: str
    output_dir: Path | None
    summary: dict[str, Any] = field(default_factory=dict)
    wall_seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "finished:completed"


def offline_env(flwr_home: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for offline runs in an own FLWR_HOME, on free local ports."""
    env = dict(os.environ if base is None else base)
    env.update(
        FLWR_HOME=str(flwr_home),
        FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="1",
        FLWR_TELEMETRY_ENABLED="0",
        HF_HUB_OFFLINE=env.get("HF_HUB_OFFLINE", "1"),
    )
    env.setdefault("FLWR_LOCAL_SUPERLINK_HTTP_API_PORT", str(_free_port()))
    env.setdefault("FLWR_LOCAL_CONTROL_API_PORT", str(_free_port()))
    return env


def run_config_arg(run_config: dict[str, Any]) -> str:
    """{'method': 'fedavg', 'lambda': 1.0} -> "method='fedavg' lambda=1.0" for --run-config."""
    parts = []
    for key, value in run_config.items():
        if isinstance(value, str):
            parts.append(f"{key}='{value}'")
        elif isinstance(value, bool):
            parts.append(f"{key}={str(value).lower()}")
        else:
            parts.append(f"{key}={value!r}")
    return " ".join(parts)


def run_app(
    run_config: dict[str, Any],
    num_supernodes: int,
    env: dict[str, str],
    cpus_per_client: float = 1,
    timeout: float = 3600,
    app_dir: Path = APP_DIR,
) -> FlowerRun:
    """Submit a simulation run, wait until it finishes, collect status, log and summary."""
    started = time.time()
    federation = f"num-supernodes={num_supernodes} client-resources-num-cpus={cpus_per_client}"
    cmd = ["flwr", "run", str(app_dir), "--run-config", run_config_arg(run_config)]
    cmd += ["--federation-config", federation, "--format", "json"]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    try:
        submitted = json.loads(out.stdout[out.stdout.index("{") :])
    except ValueError:
        submitted = {}
    if not submitted.get("success"):
        raise RuntimeError(f"flwr run failed to submit:\n{out.stdout}\n{out.stderr}")
    run_id = str(submitted["run-id"])
    status = _wait(run_id, env, started + timeout)
    log = _flwr(["log", run_id, "--show"], env, check=False).stdout
    output_dir = _output_dir(log)
    summary_path = output_dir / "summary.json" if output_dir else None
    summary = json.loads(summary_path.read_text()) if summary_path and summary_path.exists() else {}
    return FlowerRun(run_id, status, log, output_dir, summary, time.time() - started)


def _wait(run_id: str, env: dict[str, str], deadline: float) -> str:
    # Each `flwr list` is a new Python process (~1 s of CPU): poll sparsely, the run shares
    # the machine's cores with this loop.
    pause = 1.0
    while True:
        listing = json.loads(_flwr(["list", "--run-id", run_id, "--format", "json"], env).stdout)
        status = listing["runs"][0]["status"]
        if status.startswith("finished"):
            return status
        if time.time() > deadline:
            _flwr(["stop", run_id], env, check=False)
            return f"timeout ({status})"
        time.sleep(pause)
        pause = min(pause * 1.5, 10.0)


def _flwr(args: list[str], env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["flwr", *args], env=env, capture_output=True, text=True, check=check)


def _output_dir(log: str) -> Path | None:
    marker = "outputs in "
    for line in log.splitlines():
        if "pFedGM app:" in line and marker in line:
            return Path(line.split(marker, 1)[1].strip())
    return None


def stop_local_superlink(flwr_home: Path) -> int:
    """Stop the managed SuperLink that `flwr run` started for `flwr_home` (or any FLWR_HOME below
    that folder), with every process it spawned (SuperExec, the simulation, its Ray cluster).
    Returns how many processes were signalled.
    """
    doomed = superlink_tree(flwr_home)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in doomed:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        if sig == signal.SIGTERM:
            time.sleep(2)
    return len(doomed)


def superlink_tree(flwr_home: Path) -> set[int]:
    """PIDs of the managed SuperLink(s) whose command line names `flwr_home`, and of every
    process below them. The whole tree is collected first: killed parents re-parent orphans.
    """
    marker = str(Path(flwr_home))
    parents = _parent_pids()
    roots = [pid for pid in parents if "flower-superlink" in (c := _cmdline(pid)) and marker in c]
    tree, frontier = set(roots), list(roots)
    while frontier:
        pid = frontier.pop()
        children = [c for c, p in parents.items() if p == pid and c not in tree]
        tree.update(children)
        frontier.extend(children)
    return tree


def _parent_pids() -> dict[int, int]:
    parents = {}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                stat = (proc / "stat").read_text()
                parents[int(proc.name)] = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    return parents


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

"""Run the app through the real Flower engine from Python: `flwr run`, followed to its end.

Flower's public CLI only (`flwr run`, `flwr log`, `flwr list`, `flwr stop`, as subprocesses):
the grid runner (`pfedgm-paper`), the tests and the benchmarks submit runs with `run_app`.

`flwr run` returns as soon as the run is submitted, and `flwr run --stream` exits 0 even when
the run fails, so `run_app` submits with `--format json`, follows the run's log stream until
the run is finished, asks `flwr list` for its status, and returns its status, its log and the
`summary.json` it wrote in its `output-dir` (a fresh temporary folder when the run-config names
none). Runs go to the simulation engine, or to a named federation of `$FLWR_HOME/config.toml`
(e.g. real SuperLink and SuperNode processes: `devtools.deployment`).

What `flwr` prints is read, not trusted: an answer that is not JSON, lacks a key or lists no
run raises nothing here. A SuperLink that was restarted, or lost its database, no longer knows
the run: `run_app` then returns status `unknown` and one line saying where the run's files are
and how to resume it.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pfedgm_app.records.run_folder import RunFolder

# The project folder (pyproject.toml) when the package runs from a checkout or an editable
# install; an installed copy has none, and its users name the folder (`app_dir`).
APP_DIR = Path(__file__).resolve().parents[1]
# A run's status when `flwr list` does not know it; said so after this many answers in a row,
# as one may fail while a SuperLink restarts.
UNKNOWN, UNKNOWN_ANSWERS = "unknown", 3


@dataclass
class FlowerRun:
    """The outcome of one `flwr run` (`run_app`)."""

    run_id: str
    """The SuperLink's id of the run (`flwr log RUN_ID`, `flwr list --run-id RUN_ID`)."""
    status: str
    """`flwr list`'s last status (`finished:completed`, ...), `unknown` if it lost the run."""
    log: str
    """The run's whole log (`flwr log RUN_ID --show`)."""
    output_dir: Path
    """The run's `output-dir`, resolved (`run_folder.RunFolder` reads its files)."""
    summary: dict[str, Any] = field(default_factory=dict)
    """Its `summary.json` as `RunFolder.read_summary` reads it; {} when the run did not finish."""
    wall_seconds: float = 0.0
    """From submitting to the end, including the SuperLink's start."""
    details: str = ""
    """Why a run that did not complete ended: the SuperLink's `status-details`, or one line."""

    @property
    def ok(self) -> bool:
        """The run completed (a failed run exits `flwr run` with 0 too)."""
        return self.status == "finished:completed"


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


def run_config_arg(run_config: dict[str, Any]) -> str:
    """{'method': 'fedavg', 'lambda': 1.0} -> "method='fedavg' lambda=1.0" for --run-config."""

    def toml(value: Any) -> str:
        if isinstance(value, str):
            return f"'{value}'"
        return str(value).lower() if isinstance(value, bool) else repr(value)

    return " ".join(f"{key}={toml(value)}" for key, value in run_config.items())


def run_app(
    run_config: dict[str, Any],
    num_supernodes: int,
    env: dict[str, str],
    cpus_per_client: float = 1,
    timeout: float = 3600,
    gpus_per_client: float = 0,
    app_dir: Path = APP_DIR,
    federation: str | None = None,
) -> FlowerRun:
    """Submit a run of the app in `app_dir` (this app by default; any Flower app folder)
    with `run_config` (keys of its `[tool.flwr.app.config]`; `output-dir` a fresh temporary
    folder when empty), wait until it finishes or `timeout` seconds pass, and return its
    status, log and summary (`FlowerRun`; raises RuntimeError when it could not be submitted).

    Without `federation`, a simulation of `num_supernodes` SuperNodes, each ClientApp given
    `cpus_per_client` CPUs and `gpus_per_client` of a GPU; with it, the named
    federation of `$FLWR_HOME/config.toml` (e.g. one from `start_deployment`). `env` is the
    environment of the `flwr` commands, e.g. `offline_env(home)`: it sets FLWR_HOME, whose
    managed SuperLink runs the app.
    """
    started = time.time()
    if not run_config.get("output-dir"):
        run_config = {**run_config, "output-dir": tempfile.mkdtemp(prefix="pfedgm-run-")}
    output_dir = Path(run_config["output-dir"]).resolve()
    cmd = ["run", str(app_dir)]
    if federation is None:
        sim = f"num-supernodes={num_supernodes} client-resources-num-cpus={cpus_per_client}"
        if gpus_per_client:  # several ClientApps share a GPU: 1 / gpus_per_client at a time
            sim += f" client-resources-num-gpus={gpus_per_client}"
        cmd += ["--federation-config", sim]
    else:
        cmd += [federation]
    cmd += ["--run-config", run_config_arg(run_config), "--format", "json"]
    run_id = submitted_run(flwr(cmd, env, check=False, timeout=300))
    link = [] if federation is None else [federation]  # where `flwr list/log/stop` must look
    status = _wait(run_id, env, started + timeout, link, output_dir)
    log = flwr(["log", run_id, *link, "--show"], env, check=False).stdout
    folder = RunFolder(output_dir)
    summary = folder.read_summary() if folder.finished else {}
    if status == UNKNOWN:
        details = unknown_run(run_id, output_dir)
    else:
        details = "" if status == "finished:completed" else _details(run_id, link, env)
    return FlowerRun(run_id, status, log, output_dir, summary, time.time() - started, details)


def submitted_run(out: subprocess.CompletedProcess) -> str:
    """The run id `flwr run --format json` answered; else RuntimeError with Flower's reason."""
    submitted = flwr_json(out.stdout)
    run_id = submitted.get("run-id")
    if submitted.get("success") is True and isinstance(run_id, int | str) and run_id != "":
        return str(run_id)
    said = str(submitted.get("error-message") or out.stderr or out.stdout).splitlines()
    why = ([line.strip() for line in said if line.strip()] or ["no output"])[-1]
    if submitted.get("success") is True:
        why = "it answered with no run-id"
    raise RuntimeError(f"flwr run did not submit the run: {why}")


def unknown_run(run_id: str, output_dir: Path) -> str:
    """Why a run has status `UNKNOWN`, and what to do, in one line."""
    why = f"run {run_id} is unknown to this SuperLink (it was restarted, or lost its database)"
    if RunFolder(output_dir).finished:
        return f"{why}, but it finished: its summary.json is in {output_dir}"
    return (
        f"{why}; what it wrote is in {output_dir}: run it again with resume=true to "
        "continue from its last checkpoint"
    )


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


def _listed(run_id: str, link: list[str], env: dict[str, str]) -> dict:
    """The run as `flwr list` shows it (`parse_listed`)."""
    cmd = ["list", *link, "--run-id", run_id, "--format", "json"]
    return parse_listed(flwr(cmd, env, check=False).stdout, run_id)


def _details(run_id: str, link: list[str], env: dict[str, str]) -> str:
    """Why the SuperLink ended a run (e.g. an expired run, an exception outside the app),
    which its log does not always say."""
    details = _listed(run_id, link, env).get("status-details", "")
    return details if isinstance(details, str) else ""


def _wait(
    run_id: str, env: dict[str, str], deadline: float, link: list[str], output_dir: Path
) -> str:
    """Wait until the run is finished; return its status.

    Each `flwr list` is a new Python process, about 1 s of CPU: every 10 s that is 5% of a
    2-core machine taken from the run being measured. So the wait follows the run's log
    stream (`flwr log RUN_ID`), one process that sleeps until the SuperLink ends the stream
    when the run finishes (the SuperLink looks every 0.5 s), and asks `flwr list` for the
    status then. A run that fails before its first round is seen within a second, not at the
    next of a growing series of polls. Should the stream end while the run goes on (a dropped
    connection), the wait polls as `_poll` does, until the deadline.
    """
    stream = _follow(run_id, link, env)
    try:
        stream.wait(timeout=max(deadline - time.time(), 0.0))
    except subprocess.TimeoutExpired:
        pass
    finally:
        stream.kill()  # a no-op once it has ended
        stream.wait()
    return _poll(run_id, env, deadline, link, output_dir)


def _follow(run_id: str, link: list[str], env: dict[str, str]) -> subprocess.Popen:
    """`flwr log RUN_ID`: a process that ends when the run does (its output is not needed:
    `run_app` fetches the whole log afterwards)."""
    return subprocess.Popen(
        [flwr_command(), "log", run_id, *link],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _poll(
    run_id: str, env: dict[str, str], deadline: float, link: list[str], output_dir: Path
) -> str:
    """Poll `flwr list` until the run is finished, or stop it at the deadline.

    The run's own files are watched, for free: while it keeps writing to its output-dir (a
    round's row, a checkpoint) it is alive, and `flwr list` is asked only after `pause` seconds
    without a write (1 s at first, then x1.5 up to 60 s), and every half second once
    `summary.json`, its last file, is there. After the log stream has ended the first ask is
    at once, and it finds a finished run finished. A run `flwr list` does not show in
    `UNKNOWN_ANSWERS` answers in a row is `UNKNOWN`.
    """
    pause, next_list, seen, unknown = 1.0, time.time(), 0.0, 0
    folder = RunFolder(output_dir)
    while True:
        if (written := _last_write(output_dir)) > seen:  # alive: ask later
            seen, next_list = written, max(next_list, time.time() + pause)
        if time.time() >= next_list or time.time() > deadline or folder.finished:
            status = _listed(run_id, link, env).get("status", "")
            unknown = 0 if status else unknown + 1
            if unknown >= UNKNOWN_ANSWERS:
                return UNKNOWN
            if status.startswith("finished"):
                return status
            if time.time() > deadline:
                flwr(["stop", run_id, *link], env, check=False)
                return f"timeout ({status or UNKNOWN})"
            next_list, pause = time.time() + pause, min(pause * 1.5, 60.0)
        time.sleep(0.5)


def _last_write(folder: Path) -> float:
    """The latest modification time of the files directly in `folder` (0: none yet)."""
    try:
        return max((e.stat().st_mtime for e in os.scandir(folder) if e.is_file()), default=0.0)
    except OSError:
        return 0.0


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

"""Submit a run through the real Flower engine from Python and follow it to its end: the one
way this project runs an app through `flwr` (`pfedgm run`, the paper's grid, the tests, the
benchmarks and the deployment trials).

Flower's public CLI only (`flwr run`, `flwr log`, `flwr list`, `flwr stop`, as subprocesses,
`flwr_calls`). `flwr run` returns as soon as the run is submitted, and `flwr run --stream`
exits 0 even when the run fails, so a run is submitted with `--format json` (`submit`), its
log stream followed until the run is finished (`follow`, shown or not), its status asked of
`flwr list`, and a run that did not complete explained in one line (`failure`: the app's own
last error line first). `run_app` does all of it and returns the run's status, log and the
`summary.json` it wrote in its `output-dir` (a fresh temporary folder when the run-config names
none). Runs go to the simulation engine, or to a named federation of `$FLWR_HOME/config.toml`
(e.g. real SuperLink and SuperNode processes: `devtools.deployment`).

A SuperLink that was restarted, or lost its database, no longer knows the run: it ends
`unknown`, with one line saying where the run's files are and how to resume it.
"""

from __future__ import annotations

import math
import os
import subprocess
import tempfile
import time
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pfedgm_app.records.run_folder import RunFolder

from .flwr_calls import flwr, flwr_command, flwr_json, parse_listed

# The project folder (pyproject.toml) when the package runs from a checkout or an editable
# install; an installed copy has none, and its users name the folder (`app_dir`).
APP_DIR = Path(__file__).resolve().parents[1]
# A run's status when `flwr list` does not know it; said so after this many answers in a row,
# as one may fail while a SuperLink restarts.
UNKNOWN, UNKNOWN_ANSWERS = "unknown", 3
APP_LINE = "pFedGM app:"  # the app's log lines; a failed run's cause is its last ERROR one


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
    """Why a run that did not complete ended, in one line (`failure`, `unknown_run`)."""

    @property
    def ok(self) -> bool:
        """The run completed (a failed run exits `flwr run` with 0 too)."""
        return self.status == "finished:completed"


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
    config_file: Path | None = None,
) -> FlowerRun:
    """Submit a run of the app in `app_dir` (this app by default; any Flower app folder)
    with `run_config` (keys of its `[tool.flwr.app.config]`; `output-dir` a fresh temporary
    folder when empty), wait until it finishes or `timeout` seconds pass, and return its
    status, log and summary (`FlowerRun`; raises RuntimeError when it could not be submitted).

    Without `federation`, a simulation of `num_supernodes` SuperNodes, each ClientApp given
    `cpus_per_client` CPUs and `gpus_per_client` of a GPU; with it, the named
    federation of `$FLWR_HOME/config.toml` (e.g. one from `start_deployment`). `env` is the
    environment of the `flwr` commands, e.g. `offline_env(home)`: it sets FLWR_HOME, whose
    managed SuperLink runs the app. With `config_file` (a run-config TOML, `conf/*.toml`),
    that file is the `--run-config`, as it is (Flower takes a file alone): `run_config` is
    read from it, and it must name its `output-dir`.
    """
    started = time.time()
    if config_file is not None:
        run_config = tomllib.loads(config_file.read_text())
        if not run_config.get("output-dir"):
            raise ValueError(f"{config_file} names no output-dir: add output-dir = '/abs/path'")
    if not run_config.get("output-dir"):
        run_config = {**run_config, "output-dir": tempfile.mkdtemp(prefix="pfedgm-run-")}
    output_dir = Path(run_config["output-dir"]).resolve()
    simulation = []
    if federation is None:
        sim = f"num-supernodes={num_supernodes} client-resources-num-cpus={cpus_per_client}"
        if gpus_per_client:  # several ClientApps share a GPU: 1 / gpus_per_client at a time
            sim += f" client-resources-num-gpus={gpus_per_client}"
        simulation = [sim]
    given = str(config_file) if config_file is not None else run_config_arg(run_config)
    run_id = submit(app_dir, [given], simulation, federation, env)
    status = follow(run_id, federation, env, deadline=started + timeout, output_dir=output_dir)
    log = flwr(["log", run_id, *_link(federation), "--show"], env, check=False).stdout
    folder = RunFolder(output_dir)
    summary = folder.read_summary() if folder.finished else {}
    if status == UNKNOWN:
        details = unknown_run(run_id, output_dir)
    else:
        details = "" if status == "finished:completed" else failure(run_id, federation, env, log)
    return FlowerRun(run_id, status, log, output_dir, summary, time.time() - started, details)


def submit(
    app_dir: Path,
    run_config: Sequence[str],
    federation_config: Sequence[str],
    federation: str | None,
    env: dict[str, str],
) -> str:
    """Submit the app in `app_dir` with each `--run-config` and `--federation-config` value as
    given, to `federation` (a connection of `$FLWR_HOME/config.toml`; None: the local
    simulation); return the run id. RuntimeError with Flower's reason when it was not
    submitted."""
    cmd = ["run", str(app_dir), *_link(federation)]
    for value in run_config:
        cmd += ["--run-config", value]
    for value in federation_config:
        cmd += ["--federation-config", value]
    return submitted_run(flwr([*cmd, "--format", "json"], env, check=False, timeout=300))


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


def follow(
    run_id: str,
    federation: str | None,
    env: dict[str, str],
    deadline: float = math.inf,
    output_dir: Path | None = None,
    show_log: bool = False,
) -> str:
    """Wait until the run is finished, or stop it at `deadline`; return its status.

    Each `flwr list` is a new Python process, about 1 s of CPU: every 10 s that is 5% of a
    2-core machine taken from the run being measured. So the wait follows the run's log
    stream (`flwr log RUN_ID`, printed here when `show_log`), one process that sleeps until
    the SuperLink ends the stream when the run finishes (the SuperLink looks every 0.5 s),
    and asks `flwr list` for the status then. A run that fails before its first round is seen
    within a second. Should the stream end while the run goes on (a dropped connection), the
    wait polls (`_poll`), watching the run's `output_dir` where it is known.
    """
    shown = None if show_log else subprocess.DEVNULL
    stream = subprocess.Popen(
        [flwr_command(), "log", run_id, *_link(federation)],
        env=env, stdin=subprocess.DEVNULL, stdout=shown, stderr=shown,
    )  # fmt: skip
    try:
        stream.wait(timeout=None if deadline == math.inf else max(deadline - time.time(), 0.0))
    except subprocess.TimeoutExpired:
        pass
    finally:
        stream.kill()  # a no-op once it has ended
        stream.wait()
    return _poll(run_id, env, deadline, _link(federation), output_dir)


def failure(run_id: str, federation: str | None, env: dict[str, str], log: str = "") -> str:
    """Why a run did not complete, in one line: the app's last error line in its `log`
    (fetched when not given), else the SuperLink's `status-details` (an expired run, an
    exception outside the app), else where to look."""
    link = _link(federation)
    log = log or flwr(["log", run_id, *link, "--show"], env, check=False).stdout
    errors = [line for line in log.splitlines() if APP_LINE in line and "ERROR" in line]
    if errors:
        return errors[-1][errors[-1].index(APP_LINE) :].strip()
    details = _listed(run_id, link, env).get("status-details", "")
    return details if details and isinstance(details, str) else f"see flwr log {run_id} --show"


def unknown_run(run_id: str, output_dir: Path) -> str:
    """Why a run has status `UNKNOWN`, and what to do, in one line."""
    why = f"run {run_id} is unknown to this SuperLink (it was restarted, or lost its database)"
    if RunFolder(output_dir).finished:
        return f"{why}, but it finished: its summary.json is in {output_dir}"
    return (
        f"{why}; what it wrote is in {output_dir}: run it again with resume=true to "
        "continue from its last checkpoint"
    )


def unfinished_runs(env: dict[str, str]) -> list[str]:
    """The runs of the local SuperLink of `env` that have not finished, as "run ID (status)";
    [] when it answers nothing readable."""
    listed = flwr(["list", "--format", "json"], env, check=False, timeout=60).stdout
    runs = flwr_json(listed).get("runs")
    if not isinstance(runs, list):
        return []
    return [
        f"run {r.get('run-id')} ({r.get('status')})"
        for r in runs
        if isinstance(r, dict) and not str(r.get("status", "")).startswith("finished")
    ]


def outcome(output_dir: Path) -> str:
    """A completed run's result and where its files are, in one line (from its summary)."""
    try:
        summary = RunFolder(output_dir).read_summary()
        if summary["mean-accuracy"] is None:
            return f"no client could be evaluated (see clients.csv); its files: {output_dir}"
        result = (
            f"personalized accuracy {summary['mean-accuracy']:.2f} % (std "
            f"{summary['std-accuracy']:.2f}) over {summary['num-clients-evaluated']} clients"
        )
    except (OSError, ValueError, KeyError, TypeError):
        result = "no readable summary.json"
    return f"{result}; its files: {output_dir}"


def _listed(run_id: str, link: list[str], env: dict[str, str]) -> dict:
    """The run as `flwr list` shows it (`parse_listed`)."""
    cmd = ["list", *link, "--run-id", run_id, "--format", "json"]
    return parse_listed(flwr(cmd, env, check=False).stdout, run_id)


def _link(federation: str | None) -> list[str]:
    """Where `flwr run/list/log/stop` must look: the named federation, or the local one."""
    return [federation] if federation else []


def _poll(
    run_id: str, env: dict[str, str], deadline: float, link: list[str], output_dir: Path | None
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
    folder = RunFolder(output_dir) if output_dir else None
    while True:
        if output_dir and (written := _last_write(output_dir)) > seen:  # alive: ask later
            seen, next_list = written, max(next_list, time.time() + pause)
        finished = folder is not None and folder.finished
        if time.time() >= next_list or time.time() > deadline or finished:
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

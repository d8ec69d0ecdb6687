"""`pfedgm run`: a run submitted through Flower's CLI and followed to its end, with the helpers
of `flwr_cli`: `flwr run --format json` gives the run id, `flwr log` streams the log
until the SuperLink ends the stream with the run, `flwr list` tells how it ended (`flwr run
--stream` exits 0 even when the run failed) and, for a failed run, the app's own line says why.

The `--run-config` and `--federation-config` values go to Flower as given, for Flower to read.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from pfedgm_app.records.run_folder import RunFolder

from .flwr_cli import (
    UNKNOWN,
    UNKNOWN_ANSWERS,
    flwr,
    flwr_command,
    flwr_json,
    parse_listed,
    submitted_run,
)

APP_LINE = "pFedGM app:"  # the app's log lines; a refused run's cause is its last ERROR one
POLL_SECONDS = 1.0  # between `flwr list`s once a log stream ended before its run


def submit(
    app_dir: Path,
    run_config: Sequence[str],
    federation_config: Sequence[str],
    superlink: str | None,
    env: dict[str, str],
) -> str:
    """Submit the app in `app_dir` (to `superlink`, a connection of `$FLWR_HOME/config.toml`;
    None: the local simulation); return the run id. RuntimeError with Flower's reason when it
    was not submitted."""
    cmd = ["run", str(app_dir), *_link(superlink)]
    for value in run_config:
        cmd += ["--run-config", value]
    for value in federation_config:
        cmd += ["--federation-config", value]
    return submitted_run(flwr([*cmd, "--format", "json"], env, check=False, timeout=300))


def follow(run_id: str, superlink: str | None, env: dict[str, str], stream: bool) -> str:
    """Wait until the run is finished and return its status (`UNKNOWN` when the SuperLink does
    not know it). The log streams here when `stream`; should the stream end before the run (a
    dropped connection), the run is followed again, quietly."""
    unknown = 0
    while True:
        shown = None if stream else subprocess.DEVNULL
        cmd = [flwr_command(), "log", run_id, *_link(superlink)]
        subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, stdout=shown, stderr=shown)
        stream = False
        status = _listed(run_id, superlink, env).get("status", "")
        if status.startswith("finished"):
            return status
        unknown = 0 if status else unknown + 1
        if unknown >= UNKNOWN_ANSWERS:
            return UNKNOWN
        time.sleep(POLL_SECONDS)


def failure(run_id: str, superlink: str | None, env: dict[str, str]) -> str:
    """Why a run did not complete, in one line: the app's last error line in its log, else the
    SuperLink's `status-details`, else where to look."""
    log = flwr(["log", run_id, *_link(superlink), "--show"], env, check=False).stdout
    errors = [line for line in log.splitlines() if APP_LINE in line and "ERROR" in line]
    if errors:
        return errors[-1][errors[-1].index(APP_LINE) :].strip()
    details = _listed(run_id, superlink, env).get("status-details", "")
    return details if details and isinstance(details, str) else f"see flwr log {run_id} --show"


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


def _listed(run_id: str, superlink: str | None, env: dict[str, str]) -> dict:
    cmd = ["list", *_link(superlink), "--run-id", run_id, "--format", "json"]
    return parse_listed(flwr(cmd, env, check=False).stdout, run_id)


def _link(superlink: str | None) -> list[str]:
    return [superlink] if superlink else []

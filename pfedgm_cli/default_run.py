"""What a bare `pfedgm run` runs, and the environment `pfedgm run` gives Flower: a newcomer's
first command needs no flags and no exports.

- `default_run`: the smoke protocol (4 SuperNodes, 2 rounds, a 4,000-image subset of
  CIFAR-10) from the local copy under `<ancestor>/shared/data` where there is one (the
  `-offline` twin), from the hub otherwise, into a fresh folder under `./outputs`.
- `run_env`: `flwr run` starts the managed SuperLink with the environment it is given, and the
  SuperLink gives it to every run; without FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 each
  run installs the app's dependencies from PyPI into a fresh environment (minutes, and a
  failure offline). A value the user set is kept.
- `superlink_ready`: a managed SuperLink already running keeps the environment of its start.
  One started with other values of `WATCHED` is restarted when it runs nothing, and refused in
  one line when it does (restarting it would end that run).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path

from pfedgm_app.runconfig.shared_data import shared_parquet

from .processes import cmdline
from .superlink import stop_local_superlink, superlink_tree

SMOKE_CLIENTS = 4  # the smoke preset's SuperNodes
DEFAULTS = {"FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1", "FLWR_TELEMETRY_ENABLED": "0"}
# what a run reads from its SuperLink's environment and a newcomer might set only later
WATCHED = ("FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION", "HF_HUB_OFFLINE")


def default_run(cwd: Path) -> tuple[list[str], list[str]]:
    """`--run-config` and `--federation-config` values of a bare `pfedgm run`: the smoke
    preset (its `-offline` twin where `shared/data/cifar10` is found above `cwd` or the app),
    its output in `cwd/outputs/smoke-<time>` (absolute: the app runs where the SuperLink
    started)."""
    preset = "smoke-offline" if shared_parquet("cifar10") is not None else "smoke"
    out = Path(cwd).resolve() / "outputs" / f"smoke-{time.strftime('%Y%m%d-%H%M%S')}"
    return [f"preset='{preset}' output-dir='{out}'"], [f"num-supernodes={SMOKE_CLIENTS}"]


def run_env(base: Mapping[str, str]) -> dict[str, str]:
    """`base` with `DEFAULTS` where it does not set them."""
    return {**DEFAULTS, **base}


def superlink_env(flwr_home: Path) -> dict[str, str] | None:
    """The environment the running managed SuperLink of `flwr_home` was started with; None
    when none runs (or it cannot be read)."""
    for pid in sorted(superlink_tree(flwr_home)):
        if "flower-superlink" not in cmdline(pid):
            continue
        try:
            raw = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            return None
        pairs = (item.decode(errors="replace").partition("=") for item in raw.split(b"\0"))
        return {key: value for key, _, value in pairs if key}
    return None


def differences(env: Mapping[str, str], running: Mapping[str, str]) -> list[str]:
    """The `WATCHED` variables whose values differ, as "NAME=value (running: other)"."""
    unset = "unset"
    return [
        f"{name}={env.get(name, unset)} (the SuperLink's: {running.get(name, unset)})"
        for name in WATCHED
        if env.get(name) != running.get(name)
    ]


def superlink_ready(
    flwr_home: Path, env: Mapping[str, str], active_runs: Callable[[], list[str]]
) -> str | None:
    """Make the managed SuperLink of `flwr_home` one that runs with `env`: a line saying it
    was restarted (stopped here; `flwr run` starts a fresh one), or None when nothing had to
    change. RuntimeError, in one line, when it differs but runs `active_runs()`."""
    running = superlink_env(flwr_home)
    if running is None or not (changed := differences(env, running)):
        return None
    if busy := active_runs():
        raise RuntimeError(
            f"the managed SuperLink of {flwr_home} was started with another environment "
            f"({'; '.join(changed)}) and runs {', '.join(busy)}: wait for it to end (or `flwr "
            "stop RUN_ID`), then `pfedgm superlink stop`, and run again"
        )
    stop_local_superlink(flwr_home)
    return f"restarted the managed SuperLink of {flwr_home}: {'; '.join(changed)}"

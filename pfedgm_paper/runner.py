"""Run the missing runs of a grid, one after the other, resumably, with one progress line.

A run whose folder holds `summary.json` is done and skipped; one that left `checkpoint.pt`
continues from it (`resume=true`), so a stopped grid goes on where it stopped. Runs go through
Flower's simulation engine (`flwr run`, `flwr_cli.run_app`) or, from a checkout of the
repository, the in-process driver (`pfedgm_engine.inprocess`: the same per-client results, no
Ray).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pfedgm_app.records.run_folder import RunFolder
from pfedgm_cli.flwr_calls import flwr_command
from pfedgm_cli.flwr_cli import APP_DIR, run_app

from .grid import Run, run_config, supernodes

ENGINES = ("flwr", "inprocess")


@dataclass
class Engine:
    """Where runs go: `name` one of `ENGINES`; `workers` ClientApps at a time (in-process), or
    `cpus` / `gpus` per ClientApp (simulation: parallel ClientApps = CPUs / cpus, or GPUs /
    gpus); `app_dir` the project folder `flwr run` is given."""

    name: str = "flwr"
    workers: int = 1
    cpus: float = 1
    gpus: float = 0
    app_dir: Path = APP_DIR
    env: dict[str, str] = field(default_factory=dict)  # over os.environ, for `flwr`


def rounds_done(folder: Path) -> int:
    """Training rounds a run has finished (`rounds.jsonl` lines); 0 before its first."""
    try:
        return sum(1 for line in RunFolder(folder).rounds.open() if line.strip())
    except OSError:
        return 0


def check_budget(todo: list[Run], out: Path, rounds: int) -> None:
    """A folder holds one budget: a started run of another `num-server-rounds` is refused."""
    for run in todo:
        folder = RunFolder(run.folder(out))
        if folder.config.exists():
            had = folder.read_config().get("num-server-rounds")
            if had != rounds:
                raise ValueError(
                    f"{run.folder(out)} holds a run of {had} rounds, not {rounds}: give "
                    f"--rounds {had}, or another --out for a budget of {rounds}"
                )


class Progress:
    """One line across the grid: runs done, the current run and round, time left (from this
    invocation's seconds per round, so a first estimate comes after a round)."""

    def __init__(self, todo: list[Run], out: Path, rounds: int, write=sys.stdout.write) -> None:
        self.todo, self.out, self.rounds, self.write = todo, out, rounds, write
        self.current: Run | None = None
        self.started, self.start_rounds = time.time(), self.total_done()
        self.tty = sys.stdout.isatty()

    def total_done(self) -> int:
        return sum(min(rounds_done(r.folder(self.out)), self.rounds) for r in self.todo)

    def line(self) -> str:
        done = sum(RunFolder(r.folder(self.out)).finished for r in self.todo)
        total = self.rounds * len(self.todo)
        rounds = self.total_done()
        text = f"grid: {done}/{len(self.todo)} runs done"
        if self.current is not None:
            now = rounds_done(self.current.folder(self.out))
            text += f" | {self.current.label()}: round {now}/{self.rounds}"
        elapsed = time.time() - self.started
        text += f" | {_clock(elapsed)} elapsed"
        if rounds > self.start_rounds:
            left = elapsed / (rounds - self.start_rounds) * (total - rounds)
            text += f" | about {_clock(left)} left"
        return text

    def show(self) -> None:
        self.write(("\r" + self.line() + "\033[K") if self.tty else self.line() + "\n")
        sys.stdout.flush()


def _clock(seconds: float) -> str:
    minutes = int(seconds // 60)
    return f"{minutes // 60}h{minutes % 60:02d}m"


def run_grid(
    todo: list[Run],
    out: Path,
    rounds: int,
    engine: Engine,
    offline: bool = False,
    extra: dict | None = None,
    every: float = 60.0,
    clients: int | None = None,
) -> list[tuple[Run, str]]:
    """Run every run of `todo` without a `summary.json` under `out`, each on its preset's
    SuperNodes (`clients` for a smaller federation). Returns the failures, (run, status); a
    failed run does not stop the grid."""
    check_budget(todo, out, rounds)
    submit = _engine(engine)
    progress = Progress(todo, out, rounds)
    stop = threading.Event()
    ticker = threading.Thread(target=_tick, args=(progress, stop, every), daemon=True)
    ticker.start()
    failures = []
    try:
        for run in todo:
            if RunFolder(run.folder(out)).finished:
                continue
            progress.current = run
            cfg = run_config(run, out, rounds, offline, extra)
            status = submit(cfg, clients or supernodes(run))
            if status != "ok":
                failures.append((run, status))
                sys.stdout.write(f"\n{run.label()}: {status}\n")
    finally:
        stop.set()
        ticker.join()
        progress.current = None
        progress.show()
        sys.stdout.write("\n")
    return failures


def _tick(progress: Progress, stop: threading.Event, every: float) -> None:
    while not stop.is_set():
        progress.show()
        stop.wait(every if not progress.tty else min(every, 5.0))


def _engine(engine: Engine) -> Callable[[dict, int], str]:
    """A function running one run-config on N SuperNodes, returning "ok" or what went wrong."""
    if engine.name == "inprocess":
        from pfedgm_engine.inprocess import APP_DIR, run_inprocess

        if not (APP_DIR / "pyproject.toml").exists():  # the components it loads are named there
            raise ValueError(
                "--engine inprocess runs the app of a checkout (pip install -e .); "
                "an installed copy runs with --engine flwr --app APP_DIR"
            )

        def inprocess(cfg: dict, n: int) -> str:
            try:
                run_inprocess(cfg, n, workers=engine.workers)
            except Exception as exc:  # the run's own error; the grid goes on
                return f"failed: {type(exc).__name__}: {exc}"
            return "ok"

        return inprocess
    if engine.name != "flwr":
        raise ValueError(f"--engine must be one of {ENGINES}, got {engine.name!r}")
    if not (engine.app_dir / "pyproject.toml").exists():
        raise ValueError(
            f"{engine.app_dir} holds no pyproject.toml: give --app, the folder of the "
            "pFedGM app's pyproject.toml"
        )
    flwr_command()  # before any run: a missing `flwr` is one line, not a failed grid
    # The user's Flower environment, as for their own `flwr run` (its FLWR_HOME, its managed
    # SuperLink); these take effect when that SuperLink starts (README, "the environment").
    env = {
        "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
        "FLWR_TELEMETRY_ENABLED": "0",
        **os.environ,
        **engine.env,
    }

    def simulate(cfg: dict, n: int) -> str:
        run = run_app(cfg, n, env, engine.cpus, 7 * 24 * 3600, engine.gpus, engine.app_dir)
        if run.ok:
            return "ok"
        why = [line for line in run.log.splitlines() if line.strip()][-1:] + [run.details]
        return f"{run.status} (flwr run {run.run_id}): " + "; ".join(w for w in why if w)

    return simulate

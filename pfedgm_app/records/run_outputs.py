"""The files of a finished run, written by any ServerApp as the app's own writes them.

A project that runs one of the strategies with Flower's `start` and then its `personalize` round
(examples/quickstart-pfedgm) writes its run's folder with `RunOutputs`, in the app's format
(`run_folder.RunFolder`, docs/outputs.md), so the readers of the app's runs read it too:

    outputs = RunOutputs.start(context.run_config["output-dir"])  # before round 1
    result = strategy.start(grid=grid, initial_arrays=initial, num_rounds=rounds)
    report = strategy.personalize(grid, result.arrays, ConfigRecord())
    outputs.finish(grid, context.run_config, result, report, strategy)

The rules both ServerApps follow are here, once: a folder holding a finished run is refused
before any work (`check_new_run_dir`), a stopped run's files are set aside rather than mixed
with the new run's (`set_aside_unfinished`), `summary.json` reports the personalize round the
same way (`summary_of`) and is written last, and the final evaluation joins the last round's
line of `rounds.jsonl` (`evaluation_row`). The app's `results.RunWriter` adds what only its
own loop knows: a lock, a checkpoint per round, each round's seconds, resuming.
"""

from __future__ import annotations

import os
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from logging import INFO, WARNING
from pathlib import Path
from typing import Any

import flwr
from flwr.common import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result

from pfedgm_app.runconfig.settings import ConfigError
from pfedgm_app.strategies import PersonalizationResult, PersonalizedFedAvg

from .plots import EVAL_MEAN, EVAL_STD
from .run_folder import RunFolder

ACCURACY_NOTE = (
    "percent; mean weighted by client test-set size (as pFedFDA), std across clients (unweighted)"
)
"""summary.json's `accuracy-note`: how its accuracies are computed."""


def check_new_run_dir(run_dir: Path) -> None:
    """Raise `ConfigError` (one line: the folder, what to do) where a new run cannot write
    `run_dir`: it holds a finished run (`summary.json`), which is never overwritten, or the
    nearest folder of it that exists is not writable. Call it before round 1, so that a run
    that cannot keep its results does not train first."""
    if (folder := RunFolder(run_dir)).finished:
        raise ConfigError(
            f"output-dir {run_dir} already holds a finished run ({folder.summary.name}); "
            "choose another output-dir or leave it empty for a fresh timestamped folder"
        )
    existing = next(p for p in (run_dir, *run_dir.parents) if p.exists())
    if not (existing.is_dir() and os.access(existing, os.W_OK | os.X_OK)):
        raise ConfigError(f"cannot create output-dir {run_dir}: {existing} is not writable")


def set_aside_unfinished(folder: RunFolder, keep: Collection[Path] = ()) -> Path | None:
    """Move the files a stopped run left in `folder` (every file but those in `keep`, such as
    the new run's lock) into a new `unfinished-<time>-<random>/` inside it, so that the new
    run's `rounds.jsonl` does not continue the old one's and nothing of the old run is lost.
    Returns that folder, or None when there was nothing to move."""
    leftovers = [p for p in folder.path.iterdir() if p.is_file() and p not in keep]
    if not leftovers:
        return None
    kept = folder.new_unfinished()
    for path in leftovers:
        path.rename(kept / path.name)
    log(WARNING, "output-dir held an unfinished run: its files moved to %s", kept)
    return kept


def summary_of(outcome: PersonalizationResult) -> dict[str, Any]:
    """`summary.json`'s entries for the personalize round, from `strategy.personalize`'s
    result: `mean-accuracy` (weighted by test size), `std-accuracy` (across clients),
    `unweighted-mean-accuracy`, `ablation-mean-accuracy` (every other `acc*` metric's mean),
    `num-clients-evaluated`, `failures` (the clients not evaluated, and why) and the
    `accuracy-note` that says how they are computed; accuracies in percent, None without a
    client evaluated."""
    return {
        "mean-accuracy": outcome.mean_accuracy,
        "std-accuracy": outcome.std_accuracy,
        "unweighted-mean-accuracy": outcome.unweighted_mean_accuracy,
        "accuracy-note": ACCURACY_NOTE,
        "ablation-mean-accuracy": outcome.means,
        "num-clients-evaluated": len(outcome.clients),
        "failures": outcome.failures,
    }


def evaluation_row(
    outcome: PersonalizationResult, by_type: dict[str, dict] | None = None
) -> dict[str, Any]:
    """What an evaluation of the personalized models adds to its round's line of
    `rounds.jsonl`: the mean and std in percent (`plots.EVAL_MEAN`, `EVAL_STD`), and with
    client types, each type's mean (`accuracy-by-type`)."""
    row: dict[str, Any] = {EVAL_MEAN: outcome.mean_accuracy, EVAL_STD: outcome.std_accuracy}
    if by_type:
        row["accuracy-by-type"] = {k: v["mean-accuracy"] for k, v in by_type.items()}
    return row


@dataclass(frozen=True)
class RunOutputs:
    """One run's folder and its start time: `start` checks the folder before round 1 and
    writes nothing (a run that fails leaves no folder behind); `finish` writes the run's files
    when it is over, `summary.json` last."""

    folder: RunFolder
    """The run's folder (`output-dir`, resolved)."""
    started: float
    """`time.time()` at `start`: summary.json's `seconds-total` counts from it."""

    @classmethod
    def start(cls, output_dir: str | Path) -> RunOutputs:
        """The outputs of a run into `output_dir`, checked now (`check_new_run_dir`). Give an
        absolute path: a relative one is resolved against the ServerApp's working directory,
        which under `flwr run` is where the managed SuperLink was first started."""
        run_dir = Path(output_dir).expanduser().resolve()
        check_new_run_dir(run_dir)
        return cls(RunFolder(run_dir), time.time())

    def finish(
        self,
        grid: Grid,
        run_config: Mapping[str, Any],
        result: Result,
        outcome: PersonalizationResult,
        strategy: PersonalizedFedAvg | None = None,
    ) -> dict[str, Any]:
        """Write the run's files into the folder, in the app's format (docs/outputs.md):

        - `config.json`: `run_config`, `num-clients` (the grid's nodes now) and the Flower
          version;
        - `rounds.jsonl`: one line per round of `result.train_metrics_clientapp` (the
          aggregated train metrics, `round`), the last one with the personalized accuracy
          (`evaluation_row`);
        - `global_model.safetensors`: `result.arrays` (none when no round updated them);
        - `clients.csv`: `outcome.clients`, one row per client evaluated, accuracies in percent;
        - `summary.json`, last: `rounds` (`num-server-rounds` of `run_config`, else the last
          round), `num-clients`, `strategy` (its class), `summary_of(outcome)`,
          `seconds-total`, `output-dir`; with `strategy`, its `dropped-replies`, `suspects`
          and `rounds-without-update` (rounds whose aggregate was not used, and why).

        A stopped run's files found in the folder are set aside first. Returns the summary as
        `RunFolder.read_summary` reads it back."""
        from .initial_model import save_state  # torch, where used: the strategies need none

        folder, rounds = self.folder, result.train_metrics_clientapp
        check_new_run_dir(folder.path)  # another run may have finished there meanwhile
        folder.path.mkdir(parents=True, exist_ok=True)
        set_aside_unfinished(folder)
        num_clients = len(list(grid.get_node_ids()))
        config = {**run_config, "num-clients": num_clients, "flwr-version": flwr.__version__}
        folder.write_config(config)
        last = int(run_config.get("num-server-rounds", max(rounds, default=0)))
        lines = [{**dict(rounds[r]), "round": r} for r in sorted(rounds)]
        if not lines or lines[-1]["round"] != last:
            lines.append({"round": last})
        lines[-1].update(evaluation_row(outcome))
        folder.write_rounds(lines)
        if len(result.arrays):
            save_state(result.arrays.to_torch_state_dict(), folder.global_model)
        folder.write_clients(outcome.clients)
        summary = {
            "rounds": last,
            "num-clients": num_clients,
            "strategy": type(strategy).__name__ if strategy is not None else None,
            **summary_of(outcome),
            "seconds-total": time.time() - self.started,
            "output-dir": str(folder.path),
        }
        if strategy is not None:
            summary["dropped-replies"] = list(strategy.dropped)
            summary["suspects"] = list(strategy.suspects)
            summary["rounds-without-update"] = {
                str(r): strategy.round_problem(r) or "no reply could be used (dropped-replies)"
                for r in range(1, last + 1)
                if "num-clients" not in rounds.get(r, {})  # set only with an aggregate
            }
        folder.write_summary(summary)
        log(INFO, "pFedGM outputs: %s", folder.path)
        return folder.read_summary()

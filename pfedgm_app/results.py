"""What a run writes to `output-dir` and logs: config, per-round metrics, the final global
weights, per-client accuracies and `summary.json`. Files are written as the run goes, so
nothing already written is lost if a later step fails.
"""

from __future__ import annotations

import csv
import json
import tempfile
import time
from logging import INFO, WARNING
from pathlib import Path
from typing import Any

import flwr
import torch
from flwr.app import ArrayRecord, MetricRecord
from flwr.common import log

from .config import ConfigError, RunConfig, Settings
from .strategies import PersonalizationResult


class RunWriter:
    """Writes one run's outputs into `run_dir` and keeps its clock (`mark` names a moment:
    `started`, `rounds`, `trained`; `on_round` times each round).
    """

    def __init__(self, run_dir: Path, started: float | None = None) -> None:
        self.run_dir = run_dir
        self.times = {"started": time.time() if started is None else started}

    @classmethod
    def create(cls, cfg: RunConfig, started: float | None = None) -> RunWriter:
        """`output-dir` as given, or `outputs/<time>-<method>` when empty; refuses to overwrite
        a finished run. Files of an unfinished run there (one that was stopped) move to
        `unfinished-<time>-<random>/`, so the new run's `rounds.jsonl` does not continue the
        old one's.
        """
        stamp = time.strftime("%Y%m%d-%H%M%S")
        run_dir = Path(cfg.output_dir or f"outputs/{stamp}-{cfg.method}").expanduser().resolve()
        if (run_dir / "summary.json").exists():
            raise ConfigError(
                f"output-dir {run_dir} already holds a finished run (summary.json); "
                "choose another output-dir or leave it empty for a fresh timestamped folder"
            )
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            leftovers = [p for p in run_dir.iterdir() if p.is_file()]
            if leftovers:  # mkdtemp: two runs stopped in the same second get distinct folders
                kept = Path(tempfile.mkdtemp(prefix=f"unfinished-{stamp}-", dir=run_dir))
                for path in leftovers:
                    path.rename(kept / path.name)
                log(WARNING, "output-dir held an unfinished run: its files moved to %s", kept)
        except OSError as exc:
            raise ConfigError(f"cannot prepare output-dir {run_dir}: {exc}") from exc
        return cls(run_dir, started)

    def write_json(self, name: str, payload: Any) -> Path:
        path = self.run_dir / name
        path.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")
        return path

    def mark(self, moment: str) -> None:
        self.times[moment] = time.time()

    def write_config(self, cfg: RunConfig, settings: Settings, num_clients: int) -> None:
        """`config.json`: the run's settings (common and its method's), as run-config keys."""
        config = {**cfg.to_run_config(), **settings.to_run_config()}
        self.write_json(
            "config.json", {**config, "num-clients": num_clients, "flwr-version": flwr.__version__}
        )
        log(INFO, "pFedGM app: method=%s, %d clients, outputs in %s", cfg.method, num_clients,
            self.run_dir)  # fmt: skip

    def append_round(self, server_round: int, metrics: MetricRecord | None, **extra) -> None:
        row = {"round": server_round, **dict(metrics or {}), **extra}
        with open(self.run_dir / "rounds.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")

    def on_round(
        self, server_round: int, arrays: ArrayRecord, metrics: MetricRecord | None
    ) -> None:
        """A strategy's `on_round` hook: one line of `rounds.jsonl` with the round's seconds."""
        now = time.time()
        last = self.times.get("round", self.times.get("rounds", now))
        self.append_round(server_round, metrics, seconds=now - last)
        self.times["round"] = now

    def save_weights(self, arrays: ArrayRecord) -> Path:
        path = self.run_dir / "global_model.pt"
        torch.save(arrays.to_torch_state_dict(), path)
        return path

    def write_clients(self, rows: list[dict[str, float]]) -> Path:
        path = self.run_dir / "clients.csv"
        keys = sorted({k for r in rows for k in r}, key=lambda k: (k != "partition-id", k))
        rows = sorted(rows, key=lambda r: r.get("partition-id", 0))
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=keys)
            writer.writeheader()
            writer.writerows(rows)
        return path

    def finish(self, cfg: RunConfig, num_clients: int, outcome: PersonalizationResult) -> dict:
        """Write `clients.csv` and `summary.json`, and log the summary; returns the summary."""
        self.write_clients(outcome.clients)
        self.mark("finished")
        t = self.times
        summary = {
            "method": cfg.method,
            "dataset": cfg.dataset,
            "dirichlet_alpha": cfg.dirichlet_alpha,
            "num_clients": num_clients,
            "rounds": cfg.num_server_rounds,
            "fraction_train": cfg.fraction_train,
            "mean_accuracy": outcome.mean_accuracy,
            "std_accuracy": outcome.std_accuracy,
            "unweighted_mean_accuracy": outcome.unweighted_mean_accuracy,
            "accuracy_note": "percent; mean weighted by client test-set size (as pFedFDA), "
            "std across clients (unweighted)",
            "ablation_mean_accuracy": outcome.means,
            "num_clients_evaluated": len(outcome.clients),
            "failures": outcome.failures,
            "seconds_total": t["finished"] - t["started"],
            "seconds_training": t["trained"] - t["started"],
            "seconds_per_round": (t["trained"] - t["rounds"]) / cfg.num_server_rounds,
            "seconds_personalize": t["finished"] - t["trained"],
            "output_dir": str(self.run_dir),
        }
        self.write_json("summary.json", summary)
        log_summary(summary, outcome)
        return summary


def log_summary(summary: dict, outcome: PersonalizationResult) -> None:
    """The closing lines of the ServerApp's log."""
    log(INFO, "")
    log(INFO, "pFedGM app summary: method=%s dataset=%s alpha=%s clients=%d rounds=%d",
        summary["method"], summary["dataset"], summary["dirichlet_alpha"],
        summary["num_clients"], summary["rounds"])  # fmt: skip
    log(INFO, "  personalized test accuracy: %.2f (%.2f) %% [mean weighted by test size (std "
        "across clients)]", outcome.mean_accuracy, outcome.std_accuracy)  # fmt: skip
    for key, value in outcome.means.items():
        log(INFO, "  %s: %.2f %%", key, value)
    if outcome.failures:
        log(WARNING, "  %d client(s) failed: %s", len(outcome.failures), outcome.failures)
    log(INFO, "  outputs: %s", summary["output_dir"])

"""What a run writes to `output-dir` (through `run_folder.RunFolder`, which names, formats and
reads back each file) and logs: config, per-round metrics, the final global weights,
per-client accuracies and the summary. Files are written as the run goes, so nothing already
written is lost if a later step fails.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from logging import INFO, WARNING
from pathlib import Path

import flwr
from flwr.app import ArrayRecord, MetricRecord
from flwr.common import log

from pfedgm_app.protocol import wire
from pfedgm_app.runconfig.common import RunConfig
from pfedgm_app.runconfig.settings import ConfigError, Settings
from pfedgm_app.strategies import PersonalizationResult, summarize

from . import checkpoint, initial_model
from .plots import dataset_label, plot_rounds
from .progress import round_line
from .run_folder import RunFolder
from .run_outputs import check_new_run_dir, evaluation_row, set_aside_unfinished, summary_of
from .tracking import Tracking

ELAPSED = "seconds-elapsed"  # rounds.jsonl: the run's wall seconds so far, over its sittings


class RunWriter:
    """Writes one run's outputs into `run_dir` and keeps its clock (`mark` names a moment:
    `started`, `rounds`, `trained`; `on_round` times each round).
    """

    def __init__(self, run_dir: Path, started: float | None = None) -> None:
        self.run_dir = run_dir
        self.times = {"started": time.time() if started is None else started}
        self.rounds_run = 0  # rounds trained in this sitting (fewer than all when resumed)
        self.fresh = False  # a new run's folder, made (and cleared) by its first write
        self.lock: checkpoint.FolderLock | None = None  # held while the run writes here
        self.resumed_after = 0  # rounds of an earlier sitting (`resume`)
        self.earlier = 0.0  # wall seconds of the earlier sittings, up to their last checkpoint
        self.dropped: list[str] = []  # Phase 1's dropped replies ("round r: node n: why")
        self.rounds_without_update: dict[int, str] = {}  # round -> why nothing was aggregated
        self.suspects: list[str] = []  # replies that moved a round beyond one client's worth
        self.largest_share: dict[str, float] = {}  # the largest share of a step one node had
        self.privacy: dict = {}  # a DP run's epsilon spent and how (`ClientLevelDP.record`)
        self.rounds_before = 0  # rounds that trained its `initial-model` (summary's)
        self.last_round = 0  # num-server-rounds (`write_config`), for the time left
        self.tracking: Tracking | None = None  # `tracker` (opened by `write_config`)

    @classmethod
    def create(cls, cfg: RunConfig, settings: Settings, started: float | None = None) -> RunWriter:
        """`output-dir` as given, or `outputs/<time>-<method>` when empty; refuses to overwrite
        a finished run. Nothing is written until `write_config` (after the federation's
        checks), so a run that cannot start leaves no folder behind.
        """
        stamp = time.strftime("%Y%m%d-%H%M%S")
        run_dir = Path(cfg.output_dir or f"outputs/{stamp}-{cfg.method}").expanduser().resolve()
        if cfg.resume:  # the same experiment only, and one live run at a time
            checkpoint.check_resume(run_dir, {**cfg.to_run_config(), **settings.to_run_config()})
            writer = cls(run_dir, started)
            writer.lock = checkpoint.FolderLock(run_dir)
            return writer
        check_new_run_dir(run_dir)
        writer = cls(run_dir, started)
        writer.fresh = True
        return writer

    def _prepare(self) -> None:
        """Create the folder of a fresh run; files of an unfinished run there (one that was
        stopped) move to `unfinished-<time>-<random>/`, so the new run's `rounds.jsonl` does
        not continue the old one's."""
        if not self.fresh:
            return
        self.fresh = False
        run_dir = self.run_dir
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            self.lock = checkpoint.FolderLock(run_dir)
            set_aside_unfinished(self.folder, keep={self.lock.path})
        except OSError as exc:
            raise ConfigError(f"cannot prepare output-dir {run_dir}: {exc}") from exc

    def cut_rounds(self, done: int) -> None:
        """A resumed run's `rounds.jsonl` keeps rounds 1..done (a round logged after the last
        checkpoint is run again)."""
        kept = [r for r in self.folder.read_rounds() if r["round"] <= done]
        self.folder.write_rounds(kept)
        self.resumed_after = done
        # rows written before ELAPSED existed: the sum of their rounds' seconds, a lower bound
        last = kept[-1] if kept else {}
        self.earlier = last.get(ELAPSED) or sum(r.get("seconds", 0.0) for r in kept)
        log(INFO, "pFedGM app: resuming %s after round %d", self.run_dir, done)

    @property
    def folder(self) -> RunFolder:
        """`run_dir`'s files, by name."""
        return RunFolder(self.run_dir)

    def close(self) -> None:
        """Release the folder for other runs (the end of the run, or its failure)."""
        if self.lock is not None:
            self.lock.release()

    def mark(self, moment: str) -> None:
        self.times[moment] = time.time()

    def write_config(self, cfg: RunConfig, settings: Settings, num_clients: int) -> None:
        """`config.json`: the run's settings (common and its method's), as run-config keys. A
        resumed run's must have the stopped run's clients (checked before it is rewritten)."""
        if cfg.resume:
            checkpoint.check_clients(self.run_dir, num_clients, cfg.min_nodes)
        self.last_round = cfg.num_server_rounds
        self._prepare()
        config = {**cfg.to_run_config(), **settings.to_run_config()}
        self.folder.write_config(
            {**config, "num-clients": num_clients, "flwr-version": flwr.__version__}
        )
        self.tracking = Tracking(cfg.tracker, self.run_dir, config, cfg.tracker_name,
                                 cfg.tracker_group)  # fmt: skip
        log(
            INFO,
            "pFedGM app: method=%s, %d clients, outputs in %s",
            cfg.method,
            num_clients,
            self.run_dir,
        )

    def append_round(self, server_round: int, metrics: MetricRecord | None, **extra) -> None:
        """One line of `rounds.jsonl`: the round's metrics, under the server's own keys (the
        round, its seconds, its evaluation), strict JSON (a non-finite number is null)."""
        self.folder.append_round({**dict(metrics or {}), "round": server_round, **extra})

    def on_round(
        self, server_round: int, arrays: ArrayRecord, metrics: MetricRecord | None, **extra
    ) -> None:
        """A strategy's `on_round` hook: one line of `rounds.jsonl` with the round's seconds
        (training and aggregation; an evaluation of the round, in `extra`, is not counted) and
        the run's wall seconds so far, over all its sittings (`ELAPSED`)."""
        self.rounds_run += 1
        now = time.time()
        last = self.times.get("round", self.times.get("rounds", now))
        elapsed = self.earlier + now - self.times["started"]
        self.append_round(server_round, metrics, seconds=now - last, **extra, **{ELAPSED: elapsed})
        row = {**dict(metrics or {}), "round": server_round, "seconds": now - last, **extra}
        if self.tracking is not None:
            self.tracking.log_round(server_round, row | {ELAPSED: elapsed})
        pace = (self.rounds_run, now - self.times.get("rounds", now))  # this sitting's
        log(INFO, "%s", round_line(row | {ELAPSED: elapsed}, self.last_round, *pace))
        self.times["round"] = time.time()

    def save_weights(self, arrays: ArrayRecord) -> Path:
        """The final global arrays as `global_model.safetensors` (`initial_model.save_state`:
        safetensors' `save_file`, no pickle), which `initial-model` and the paper's t-SNE read."""
        return initial_model.save_state(arrays.to_torch_state_dict(), self.folder.global_model)

    def write_clients(self, rows: list[dict[str, float]]) -> Path:
        """`clients.csv` from the personalize replies' rows (accuracies as fractions)."""
        self.folder.write_clients(rows)
        return self.folder.clients

    def finish(
        self,
        cfg: RunConfig,
        num_clients: int,
        outcome: PersonalizationResult,
        by_type: dict[str, dict] | None = None,
    ) -> dict:
        """Write `clients.csv` and `summary.json` (with `accuracy-by-type` when given), plot the
        accuracy per round when the run evaluated during training, and log the summary;
        returns the summary (as `RunFolder.read_summary` reads it back)."""
        self.write_clients(outcome.clients)
        self.mark("finished")
        t = self.times
        summary = {
            "method": cfg.method,
            "dataset": cfg.dataset,
            "dirichlet-alpha": cfg.dirichlet_alpha,
            "num-clients": num_clients,
            "rounds": cfg.num_server_rounds,
            "fraction-train": cfg.fraction_train,
            **summary_of(outcome),  # as any ServerApp's (`run_outputs.RunOutputs`)
            "seconds-total": self.earlier + t["finished"] - t["started"],
            "seconds-training": t["trained"] - t["started"],
            "seconds-per-round": (t["trained"] - t["rounds"]) / max(self.rounds_run, 1),
            "seconds-personalize": t["finished"] - t["trained"],
            "output-dir": str(self.run_dir),
        }
        if cfg.protocol != "standard":
            summary["protocol"] = cfg.protocol
        summary |= {"rounds-before": self.rounds_before} if self.rounds_before else {}
        if self.resumed_after:  # seconds-total spans the sittings; the other seconds, this one's
            summary["resumed-after-round"] = self.resumed_after
        if by_type:
            summary["accuracy-by-type"] = by_type
        summary["dropped-replies"] = self.dropped
        summary["suspects"] = list(self.suspects)
        summary["largest-share"] = dict(self.largest_share)
        summary |= {"privacy": self.privacy} if self.privacy else {}
        summary["rounds-without-update"] = {
            str(r): w for r, w in self.rounds_without_update.items()
        }
        self.add_final_evaluation(cfg.num_server_rounds, evaluation_row(outcome, by_type))
        self.folder.write_summary(summary)
        title = f"{cfg.method} on {dataset_label(cfg.dataset)}, Dir({cfg.dirichlet_alpha:g})"
        plot_rounds(self.run_dir, title)
        log_summary(summary, outcome)
        if self.tracking is not None:
            self.tracking.finish(cfg.num_server_rounds, summary, outcome.clients)
        return self.folder.read_summary()

    def training_problems(
        self, dropped: list[str], rounds_without_update: dict[int, str], suspects: list[str]
    ) -> None:
        """What `summary.json` reports of Phase 1: every reply dropped ("round r: node n:
        why"), every round whose aggregate was not used, with why, and the strategy's
        `suspects` (the list itself: the personalize round may still add to it)."""
        self.dropped, self.rounds_without_update = list(dropped), dict(rounds_without_update)
        self.suspects = suspects

    def add_final_evaluation(self, last_round: int, row: dict) -> None:
        """Phase 2's outcome joins the last round's line of `rounds.jsonl`, so the file holds
        every personalized evaluation."""
        rows = self.folder.read_rounds()
        if rows and rows[-1]["round"] == last_round:
            rows[-1].update(row)
        else:  # no round trained in this sitting, or none logged: a line of its own
            rows.append({"round": last_round, **row})
        self.folder.write_rounds(rows)


def accuracy_by_type(
    rows: list[dict[str, float]], client_type: Callable[[int], str]
) -> dict[str, dict]:
    """{type: mean (weighted by test size), std and number of clients} over the clients of
    each type ('clean' or a corruption; `data.Protocol.client_type`), in percent."""
    groups: dict[str, list[dict[str, float]]] = {}
    for row in rows:
        groups.setdefault(client_type(int(row[wire.PARTITION_ID])), []).append(row)
    result = {}
    for kind, members in sorted(groups.items()):
        stats = summarize(members, [])
        result[kind] = {
            "mean-accuracy": stats.mean_accuracy,
            "std-accuracy": stats.std_accuracy,
            "clients": len(members),
        }
    return result


def log_summary(summary: dict, outcome: PersonalizationResult) -> None:
    """The closing lines of the ServerApp's log."""
    log(INFO, "")
    log(
        INFO,
        "pFedGM app summary: method=%s dataset=%s alpha=%s clients=%d rounds=%d",
        summary["method"],
        summary["dataset"],
        summary["dirichlet-alpha"],
        summary["num-clients"],
        summary["rounds"],
    )
    if outcome.mean_accuracy is None:
        log(WARNING, "  personalized test accuracy: none, no client could be evaluated")
    else:
        log(
            INFO,
            "  personalized test accuracy: %.2f (%.2f) %% [mean weighted by test size "
            "(std across clients)]",
            outcome.mean_accuracy,
            outcome.std_accuracy,
        )
    for kind, stats in summary.get("accuracy-by-type", {}).items():
        log(
            INFO,
            "  %s: %.2f (%.2f) %% over %d clients",
            kind,
            stats["mean-accuracy"],
            stats["std-accuracy"],
            stats["clients"],
        )
    for key, value in outcome.means.items():
        log(INFO, "  %s: %.2f %%", key, value)
    if outcome.failures:
        log(WARNING, "  %d client(s) failed: %s", len(outcome.failures), outcome.failures)
    log(INFO, "  outputs: %s", summary["output-dir"])
    if privacy := summary.get("privacy"):  # what the model and its step reveal, in a number
        spent = "  client-level DP: epsilon %.3g at delta %g spent over %d rounds; outside it: %s"
        keys = ("epsilon", "delta", "releases", "outside")
        log(INFO, spent, *(privacy[k] for k in keys))
    if suspects := summary.get("suspects"):  # last: a result moved by a client is not clean
        why = "%d client record(s) moved it beyond one client's worth, summary.json 'suspects'"
        log(WARNING, "  the result is suspect: " + why, len(suspects))
